// coetcd-bench's worker loops, one per mode, and the critical section they share with its
// overlap and lost-update checks (the run's shape: coetcd_bench.cpp).
#include "bench_state.hpp"
#include "checked_section.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <tuple>

namespace bench {

using asio::use_awaitable;

asio::awaitable<void> sleep(std::chrono::microseconds d) {
  asio::steady_timer t(co_await asio::this_coro::executor, d);
  co_await t.async_wait(use_awaitable);
}

namespace {

constexpr std::chrono::milliseconds pause_after_error{100};  // --keep-going

// --checked: the slot's counter in etcd, read and written back + 1 under `guard`.
asio::awaitable<void> checked_write(run_state& st, coetcd::client& c, lock_slot& slot, coetcd::compare guard) {
  try {
    if (co_await bench::guarded_increment(c, slot.counter_key, std::move(guard))) ++slot.checked_writes;
    else ++st.refused, ++st.violations;
  } catch (const std::exception& e) {
    st.fail(e.what());
  }
}

// The critical section: read the counter, yield (or hold, or with a guard the checked write),
// write it back. Any other session inside at the same time, or an update lost to one, is a
// violation.
asio::awaitable<void> critical_section(run_state& st, lock_slot& slot, const void* who, coetcd::client* c = nullptr,
                                       std::optional<coetcd::compare> guard = std::nullopt) {
  if (slot.inside > 0 && slot.holder != who) ++st.violations;
  if (slot.inside == 0 && slot.free_since && clock_type::now() < st.end)
    st.max_idle = std::max(st.max_idle, clock_type::now() - *slot.free_since);
  ++slot.inside;
  slot.holder = who;
  auto seen = slot.counter;
  if (c && guard) co_await checked_write(st, *c, slot, std::move(*guard));
  else if (st.cfg.hold.count() > 0) co_await sleep(st.cfg.hold);
  else co_await asio::post(co_await asio::this_coro::executor, use_awaitable);
  if (slot.counter != seen) ++st.violations;
  slot.counter = seen + 1;
  if (--slot.inside == 0) slot.free_since = clock_type::now();
}

void record_acquisition(run_state& st, clock_type::time_point t0, int client = 0) {
  auto now = clock_type::now();
  // A waiter served after the end is not counted: each of 1000 waiters still queued at the end
  // takes the lock once more on its way out, which would add up to 1000 to a 5 s cell (and
  // most to the systems slowest to hand over). go-bench does the same.
  if (now >= st.end) {
    ++st.late;
    return;
  }
  ++st.acquisitions;
  st.wait.record(std::chrono::duration_cast<std::chrono::microseconds>(now - t0).count());
  auto& ps = st.per_session.at(static_cast<std::size_t>(client));
  if (ps.acquisitions++ > 0) ps.max_gap = std::max(ps.max_gap, now - ps.last);
  ps.last = now;
}

asio::awaitable<void> wait_for_start(run_state& st) {
  ++st.ready;
  while (!st.started) co_await sleep(std::chrono::milliseconds(5));
}

asio::awaitable<void> mutex_loop(run_state& st, coetcd::session& s, lock_slot& slot, bool try_only, int client) {
  coetcd::mutex m(s, slot.name, st.cfg.lock_options);
  co_await wait_for_start(st);
  while (!st.done()) {
    auto t0 = clock_type::now();
    boost::system::error_code ec;
    coetcd::mutex::hold held;
    if (try_only) {
      // try_lock never waits: when the lock is held, yield and try again.
      for (;;) {
        ++st.attempts;
        std::tie(ec, held) = co_await m.async_try_lock(asio::as_tuple(use_awaitable));
        if (ec != coetcd::error::locked || st.done()) break;
        co_await asio::post(co_await asio::this_coro::executor, use_awaitable);
      }
      if (ec == coetcd::error::locked) break;  // time ran out while retrying
    } else {
      ++st.attempts;
      std::tie(ec, held) = co_await m.async_lock(asio::as_tuple(use_awaitable));
    }
    if (ec) {
      st.fail("lock: " + ec.message());
      // (a lost session stays lost: going on would only repeat the error)
      if (!st.cfg.keep_going || ec == coetcd::error::session_lost) break;
      co_await sleep(pause_after_error);
      continue;
    }
    record_acquisition(st, t0, client);
    if (st.cfg.fenced && held.fencing_token() == 0) ++st.violations;  // held: never 0
    if (st.cfg.checked) co_await critical_section(st, slot, &held, &s.get_client(), held.fence());
    else co_await critical_section(st, slot, &held);  // every caller excludes every other one
    auto [uec] = co_await held.async_release(asio::as_tuple(use_awaitable));
    if (uec) {
      st.fail("unlock: " + uec.message());
      if (!st.cfg.keep_going) break;
      co_await sleep(pause_after_error);
    }
  }
}

// rw_mutex, a writer or a reader for the whole run (as go-bench's recipe.RWMutex twin). A writer
// inside with anyone else, or a reader inside with a writer, is a violation; writers count.
asio::awaitable<void> rw_loop(run_state& st, coetcd::session& s, lock_slot& slot, bool write) {
  coetcd::rw_mutex m(s, slot.name, st.cfg.lock_options);
  co_await wait_for_start(st);
  while (!st.done()) {
    auto t0 = clock_type::now();
    ++st.attempts;
    boost::system::error_code ec;
    coetcd::rw_mutex::hold writing;
    coetcd::rw_mutex::shared_hold reading;
    if (write) std::tie(ec, writing) = co_await m.async_lock(asio::as_tuple(use_awaitable));
    else std::tie(ec, reading) = co_await m.async_lock_shared(asio::as_tuple(use_awaitable));
    if (ec) {
      st.fail("lock: " + ec.message());
      break;
    }
    record_acquisition(st, t0);
    const auto waited = std::chrono::duration_cast<std::chrono::microseconds>(clock_type::now() - t0).count();
    (write ? st.write_wait : st.read_wait).record(waited);
    if (write ? slot.inside > 0 || slot.readers > 0 : slot.inside > 0) ++st.violations;
    ++(write ? slot.inside : slot.readers);
    auto seen = slot.counter;
    if (st.cfg.checked && write) co_await checked_write(st, s.get_client(), slot, writing.fence());
    else if (st.cfg.hold.count() > 0) co_await sleep(st.cfg.hold);
    else co_await asio::post(co_await asio::this_coro::executor, use_awaitable);
    if (write) {
      if (slot.counter != seen) ++st.violations;
      slot.counter = seen + 1;
      ++st.writes;
    }
    --(write ? slot.inside : slot.readers);
    // No ?: around co_await with temporaries: g++ 12 destroys them wrongly (docs/how-it-works.md).
    boost::system::error_code uec;
    if (write) std::tie(uec) = co_await writing.async_release(asio::as_tuple(use_awaitable));
    else std::tie(uec) = co_await reading.async_release(asio::as_tuple(use_awaitable));
    if (uec) {
      st.fail("unlock: " + uec.message());
      break;
    }
  }
}

// sem mode: one permit of the slot's semaphore per acquisition; `inside` counts the holders, and
// more than --permits of them at once is a violation (an over-admission).
asio::awaitable<void> sem_loop(run_state& st, coetcd::session& s, lock_slot& slot) {
  coetcd::semaphore sem(s, slot.name, st.cfg.permits);
  co_await wait_for_start(st);
  while (!st.done()) {
    auto t0 = clock_type::now();
    ++st.attempts;
    auto [ec, permit] = co_await sem.async_acquire(1, asio::as_tuple(use_awaitable));
    if (ec) {
      st.fail("acquire: " + ec.message());
      break;
    }
    record_acquisition(st, t0);
    if (++slot.inside > st.cfg.permits) ++st.violations;
    if (st.cfg.checked) {
      try {  // holders counted in etcd: more than the permits at once is an over-admission
        if (co_await bench::cas_add(s.get_client(), slot.counter_key, 1) > st.cfg.permits) ++st.violations;
        co_await bench::cas_add(s.get_client(), slot.counter_key, -1);
      } catch (const std::exception& e) {
        st.fail(e.what());
      }
    } else if (st.cfg.hold.count() > 0) {
      co_await sleep(st.cfg.hold);
    } else {
      co_await asio::post(co_await asio::this_coro::executor, use_awaitable);
    }
    --slot.inside;
    auto [rec] = co_await permit.async_release(asio::as_tuple(use_awaitable));
    if (rec) {
      st.fail("release: " + rec.message());
      break;
    }
  }
}

asio::awaitable<void> election_loop(run_state& st, coetcd::session& s, lock_slot& slot) {
  coetcd::election e(s, slot.name);
  co_await wait_for_start(st);
  while (!st.done()) {
    auto t0 = clock_type::now();
    ++st.attempts;
    auto [ec, lead] = co_await e.async_campaign("bench", asio::as_tuple(use_awaitable));
    if (ec) {
      st.fail("campaign: " + ec.message());
      break;
    }
    record_acquisition(st, t0);
    if (st.cfg.checked) co_await critical_section(st, slot, &s, &s.get_client(), lead.fence());
    else co_await critical_section(st, slot, &s);
    auto [rec] = co_await lead.async_release(asio::as_tuple(use_awaitable));
    if (rec) {
      st.fail("resign: " + rec.message());
      break;
    }
  }
}

// The floor a lock can be measured against: take a shared key with one put-if-absent txn
// (under the session's lease), delete it after the critical section. Nobody waits; a taken
// key is retried at once.
asio::awaitable<void> txn_loop(run_state& st, coetcd::client& c, coetcd::session& s, lock_slot& slot) {
  std::string key = slot.name + "/txn";
  coetcd::txn take;
  take.when(coetcd::compare::version(key) == 0).then(coetcd::txn_op::put(key, "", {.lease = s.lease()}));
  co_await wait_for_start(st);
  while (!st.done()) {
    auto t0 = clock_type::now();
    bool taken = false;
    while (!taken && !st.done()) {
      ++st.attempts;
      auto [ec, r] = co_await c.async_txn(take, asio::as_tuple(use_awaitable));
      if (ec) {
        st.fail("txn: " + ec.message());
        co_return;
      }
      taken = r.succeeded;
      if (!taken) co_await asio::post(co_await asio::this_coro::executor, use_awaitable);
    }
    if (!taken) break;
    record_acquisition(st, t0);
    co_await critical_section(st, slot, &s);
    auto [dec, dr] = co_await c.async_delete(key, asio::as_tuple(use_awaitable));
    if (dec) {
      st.fail("delete: " + dec.message());
      co_return;
    }
  }
}

// One request after another on the worker's own key: latency is the round trip of one call.
asio::awaitable<void> kv_loop(run_state& st, coetcd::client& c, int index) {
  const std::string key = st.cfg.prefix + "kv/" + std::to_string(index);
  const std::string& mode = st.cfg.mode;
  auto [pec, pr] = co_await c.async_put(key, "v", asio::as_tuple(use_awaitable));
  if (pec) {
    st.fail("put: " + pec.message());
    ++st.ready;
    co_return;
  }
  coetcd::txn t;
  t.when(coetcd::compare::version(key) > 0).then(coetcd::txn_op::put(key, "v")).otherwise(coetcd::txn_op::get(key));
  co_await wait_for_start(st);
  while (!st.done()) {
    auto t0 = clock_type::now();
    ++st.attempts;
    boost::system::error_code ec;
    if (mode == "put") {
      std::tie(ec, std::ignore) = co_await c.async_put(key, "v", asio::as_tuple(use_awaitable));
    } else if (mode == "get") {
      auto [gec, r] = co_await c.async_get(key, asio::as_tuple(use_awaitable));
      ec = gec;
      if (!ec && r.kvs.size() != 1) ++st.violations;
    } else {
      auto [tec, r] = co_await c.async_txn(t, asio::as_tuple(use_awaitable));
      ec = tec;
      if (!ec && !r.succeeded) ++st.violations;
    }
    if (ec) {
      st.fail(mode + ": " + ec.message());
      co_return;
    }
    record_acquisition(st, t0);
  }
  if (index == 0) {
    // Worker 0 clears the prefix once every other worker has stopped.
    while (st.running > 1) co_await sleep(std::chrono::milliseconds(5));
    co_await c.async_delete(st.cfg.prefix + "kv/", coetcd::delete_options{.prefix = true},
                            asio::as_tuple(use_awaitable));
  }
}

asio::awaitable<void> local_loop(run_state& st, lock_slot& slot) {
  int me = 0;  // identity for the overlap check
  co_await wait_for_start(st);
  auto ex = co_await asio::this_coro::executor;
  while (!st.done()) {
    auto t0 = clock_type::now();
    ++st.attempts;
    co_await slot.local.async_lock(use_awaitable);
    record_acquisition(st, t0);
    co_await critical_section(st, slot, &me);
    if (st.cfg.mode == "local_async") co_await slot.local.async_unlock(use_awaitable);
    else slot.local.unlock(ex);
  }
}

}  // namespace

// The hand-off floor: single-key deletes in a serial chain (the keys are put beforehand, untimed).
asio::awaitable<void> delete_chain_loop(run_state& st, coetcd::client& c) {
  co_await wait_for_start(st);
  const std::string base = chain_prefix(st.cfg);
  std::int64_t n = 0;
  while (!st.done()) {
    std::vector<std::string> keys;
    for (int i = 0; i < 100; ++i) keys.push_back(base + std::to_string(n++));
    auto pause_start = clock_type::now();
    for (auto& k : keys) {
      auto [ec, r] = co_await c.async_put(k, "", asio::as_tuple(use_awaitable));
      if (ec) {
        st.fail("put: " + ec.message());
        co_return;
      }
    }
    st.end += clock_type::now() - pause_start;  // puts are not part of the measurement
    st.paused += clock_type::now() - pause_start;
    for (auto& k : keys) {
      if (st.done()) break;
      auto t0 = clock_type::now();
      auto [ec, r] = co_await c.async_delete(k, asio::as_tuple(use_awaitable));
      if (ec) {
        st.fail("delete: " + ec.message());
        co_return;
      }
      record_acquisition(st, t0);
    }
  }
  co_await c.async_delete(base, coetcd::delete_options{.prefix = true}, asio::as_tuple(use_awaitable));
}

// The hand-off floor with a hand-off's own write: each step one txn that deletes the last key
// (guarded by its create revision) and puts the next under a lease if absent, the shape of a
// release carrying the next caller's put (lock_view_core::release): one commit, two mutations,
// where delete_chain's step has one. Serial, one worker.
asio::awaitable<void> handoff_chain_loop(run_state& st, coetcd::client& c) {
  using coetcd::compare;
  using coetcd::txn;
  using coetcd::txn_op;
  auto s = co_await coetcd::session::async_create(c, coetcd::session_options{.ttl = st.cfg.ttl}, use_awaitable);
  const std::string base = chain_prefix(st.cfg);
  std::string last;
  std::int64_t last_rev = 0, n = 0;
  co_await wait_for_start(st);
  while (!st.done()) {
    auto t0 = clock_type::now();
    std::string next = base + std::to_string(n++);
    txn t;
    if (!last.empty())
      t.then(txn_op::nested(txn().when(compare::create_revision(last) == last_rev).then(txn_op::del(last))));
    t.then(txn_op::nested(txn()
                              .when(compare::create_revision(next) == 0)
                              .then(txn_op::put(next, "", coetcd::put_options{.lease = s.lease()}))
                              .otherwise(txn_op::get(next))));
    auto [ec, r] = co_await c.async_txn(t, asio::as_tuple(use_awaitable));
    if (ec) {
      st.fail("txn: " + ec.message());
      break;
    }
    last = std::move(next);
    last_rev = r.header.revision;
    record_acquisition(st, t0);
  }
  co_await s.async_close(asio::as_tuple(use_awaitable));  // its key goes with the lease
}

asio::awaitable<void> watch_chain(run_state& st, coetcd::watcher w) {
  for (;;) {
    auto [ec, b] = co_await w.async_next(asio::as_tuple(use_awaitable));
    if (ec) {
      if (!st.started || !st.done()) st.fail("watch: " + ec.message());
      co_return;
    }
    st.watched_events += static_cast<std::int64_t>(b.events.size());
  }
}

asio::awaitable<void> worker(run_state& st, coetcd::client& c, int client, int index,
                             std::shared_ptr<coetcd::session> s, lock_slot& slot, bool writer) {
  if (local_mode(st.cfg.mode)) {
    co_await local_loop(st, slot);
    --st.running;
    co_return;
  }
  if (kv_mode(st.cfg.mode)) {
    co_await kv_loop(st, c, index);
    --st.running;
    co_return;
  }
  if (!s) {
    auto [ec, made] = co_await coetcd::session::async_create(c, coetcd::session_options{.ttl = st.cfg.ttl},
                                                             asio::as_tuple(use_awaitable));
    if (ec) {
      st.fail("session: " + ec.message());
      ++st.ready;
      --st.running;
      co_return;
    }
    s = std::make_shared<coetcd::session>(std::move(made));
  }
  const auto& mode = st.cfg.mode;
  if (mode == "mutex" || mode == "try_lock") co_await mutex_loop(st, *s, slot, mode == "try_lock", client);
  else if (mode == "election") co_await election_loop(st, *s, slot);
  else if (mode == "txn") co_await txn_loop(st, c, *s, slot);
  else if (mode == "rw") co_await rw_loop(st, *s, slot, writer);
  else if (mode == "sem") co_await sem_loop(st, *s, slot);
  if (s.use_count() == 1) co_await s->async_close(asio::as_tuple(use_awaitable));
  --st.running;
}

}  // namespace bench
