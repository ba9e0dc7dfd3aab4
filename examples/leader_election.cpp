// Leader election: two candidates campaign, an observer prints every leader, the leader
// proclaims a new value and resigns, and the other one takes over.
//   leader_election [ENDPOINT]
#include <coetcd.hpp>

#include <boost/asio.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>

#include <iostream>

namespace asio = boost::asio;
using asio::use_awaitable;

// Prints every leader until node-b has led and resigned.
asio::awaitable<void> observe(coetcd::election_observer& obs) {
  bool seen_b = false;
  for (;;) {
    auto leader = co_await obs.async_next(use_awaitable);
    std::cout << "  observer: " << (leader ? "leader is " + leader->value : std::string("no leader")) << "\n";
    if (leader && leader->value == "node-b") seen_b = true;
    if (!leader && seen_b) co_return;
  }
}

asio::awaitable<void> node_a(coetcd::election& e) {
  auto lead = co_await e.async_campaign("node-a", use_awaitable);
  std::cout << "node-a leads (revision " << lead.fencing_token() << ")\n";
  asio::steady_timer t(co_await asio::this_coro::executor, std::chrono::milliseconds(300));
  co_await t.async_wait(use_awaitable);
  co_await lead.async_proclaim("node-a (draining)", use_awaitable);
  co_await t.async_wait(use_awaitable);
  co_await lead.async_release(use_awaitable);  // resigns
  std::cout << "node-a resigned\n";
}

asio::awaitable<void> node_b(coetcd::election& e) {
  asio::steady_timer t(co_await asio::this_coro::executor, std::chrono::milliseconds(100));
  co_await t.async_wait(use_awaitable);  // campaign second: waits until node-a is gone
  auto lead = co_await e.async_campaign("node-b", use_awaitable);
  std::cout << "node-b leads (revision " << lead.fencing_token() << ")\n";
  co_await lead.async_release(use_awaitable);
}

asio::awaitable<void> run(coetcd::client& etcd) {
  using namespace asio::experimental::awaitable_operators;
  coetcd::election_observer obs(etcd, "services/scheduler");
  auto s1 = co_await coetcd::session::async_create(etcd, use_awaitable);
  auto s2 = co_await coetcd::session::async_create(etcd, use_awaitable);
  coetcd::election a(s1, "services/scheduler"), b(s2, "services/scheduler");
  co_await (observe(obs) && node_a(a) && node_b(b));  // all three at once
  co_await s1.async_close(use_awaitable);
  co_await s2.async_close(use_awaitable);
}

int main(int argc, char** argv) {
  asio::io_context ioc;
  coetcd::client etcd(ioc, {.endpoints = {argc > 1 ? argv[1] : "127.0.0.1:2379"}});
  int rc = 0;
  asio::co_spawn(ioc, run(etcd), [&](std::exception_ptr e) {
    etcd.close();
    if (!e) return;
    rc = 1;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      std::cerr << "leader_election failed: " << ex.what() << "\n";
    }
  });
  ioc.run();
  return rc;
}
