// Not waiting forever: try_lock (take it only if free) and a lock with a deadline, which ends in
// one of three ways: timed out, acquired, or failed. Two sessions stand for two processes.
//   lock_timeout_try [ENDPOINT]
#include <coetcd.hpp>

#include <boost/asio.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>

#include <iostream>
#include <string>

namespace asio = boost::asio;
using namespace asio::experimental::awaitable_operators;
using asio::use_awaitable;
constexpr auto no_throw = asio::as_tuple(use_awaitable);

// bob's lock, given at most 1 s, and what truly came of it: each of the three ways it can end
// is told apart (the deadline first, the lock first with an error, the lock first with the hold).
asio::awaitable<std::string> lock_within_1s(coetcd::mutex& m) {
  // Whichever finishes first cancels the other; a cancelled lock completes at once and bob's
  // waiting key is deleted in the background. (Boost 1.86+: asio::cancel_after.)
  asio::steady_timer deadline(co_await asio::this_coro::executor, std::chrono::seconds(1));
  auto r = co_await (m.async_lock(no_throw) || deadline.async_wait(no_throw));
  if (r.index() == 1) co_return "timed out";
  auto& [ec, held] = std::get<0>(r);
  if (ec) co_return "failed: " + ec.message();  // the lock finished first, without the lock
  std::string taken = "acquired " + held.key();
  co_await held.async_release(use_awaitable);
  co_return taken;
}

asio::awaitable<void> run(coetcd::client& etcd) {
  auto alice = co_await coetcd::session::async_create(etcd, use_awaitable);
  coetcd::session_options short_ttl{.ttl = std::chrono::seconds(3)};  // a loss is seen within ~1 s
  auto bob = co_await coetcd::session::async_create(etcd, short_ttl, use_awaitable);
  coetcd::mutex a(alice, "printer"), b(bob, "printer");

  auto held_by_alice = co_await a.async_try_lock(use_awaitable);  // free: taken at once
  std::cout << "alice took " << held_by_alice.key() << " with try_lock\n";

  auto [busy, none] = co_await b.async_try_lock(no_throw);  // held: error::locked, no key left behind
  std::cout << "bob's try_lock: " << busy.message() << "\n";

  std::cout << "bob's lock with a 1 s deadline, alice holding: " << co_await lock_within_1s(b) << "\n";
  co_await held_by_alice.async_release(use_awaitable);
  std::cout << "bob's lock with a 1 s deadline, alice released it: " << co_await lock_within_1s(b) << "\n";

  // Bob's lease revoked (an operator, or a pause longer than its TTL): his lock fails at once.
  co_await etcd.async_lease_revoke(bob.lease(), use_awaitable);
  co_await bob.async_wait_lost(use_awaitable);
  std::cout << "bob's lock with a 1 s deadline, his session lost: " << co_await lock_within_1s(b) << "\n";
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
