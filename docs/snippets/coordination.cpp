// The snippets of docs/coordination.md, compiled so they follow the API (scripts/snippets copies them there).
#include <coetcd.hpp>
#include <coetcd/cache.hpp>
#include <coetcd/leader.hpp>
#include <coetcd/naming.hpp>
#include <coetcd/queue.hpp>
#include <coetcd/registration.hpp>

#include <boost/asio.hpp>

#include <chrono>

namespace asio = boost::asio;
using asio::use_awaitable;
using namespace std::chrono_literals;

void connect(const std::string& addr);

asio::awaitable<void> schedule(coetcd::client& client, asio::steady_timer& timer) {
  // [leader]
  coetcd::leader scheduler(client, "services/scheduler", {.value = "10.0.0.1:9000", .ttl = 10s});
  auto body = [&](coetcd::election::hold& term) -> asio::awaitable<void> {
    for (;;) {  // leader work; cancelled the moment the term ends
      auto write = coetcd::txn().when(term.fence()).then(coetcd::txn_op::put("jobs/next", "..."));
      co_await client.async_txn(write, use_awaitable);  // refused by etcd once the term is over
      co_await timer.async_wait(use_awaitable);
    }
  };
  co_await scheduler.async_run(body, use_awaitable);  // until cancelled, or a failure no retry mends
  // [leader]
}

asio::awaitable<void> register_and_discover(coetcd::client& client) {
  // [registration]
  coetcd::registration self(client, coetcd::naming::key("services/api", "i1"),
                            coetcd::naming::encode({"10.0.0.1:8080", R"({"zone":"a"})"}), {.ttl = 10s});
  self.async_run(asio::detached);  // kept until cancelled or destroyed

  coetcd::cache view(client.get_executor(), client, "services/api/");
  co_await view.async_wait_synced(use_awaitable);
  for (auto& [key, endpoint] : coetcd::naming::endpoints(view)) connect(endpoint.addr);
  // [registration]
}

asio::awaitable<void> work(coetcd::session& session) {
  // [queue]
  coetcd::queue jobs(session, "jobs");                       // one object per process
  co_await jobs.async_enqueue("resize:img-17", use_awaitable);
  auto job = co_await jobs.async_dequeue(use_awaitable);      // waits until there is one
  // [queue]
}
