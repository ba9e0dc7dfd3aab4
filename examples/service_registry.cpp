// Service discovery in Go's naming/endpoints layout: two instances of "services/api" keep their
// endpoint registered (coetcd::registration); a client follows the list from a cache. One
// instance's lease is revoked: it is registered again on a fresh session; the other stops: it
// leaves the list.
//   service_registry [ENDPOINT]
#include <coetcd.hpp>
#include <coetcd/naming.hpp>
#include <coetcd/registration.hpp>

#include <boost/asio.hpp>

#include <iostream>

namespace asio = boost::asio;
using asio::use_awaitable;
using namespace std::chrono_literals;

asio::awaitable<void> wait_until(auto done) {
  asio::steady_timer t(co_await asio::this_coro::executor);
  while (!done()) {
    t.expires_after(10ms);
    co_await t.async_wait(use_awaitable);
  }
}

void print(const coetcd::cache& view) {
  std::cout << "endpoints:";
  for (auto& [key, e] : coetcd::naming::endpoints(view)) std::cout << " " << key << "=" << e.addr;
  std::cout << "\n";
}

asio::awaitable<void> run(coetcd::client& etcd) {
  coetcd::cache view(etcd.get_executor(), etcd, "services/api/");  // one thread runs the io_context
  co_await view.async_wait_synced(use_awaitable);

  // Each instance: `services/api/<id>` = {"Op":0,"Addr":"...","Metadata":...}, as Go's Manager writes.
  coetcd::registration one(etcd, coetcd::naming::key("services/api", "i1"),
                           coetcd::naming::encode({"10.0.0.1:8080", R"({"zone":"a"})"}), {.ttl = 5s});
  coetcd::registration two(etcd, coetcd::naming::key("services/api", "i2"), coetcd::naming::encode({"10.0.0.2:8080"}),
                           {.ttl = 5s});
  asio::cancellation_signal stop_two;
  one.async_run(asio::detached);
  two.async_run(asio::bind_cancellation_slot(stop_two.slot(), asio::detached));
  co_await wait_until([&] { return coetcd::naming::endpoints(view).size() == 2; });
  print(view);

  co_await etcd.async_lease_revoke(one.lease(), use_awaitable);  // i1's session dies
  co_await wait_until([&] { return one.puts() == 2 && one.is_registered(); });
  std::cout << "i1 registered again on a new lease\n";

  stop_two.emit(asio::cancellation_type::terminal);  // i2 shuts down: its key goes with its session
  co_await wait_until([&] { return coetcd::naming::endpoints(view).size() == 1; });
  print(view);
}

int main(int argc, char** argv) {
  asio::io_context ioc;
  coetcd::client etcd(ioc, {.endpoints = {argc > 1 ? argv[1] : "127.0.0.1:2379"}});
  int status = 0;
  asio::co_spawn(ioc, run(etcd), [&](std::exception_ptr e) {
    if (e) {
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& x) {
        std::cerr << "error: " << x.what() << "\n";
      }
      status = 1;
    }
    etcd.close();
  });
  ioc.run();
  return status;
}
