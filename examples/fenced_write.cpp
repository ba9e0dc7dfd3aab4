// Why a lease-based lock needs fencing: a holder that stalls past its TTL loses the lock without
// knowing it. Writes guarded by the hold's fence or by its fencing token are rejected once
// someone else holds it.
//   fenced_write [ENDPOINT]
#include <coetcd.hpp>

#include <boost/asio.hpp>

#include <iostream>

namespace asio = boost::asio;
using asio::use_awaitable;

// A write that only lands while `held` still holds the lock; it records the writer's fencing token.
asio::awaitable<bool> fenced_put(coetcd::client& etcd, coetcd::mutex::hold& held, std::string value) {
  auto token = held.fencing_token();
  coetcd::txn write;
  write.when(held.fence())
      .then(coetcd::txn_op::put("/fenced/data", value))
      .then(coetcd::txn_op::put("/fenced/token", std::to_string(token)));
  auto r = co_await etcd.async_txn(write, use_awaitable);
  co_return r.succeeded;
}

asio::awaitable<void> run(coetcd::client& etcd) {
  auto slow_s = co_await coetcd::session::async_create(etcd, use_awaitable);
  auto fast_s = co_await coetcd::session::async_create(etcd, use_awaitable);
  coetcd::mutex slow(slow_s, "fenced"), fast(fast_s, "fenced");

  auto slow_hold = co_await slow.async_lock(use_awaitable);
  std::cout << "slow holds the lock, token " << slow_hold.fencing_token() << "\n";
  std::cout << "slow writes: " << (co_await fenced_put(etcd, slow_hold, "from slow") ? "applied" : "rejected") << "\n";

  // slow stalls (GC pause, SIGSTOP...) past its TTL; here the lease is revoked to show it now.
  co_await etcd.async_lease_revoke(slow_s.lease(), use_awaitable);
  auto fast_hold = co_await fast.async_lock(use_awaitable);
  std::cout << "fast holds the lock, token " << fast_hold.fencing_token() << "\n";
  std::cout << "fast writes: " << (co_await fenced_put(etcd, fast_hold, "from fast") ? "applied" : "rejected") << "\n";

  // slow wakes up and, believing it still holds the lock, writes: the txn is rejected.
  std::cout << "slow (stale) writes: " << (co_await fenced_put(etcd, slow_hold, "stale!") ? "applied" : "rejected")
            << "\n";
  auto data = co_await etcd.async_get("/fenced/data", use_awaitable);
  std::cout << "/fenced/data = " << data.kvs.at(0).value << "\n";

  co_await fast_hold.async_release(use_awaitable);
  co_await etcd.async_delete("/fenced/", coetcd::delete_options{.prefix = true}, use_awaitable);
  co_await fast_s.async_close(use_awaitable);
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
      std::cerr << "fenced_write failed: " << ex.what() << "\n";
    }
  });
  ioc.run();
  return rc;
}
