// The snippets of docs/lock-family.md, compiled so they follow the API (scripts/snippets copies them there).
#include <coetcd.hpp>

#include <boost/asio.hpp>

#include <chrono>

namespace asio = boost::asio;
using asio::use_awaitable;

asio::awaitable<void> run_job();
asio::awaitable<void> build_release(coetcd::semaphore::hold& slots);

// [critical]
#include <coetcd/with_lock.hpp>  // with_lock, with_permits: not in <coetcd.hpp>

asio::awaitable<void> critical(coetcd::client& etcd) {
  auto s = co_await coetcd::session::async_create(etcd, {.ttl = std::chrono::seconds(10)}, use_awaitable);
  coetcd::mutex m(s, "jobs/nightly");                // key "jobs/nightly/<lease hex>", as etcdctl lock
  auto held = co_await m.async_lock(use_awaitable);  // suspends on a watch; no thread, no polling
  // Writes guarded by the hold's fence fail once the lock is lost (fencing):
  auto guarded = coetcd::txn().when(held.fence()).then(coetcd::txn_op::put("/jobs/state", "running"));
  co_await etcd.async_txn(guarded, use_awaitable);
  co_await held.async_release(use_awaitable);        // deletes our key: the next waiter's watch fires

  // Or: the body is cancelled if the hold is lost or it holds the lock too long.
  auto job = [&]() -> asio::awaitable<void> { co_await run_job(); };
  coetcd::with_lock_options limits{.max_hold = std::chrono::minutes(5)};
  co_await coetcd::with_lock(m, std::move(job), limits);
}
// [critical]

asio::awaitable<void> read_then_update(coetcd::client& etcd, coetcd::session& session) {
  auto update = [&](coetcd::rw_mutex::hold& writing) -> asio::awaitable<void> {
    auto write = coetcd::txn().when(writing.fence()).then(coetcd::txn_op::put("/config/value", "v2"));
    co_await etcd.async_txn(write, use_awaitable);
  };
  // [rw_mutex]
  coetcd::rw_mutex rw(session, "config");
  auto reading = co_await rw.async_lock_shared(use_awaitable);  // with any number of readers, of any process
  auto cfg = co_await etcd.async_get("/config/value", use_awaitable);
  co_await reading.async_release(use_awaitable);

  // alone: update(coetcd::rw_mutex::hold& writing) guards its writes with writing.fence()
  co_await coetcd::with_lock(rw, std::move(update));
  // [rw_mutex]
}

asio::awaitable<void> build_slots(coetcd::session& session) {
  auto release_build = [](coetcd::semaphore::hold& slots) { return build_release(slots); };
  // [semaphore]
  coetcd::semaphore pool(session, "build-slots", 2);
  auto slot = co_await pool.async_acquire(1, use_awaitable);  // or 2, for a job that needs both
  co_await slot.async_release(use_awaitable);                 // gives back this acquisition's permits
  co_await coetcd::with_permits(pool, 2, std::move(release_build));
  // [semaphore]
}

asio::awaitable<void> move_money(coetcd::client& etcd, coetcd::session& session) {
  // [multi_lock]
  coetcd::mutex a(session, "bank-lock/alice"), b(session, "bank-lock/bob");
  coetcd::multi_lock both({a, b});                      // or {b, a}: the same order on the wire
  auto held = co_await both.async_lock(use_awaitable);  // a and b held, each through its own queue
  auto transfer = coetcd::txn()
                      .when(held.fence())               // fence(): one compare per part
                      .then(coetcd::txn_op::put("/bank/alice", "90"))
                      .then(coetcd::txn_op::put("/bank/bob", "110"));
  co_await etcd.async_txn(transfer, use_awaitable);
  co_await held.async_release(use_awaitable);           // every part, in reverse name order
  // [multi_lock]
}

asio::awaitable<void> lead(coetcd::client& etcd, coetcd::session& session) {
  // [election]
  coetcd::election e(session, "services/scheduler");
  auto lead = co_await e.async_campaign("10.0.0.1:9000", use_awaitable);  // waits behind older candidates
  auto tick = coetcd::txn().when(lead.fence()).then(coetcd::txn_op::put("scheduler/last-tick", "a"));
  co_await etcd.async_txn(tick, use_awaitable);               // refused by etcd once we no longer lead
  co_await lead.async_proclaim("10.0.0.1:9000 (draining)", use_awaitable);
  co_await lead.async_release(use_awaitable);                  // resigns: the next candidate leads
  // [election]
}
