// A distributed lock around a job, as in docs/lock-family.md: lock, fenced write, release; then with_lock.
//   lock_basic [ENDPOINT]
#include <coetcd.hpp>
#include <coetcd/with_lock.hpp>

#include <boost/asio.hpp>

#include <iostream>

namespace asio = boost::asio;
using asio::use_awaitable;

asio::awaitable<void> run_job() {
  asio::steady_timer work(co_await asio::this_coro::executor, std::chrono::milliseconds(200));
  co_await work.async_wait(use_awaitable);
}

asio::awaitable<void> critical(coetcd::client& etcd) {
  auto s = co_await coetcd::session::async_create(etcd, {.ttl = std::chrono::seconds(10)}, use_awaitable);
  coetcd::mutex m(s, "jobs/nightly");          // key "jobs/nightly/<lease hex>", as etcdctl lock
  auto held = co_await m.async_lock(use_awaitable);  // suspends on a watch; no thread, no polling
  std::cout << "holding " << held.key() << " (fencing token " << held.fencing_token() << ")\n";
  // Writes guarded by the hold's fence fail once the lock is lost:
  auto w = co_await etcd.async_txn(
      coetcd::txn().when(held.fence()).then(coetcd::txn_op::put("/jobs/state", "running")), use_awaitable);
  std::cout << "fenced write " << (w.succeeded ? "applied" : "rejected") << "\n";
  co_await held.async_release(use_awaitable);  // deletes our key only if it is still ours
  // (A hold released nowhere is released when it is destroyed, as std::unique_lock unlocks.)

  // Or: the body is cancelled if the hold is lost or it holds the lock too long.
  co_await coetcd::with_lock(m, [&]() -> asio::awaitable<void> { co_await run_job(); },
                             {.max_hold = std::chrono::minutes(5)});
  std::cout << "with_lock: job done, lock released\n";
  co_await etcd.async_delete("/jobs/state", use_awaitable);
  co_await s.async_close(use_awaitable);
  etcd.close();
}

int main(int argc, char** argv) {
  asio::io_context ioc;
  coetcd::client etcd(ioc, {.endpoints = {argc > 1 ? argv[1] : "127.0.0.1:2379"}});
  int rc = 0;
  asio::co_spawn(ioc, critical(etcd), [&](std::exception_ptr e) {
    if (!e) return;
    rc = 1;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      std::cerr << "lock_basic failed: " << ex.what() << "\n";
    }
  });
  ioc.run();
  return rc;
}
