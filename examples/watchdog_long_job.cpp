// A job that runs longer than the lease TTL, kept safe by the session's background keepalive,
// with a cap on how long it may hold the lock and cancellation when the lock is lost.
//   watchdog_long_job [ENDPOINT]
#include <coetcd.hpp>
#include <coetcd/with_lock.hpp>

#include <boost/asio.hpp>

#include <iostream>

namespace asio = boost::asio;
using asio::use_awaitable;
using namespace std::chrono_literals;

// A job that checkpoints every 250 ms; a cancelled wait ends it with operation_aborted.
asio::awaitable<void> job(std::chrono::milliseconds length) {
  asio::steady_timer step(co_await asio::this_coro::executor);
  for (auto done = 0ms; done < length; done += 250ms) {
    step.expires_after(250ms);
    co_await step.async_wait(use_awaitable);
  }
}

// with_lock, reporting how it ended instead of throwing.
asio::awaitable<std::string> guarded(coetcd::mutex& m, std::chrono::milliseconds length,
                                     coetcd::with_lock_options options) {
  try {
    auto body = [length]() { return job(length); };
    co_await coetcd::with_lock(m, std::move(body), options);
    co_return "finished";
  } catch (const boost::system::system_error& e) {
    co_return "stopped: " + e.code().message();
  }
}

asio::awaitable<void> run(coetcd::client& etcd) {
  // TTL 2 s: without keepalives the lock would expire during a 4 s job.
  auto s = co_await coetcd::session::async_create(etcd, {.ttl = 2s}, use_awaitable);
  coetcd::mutex m(s, "jobs/reindex");

  std::cout << "4 s job, TTL 2 s, max hold 10 s: " << co_await guarded(m, 4000ms, {.max_hold = 10s}) << "\n";
  std::cout << "4 s job, max hold 1 s:          " << co_await guarded(m, 4000ms, {.max_hold = 1s}) << "\n";

  // Lose the lock mid-job (an operator revokes the lease; in life: a long pause or partition).
  auto ex = co_await asio::this_coro::executor;
  asio::co_spawn(ex, [&]() -> asio::awaitable<void> {
    asio::steady_timer t(co_await asio::this_coro::executor, 700ms);
    co_await t.async_wait(use_awaitable);
    co_await etcd.async_lease_revoke(s.lease(), use_awaitable);
  }, asio::detached);
  std::cout << "4 s job, lease revoked at 0.7 s: " << co_await guarded(m, 4000ms, {}) << "\n";
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
      std::cerr << "watchdog_long_job failed: " << ex.what() << "\n";
    }
  });
  ioc.run();
  return rc;
}
