// Not waiting forever: try_lock (take it only if free) and a lock with a deadline. Two sessions
// stand for two processes.
//   lock_timeout_try [ENDPOINT]
#include <coetcd.hpp>

#include <boost/asio.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>

#include <iostream>

namespace asio = boost::asio;
using namespace asio::experimental::awaitable_operators;
using asio::use_awaitable;
constexpr auto no_throw = asio::as_tuple(use_awaitable);

asio::awaitable<void> run(coetcd::client& etcd) {
  auto alice = co_await coetcd::session::async_create(etcd, use_awaitable);
  auto bob = co_await coetcd::session::async_create(etcd, use_awaitable);
  coetcd::mutex a(alice, "printer"), b(bob, "printer");

  auto held_by_alice = co_await a.async_try_lock(use_awaitable);  // free: taken at once
  std::cout << "alice took " << held_by_alice.key() << " with try_lock\n";

  auto [busy, none] = co_await b.async_try_lock(no_throw);  // held: error::locked, no key left behind
  std::cout << "bob's try_lock: " << busy.message() << "\n";

  // Wait at most 500 ms. Whichever finishes first cancels the other; a cancelled lock removes
  // bob's waiting key before it completes, so nothing is left on the server.
  asio::steady_timer deadline(co_await asio::this_coro::executor, std::chrono::milliseconds(500));
  auto r = co_await (b.async_lock(no_throw) || deadline.async_wait(no_throw));
  if (r.index() == 1) std::cout << "bob's lock with a 500 ms deadline: timed out\n";
  else if (auto& [ec, got] = std::get<0>(r); ec) std::cout << "bob's lock with a 500 ms deadline: " << ec.message() << "\n";
  else std::cout << "bob's lock with a 500 ms deadline: acquired\n";

  co_await held_by_alice.async_release(use_awaitable);
  auto held_by_bob = co_await b.async_lock(use_awaitable);  // now free
  std::cout << "bob took " << held_by_bob.key() << " after alice released it\n";
  co_await held_by_bob.async_release(use_awaitable);
  co_await alice.async_close(use_awaitable);
  co_await bob.async_close(use_awaitable);
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
      std::cerr << "lock_timeout_try failed: " << ex.what() << "\n";
    }
  });
  ioc.run();
  return rc;
}
