// coetcd-bench: lock contention on a real etcd. N workers (coroutines on one io_context), each
// with its own session unless --share-session, spread over K lock names and M clients, take the
// lock, run a critical section (a yield, or --hold), and release it, until --duration or --count.
//
// Modes: mutex (async_lock/unlock), try_lock (retry at once when held), election
// (campaign/resign), txn (the raw floor: one put-if-absent txn + one delete per operation, no
// waiting, retried at once when taken), delete_chain (the hand-off floor: one worker deleting
// single keys one after another; each delete counts as an "acquisition"), handoff_chain (the
// same with a hand-off's write: each step one txn deleting the last key and putting the next
// under a lease, as a release carrying the next caller's put does), local (the in-process
// reference: the same workers on an async FIFO lock in this process, no etcd: the physical limit
// of a local hand-off), and the client core's own twin of Go's: put, get and kv_txn (each
// worker is one request in flight on a key of its own, put beforehand; kv_txn is a compare on
// the key's version with a put on success and a get otherwise; an "acquisition" is one reply).
//
// Correctness check: each lock has a counter read before and written after the yield inside the
// critical section, and an overlap flag; a lost update or an overlap between holders is a
// violation (for elections, between sessions: a campaign is per session). --json prints one JSON object; otherwise a readable summary. Progress goes to stderr.
#include "bench_support.hpp"
#include "checked_section.hpp"

#include <coetcd.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/program_options.hpp>

#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <list>
#include <map>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace asio = boost::asio;
namespace po = boost::program_options;
using asio::use_awaitable;
using clock_type = std::chrono::steady_clock;

namespace {

struct config {
  std::vector<std::string> endpoints;
  std::string mode = "mutex";
  int workers = 1, locks = 1, clients = 1;
  std::chrono::microseconds duration{5'000'000};
  std::int64_t count = 0;  // stop after this many acquisitions (0: run for `duration`)
  std::chrono::microseconds hold{0};
  std::chrono::seconds ttl{60};
  bool share_session = false;
  std::int64_t permits = 10;  // sem mode
  coetcd::mutex_options lock_options;  // --linger, --fair-hold, --fair-handoffs
  bool checked = false;  // --checked: the section updates a counter in etcd (checked_section.hpp)
  bool json = false;
  std::string prefix;
  coetcd::completion_mode completions = coetcd::completion_mode::thread;
  bool keep_abseil_deadlock_detection = false;
  // mutex: on an error a worker counts it, waits 100 ms and goes on (as go-bench's
  // --keep-going): the one-server-down row of benchmarks/compare. Without it the first error
  // ends the worker.
  bool keep_going = false;
  // --fenced: each mutex holder reads its fencing token, as a holder that fences its writes
  // does, so every local hand-off first puts the key again (one write each).
  bool fenced = false;
  // --watched: a chain's client watches the chain's prefix and reads every event, as the client
  // of a lock's waiters does (what a hand-off learned by watch costs, apart from the lock).
  bool watched = false;
};

// The in-process reference lock: FIFO, a hand-off is one post.
struct local_lock {
  bool locked = false;
  std::list<asio::any_completion_handler<void()>> waiting;  // a list: never move-assigns a handler

  template <class Token>
  auto async_lock(Token&& token) {
    return asio::async_initiate<Token, void()>(
        [this](auto h) {
          if (locked) return waiting.emplace_back(std::move(h)), void();
          locked = true;
          auto ex = asio::get_associated_executor(h);
          asio::post(ex, std::move(h));
        },
        token);
  }
  void unlock(const asio::any_io_executor& ex) {
    if (waiting.empty()) {
      locked = false;
      return;
    }
    auto h = std::move(waiting.front());
    waiting.pop_front();
    asio::post(ex, std::move(h));
  }
  // --mode local_async: an unlock that keeps Asio's rules, as coetcd's async_unlock does: it
  // hands off, then completes through a post of its own (never inline).
  template <class Token>
  auto async_unlock(Token&& token) {
    return asio::async_initiate<Token, void()>(
        [this](auto h) {
          auto ex = asio::get_associated_executor(h);
          unlock(ex);
          asio::post(ex, std::move(h));
        },
        token);
  }
};

struct lock_slot {
  std::string name;
  int inside = 0;
  int readers = 0;  // rw mode: readers inside
  const void* holder = nullptr;  // who is inside, for the overlap check
  std::int64_t counter = 0;
  std::string counter_key;  // --checked: the counter in etcd, and the writes that landed on it
  std::int64_t checked_writes = 0;
  local_lock local;
  // When the last holder left the critical section: the next entry's distance from it is how
  // long the name sat free, or unreachable, while workers wanted it (max_idle_ms).
  std::optional<std::chrono::steady_clock::time_point> free_since;
};

// Acquisitions of each session (client, with --share-session) and the longest time it went
// without one once it had started: how fairly sessions share a busy name.
struct session_stats {
  std::int64_t acquisitions = 0;
  clock_type::time_point last{};
  clock_type::duration max_gap{};
};

struct run_state {
  config cfg;
  bench::histogram wait;
  bench::histogram read_wait, write_wait;  // rw mode, by side
  std::int64_t writes = 0;
  std::vector<lock_slot> slots;
  std::vector<session_stats> per_session;  // by client index
  clock_type::time_point start, end;
  clock_type::duration paused{};  // untimed set-up inside the run (delete_chain's puts)
  bool started = false;
  int ready = 0, running = 0;
  std::int64_t acquisitions = 0, attempts = 0, errors = 0, violations = 0;
  std::int64_t late = 0;  // acquisitions after the end: not counted, but in the counters
  std::int64_t refused = 0, lost_updates = 0;  // --checked: a holder's guard failed; writes lost
  std::int64_t watched_events = 0;  // --watched: events the chain's watch delivered
  clock_type::duration max_idle{};  // the longest a name sat free between two holders
  std::string first_error;

  bool done() const {
    return clock_type::now() >= end || (cfg.count > 0 && acquisitions >= cfg.count);
  }
  void fail(const std::string& what) {
    if (errors++ == 0) first_error = what;
  }
};

std::string hex(std::int64_t v) {
  char b[20];
  std::snprintf(b, sizeof b, "%" PRIx64, static_cast<std::uint64_t>(v));
  return b;
}

asio::awaitable<void> sleep(std::chrono::microseconds d) {
  asio::steady_timer t(co_await asio::this_coro::executor, d);
  co_await t.async_wait(use_awaitable);
}

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
  if (slot.counter != seen && !(st.cfg.share_session && st.cfg.mode == "election")) ++st.violations;
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
    if (try_only) {
      // try_lock never waits: when the lock is held, yield and try again.
      for (;;) {
        ++st.attempts;
        std::tie(ec) = co_await m.async_try_lock(asio::as_tuple(use_awaitable));
        if (ec != coetcd::error::locked || st.done()) break;
        co_await asio::post(co_await asio::this_coro::executor, use_awaitable);
      }
      if (ec == coetcd::error::locked) break;  // time ran out while retrying
    } else {
      ++st.attempts;
      std::tie(ec) = co_await m.async_lock(asio::as_tuple(use_awaitable));
    }
    if (ec) {
      st.fail("lock: " + ec.message());
      // (a lost session stays lost: going on would only repeat the error)
      if (!st.cfg.keep_going || ec == coetcd::error::session_lost) break;
      co_await sleep(pause_after_error);
      continue;
    }
    record_acquisition(st, t0, client);
    if (st.cfg.fenced && m.fencing_token() == 0) ++st.violations;  // held: never 0
    if (st.cfg.checked) co_await critical_section(st, slot, &m, &s.get_client(), m.is_owner());
    else co_await critical_section(st, slot, &m);  // every caller excludes every other one
    auto [uec] = co_await m.async_unlock(asio::as_tuple(use_awaitable));
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
    auto [ec] = write ? co_await m.async_lock(asio::as_tuple(use_awaitable))
                      : co_await m.async_lock_shared(asio::as_tuple(use_awaitable));
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
    if (st.cfg.checked && write) co_await checked_write(st, s.get_client(), slot, m.is_owner());
    else if (st.cfg.hold.count() > 0) co_await sleep(st.cfg.hold);
    else co_await asio::post(co_await asio::this_coro::executor, use_awaitable);
    if (write) {
      if (slot.counter != seen) ++st.violations;
      slot.counter = seen + 1;
      ++st.writes;
    }
    --(write ? slot.inside : slot.readers);
    auto [uec] = write ? co_await m.async_unlock(asio::as_tuple(use_awaitable))
                       : co_await m.async_unlock_shared(asio::as_tuple(use_awaitable));
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
    auto [ec] = co_await sem.async_acquire(1, asio::as_tuple(use_awaitable));
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
    auto [rec] = co_await sem.async_release(1, asio::as_tuple(use_awaitable));
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
    auto [ec] = co_await e.async_campaign("bench", asio::as_tuple(use_awaitable));
    if (ec) {
      st.fail("campaign: " + ec.message());
      break;
    }
    record_acquisition(st, t0);
    if (st.cfg.checked && !st.cfg.share_session)
      co_await critical_section(st, slot, &s, &s.get_client(), coetcd::compare::create_revision(e.key()) == e.revision());
    else co_await critical_section(st, slot, &s);
    auto [rec] = co_await e.async_resign(asio::as_tuple(use_awaitable));
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

// Where a chain mode puts its keys (and --watched watches).
std::string chain_prefix(const config& cfg) {
  return cfg.prefix + (cfg.mode == "delete_chain" ? "chain/" : "handoff-chain/");
}

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

// --watched: reads every event of the chain's prefix until the run ends (the client closes);
// a watch that ends sooner, before the clock starts too, fails the run.
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

// The in-process FIFO lock of the bench, no etcd.
bool local_mode(const std::string& mode) { return mode == "local" || mode == "local_async"; }
bool kv_mode(const std::string& mode) { return mode == "put" || mode == "get" || mode == "kv_txn"; }
// One serial worker against etcd with no lock: the floors.
bool chain_mode(const std::string& mode) { return mode == "delete_chain" || mode == "handoff_chain"; }

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

const char* mode_name(coetcd::completion_mode m) {
  switch (m) {
    case coetcd::completion_mode::poll: return "poll";
    case coetcd::completion_mode::adaptive: return "adaptive";
    case coetcd::completion_mode::thread: break;
  }
  return "thread";
}

config parse_args(int argc, char** argv) {
  config cfg;
  std::string endpoints = "127.0.0.1:2379", duration = "5s", hold = "0s", completions = "thread";
  int ttl = 60, linger_ms = 0, fair_hold_ms = -1;
  long fair_handoffs = -1;
  po::options_description desc(
      "coetcd-bench: lock contention on etcd with coetcd\n"
      "Usage: coetcd-bench [options]\nOptions");
  desc.add_options()
      ("help,h", "this text")
      ("endpoints", po::value(&endpoints), "comma-separated host:port list (default 127.0.0.1:2379)")
      ("mode", po::value(&cfg.mode), "mutex | try_lock | election | txn | delete_chain | handoff_chain | local | local_async (local with an unlock that completes through a post, as an Asio async_unlock must) | rw (rw_mutex; worker i writes when i % 10 == 0) | sem (semaphore, one of --permits per acquisition) | put | get | kv_txn (one request per worker in flight) "
       "(default mutex)")
      ("workers", po::value(&cfg.workers), "concurrent workers (default 1)")
      ("locks", po::value(&cfg.locks), "lock names; worker i uses lock i % locks (default 1)")
      ("clients", po::value(&cfg.clients), "clients (connections); worker i uses client i % clients (default 1)")
      ("duration", po::value(&duration), "measured run time, e.g. 5s, 500ms, 2m (default 5s)")
      ("count", po::value(&cfg.count), "stop after this many acquisitions instead")
      ("permits", po::value(&cfg.permits), "sem: permits of each semaphore (default 10)")
      ("hold", po::value(&hold), "time inside the critical section (default: one yield)")
      ("ttl", po::value(&ttl), "session TTL in seconds (default 60)")
      ("share-session", po::bool_switch(&cfg.share_session),
       "one session per client shared by its workers (the async-server case; an election's workers "
       "share its leadership)")
      ("linger", po::value(&linger_ms), "mutex: keep the key this many ms after the last unlock (default 0)")
      ("fair-hold", po::value(&fair_hold_ms), "mutex_options::fair_hold in ms (default: the library's)")
      ("fair-handoffs", po::value(&fair_handoffs), "mutex_options::fair_handoffs (default: the library's)")
      ("prefix", po::value(&cfg.prefix), "key prefix (default /coetcd-bench/<pid>/)")
      ("completions", po::value(&completions), "thread (default here, so the committed figures keep their meaning) | poll | adaptive (the library's default): client_options::completions")
      ("keep-abseil-deadlock-detection", po::bool_switch(&cfg.keep_abseil_deadlock_detection),
       "client_options::keep_abseil_deadlock_detection (to measure what turning it off saves)")
      ("watched", po::bool_switch(&cfg.watched),
       "delete_chain, handoff_chain: the client also watches the chain's keys and reads every event, "
       "as the client of a lock's waiters does")
      ("fenced", po::bool_switch(&cfg.fenced),
       "mutex: each holder reads its fencing token (a fenced hand-off: one put per local hand-off)")
      ("checked", po::bool_switch(&cfg.checked),
       "mutex, rw, sem, election: the critical section is a guarded read-modify-write of a counter in etcd "
       "(a semaphore counts its holders there); lost updates and refused guards are violations")
      ("keep-going", po::bool_switch(&cfg.keep_going),
       "mutex: on an error a worker counts it, waits 100 ms and goes on (default: its first error ends it)")
      ("json", po::bool_switch(&cfg.json), "print one JSON object");
  po::variables_map vm;
  po::store(po::parse_command_line(argc, argv, desc), vm);
  po::notify(vm);
  if (vm.count("help")) {
    std::cout << desc << "\n";
    std::exit(0);
  }
  std::stringstream ss(endpoints);
  for (std::string e; std::getline(ss, e, ',');)
    if (!e.empty()) cfg.endpoints.push_back(e);
  cfg.duration = bench::parse_duration(duration);
  cfg.hold = bench::parse_duration(hold);
  cfg.ttl = std::chrono::seconds(ttl);
  cfg.lock_options.linger = std::chrono::milliseconds(linger_ms);
  if (fair_hold_ms >= 0) cfg.lock_options.fair_hold = std::chrono::milliseconds(fair_hold_ms);
  if (fair_handoffs >= 0) cfg.lock_options.fair_handoffs = static_cast<std::size_t>(fair_handoffs);
  if (cfg.prefix.empty()) cfg.prefix = "/coetcd-bench/" + std::to_string(::getpid()) + "/";
  const std::vector<std::string> modes{"mutex", "try_lock", "election", "txn", "delete_chain", "handoff_chain",
                                       "local", "local_async", "rw", "sem", "put", "get", "kv_txn"};
  if (std::find(modes.begin(), modes.end(), cfg.mode) == modes.end())
    throw std::invalid_argument("unknown --mode '" + cfg.mode + "'");
  if (cfg.workers < 1 || cfg.locks < 1 || cfg.clients < 1 || cfg.endpoints.empty())
    throw std::invalid_argument("--workers, --locks, --clients must be >= 1 and --endpoints non-empty");
  if (chain_mode(cfg.mode)) cfg.workers = cfg.locks = 1;
  if (cfg.permits < 1) throw std::invalid_argument("--permits must be >= 1");
  if (completions == "poll") cfg.completions = coetcd::completion_mode::poll;
  else if (completions == "adaptive") cfg.completions = coetcd::completion_mode::adaptive;
  else if (completions != "thread") throw std::invalid_argument("unknown --completions '" + completions + "'");
  return cfg;
}

}  // namespace

int main(int argc, char** argv) {
  run_state st;
  try {
    st.cfg = parse_args(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "coetcd-bench: %s (see --help)\n", e.what());
    return 2;
  }
  auto& cfg = st.cfg;
  asio::io_context ioc;
  coetcd::client_options o;
  o.endpoints = cfg.endpoints;
  o.completions = cfg.completions;
  o.keep_abseil_deadlock_detection = cfg.keep_abseil_deadlock_detection;
  std::vector<std::unique_ptr<coetcd::client>> clients;
  for (int i = 0; i < cfg.clients; ++i) clients.push_back(std::make_unique<coetcd::client>(ioc, o));
  for (int k = 0; k < cfg.locks; ++k) {
    st.slots.push_back(lock_slot{cfg.prefix + "lock-" + std::to_string(k)});
    st.slots.back().counter_key = st.slots.back().name + "-counter";  // beside the lock's keys, not under them
  }
  st.per_session.resize(static_cast<std::size_t>(cfg.clients));

  std::map<std::string, double> rpc_before, rpc_after;
  double etcd_cpu_before = -1, etcd_cpu_after = -1;  // the first endpoint's process
  double cpu_before = 0, cpu_after = 0;
  std::int64_t leftover = -1;

  asio::co_spawn(ioc, [&]() -> asio::awaitable<void> {
    // Shared sessions first (one per client), then every worker creates its own if needed and
    // reports ready; the clock starts when all are.
    std::vector<std::shared_ptr<coetcd::session>> shared(cfg.clients);
    if (cfg.share_session && !local_mode(cfg.mode) && !kv_mode(cfg.mode))
      for (int i = 0; i < cfg.clients; ++i)
        shared[i] = std::make_shared<coetcd::session>(co_await coetcd::session::async_create(
            *clients[i], coetcd::session_options{.ttl = cfg.ttl}, use_awaitable));
    st.running = cfg.workers;
    if (chain_mode(cfg.mode)) {
      asio::co_spawn(ioc, [&]() -> asio::awaitable<void> {
        if (cfg.watched) {
          auto [ec, w] = co_await clients[0]->async_watch(chain_prefix(cfg), coetcd::watch_options{.prefix = true},
                                                          asio::as_tuple(use_awaitable));
          if (ec) st.fail("watch: " + ec.message());
          else asio::co_spawn(ioc, watch_chain(st, std::move(w)), asio::detached);
        }
        if (cfg.mode == "delete_chain") co_await delete_chain_loop(st, *clients[0]);
        else co_await handoff_chain_loop(st, *clients[0]);
        --st.running;
      }, asio::detached);
    } else {
      for (int i = 0; i < cfg.workers; ++i)
        asio::co_spawn(ioc, worker(st, *clients[i % cfg.clients], i % cfg.clients, i, shared[i % cfg.clients],
                                   st.slots[i % cfg.locks], i % 10 == 0),
                       asio::detached);
    }
    shared.clear();
    auto ramp = clock_type::now();
    while (st.ready < cfg.workers) co_await sleep(std::chrono::milliseconds(5));
    if (!cfg.json || cfg.workers >= 100)
      std::fprintf(stderr, "coetcd-bench: %d workers ready in %.2f s; measuring\n", cfg.workers,
                   std::chrono::duration<double>(clock_type::now() - ramp).count());
    try {
      auto m = bench::read_server_metrics(cfg.endpoints.front());
      rpc_before = std::move(m.received);
      etcd_cpu_before = m.cpu_s;
    } catch (const std::exception&) {
    }
    cpu_before = bench::cpu_seconds();
    st.start = clock_type::now();
    st.end = st.start + cfg.duration;
    if (cfg.count > 0) st.end = st.start + std::chrono::hours(24);
    st.started = true;
    auto next_progress = st.start + std::chrono::seconds(10);
    while (st.running > 0) {
      co_await sleep(std::chrono::milliseconds(20));
      if (clock_type::now() >= next_progress) {
        std::fprintf(stderr, "coetcd-bench: %.0f s, %" PRId64 " acquisitions\n",
                     std::chrono::duration<double>(clock_type::now() - st.start).count(), st.acquisitions);
        next_progress += std::chrono::seconds(10);
      }
    }
    st.end = std::min(st.end, clock_type::now());
    for (auto& s : st.slots)  // a name that never came back after a fault
      if (s.inside == 0 && s.free_since && *s.free_since < st.end) st.max_idle = std::max(st.max_idle, st.end - *s.free_since);
    cpu_after = bench::cpu_seconds();
    try {
      auto m = bench::read_server_metrics(cfg.endpoints.front());
      rpc_after = std::move(m.received);
      etcd_cpu_after = m.cpu_s;
    } catch (const std::exception&) {
    }
    if (cfg.checked) {
      // Every write that landed is in the counter (a semaphore's holders all left: 0).
      for (auto& s : st.slots) {
        auto [gec, counted] = co_await asio::co_spawn(ioc, bench::read_counter(*clients[0], s.counter_key), asio::as_tuple(use_awaitable));
        if (gec) {
          st.fail("checked: reading the counter failed");
          continue;
        }
        const auto want = cfg.mode == "sem" ? 0 : s.checked_writes;
        st.lost_updates += std::llabs(want - counted.value);
        co_await clients[0]->async_delete(s.counter_key, asio::as_tuple(use_awaitable));
      }
      st.violations += st.lost_updates;
    }
    // Sessions are closed (leases revoked): nothing may remain under the prefix.
    auto [ec, r] = co_await clients[0]->async_get(cfg.prefix, coetcd::get_options{.prefix = true, .count_only = true},
                                                  asio::as_tuple(use_awaitable));
    if (!ec) leftover = r.count;
    for (auto& c : clients) c->close();
  }, [&](std::exception_ptr e) {
    if (!e) return;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      st.fail(std::string("setup: ") + x.what());
    }
    for (auto& c : clients) c->close();
  });
  ioc.run();

  double elapsed = std::chrono::duration<double>(st.end - st.start - st.paused).count();
  double acq = double(st.acquisitions);
  // RPCs and CPU were spent on the late hand-offs too: per acquisition, they count.
  double served = double(st.acquisitions + st.late);
  auto per_acq = [&](const char* method) {
    if (served == 0 || rpc_after.empty()) return -1.0;
    return (rpc_after[method] - rpc_before[method]) / served;
  };
  double rpcs = -1;
  if (served > 0 && !rpc_after.empty()) {
    rpcs = 0;
    for (auto& [m, v] : rpc_after) rpcs += v - rpc_before[m];
    rpcs /= served;
  }
  // Counters must add up to the acquisitions (a lost update shows as a shortfall).
  std::int64_t counted = 0;
  for (auto& s : st.slots) counted += s.counter;
  const auto expected = cfg.mode == "rw" ? st.writes : st.acquisitions + st.late;
  // (A semaphore's holders overlap by design: sem_loop counts over-admissions instead.)
  if (!chain_mode(cfg.mode) && cfg.mode != "sem" && !kv_mode(cfg.mode) && counted != expected && !(cfg.share_session && cfg.mode == "election"))
    st.violations += std::llabs(expected - counted);

  // Fairness between sessions sharing names (--share-session with several clients): each one's
  // share of the acquisitions against the mean, and the longest it went without one.
  double share_min = 1, share_max = 1, max_gap_ms = 0;
  if (cfg.share_session && cfg.clients > 1 && acq > 0) {
    double mean = acq / cfg.clients;
    share_min = 1e9;
    share_max = 0;
    for (auto& ps : st.per_session) {
      share_min = std::min(share_min, double(ps.acquisitions) / mean);
      share_max = std::max(share_max, double(ps.acquisitions) / mean);
      max_gap_ms = std::max(max_gap_ms, std::chrono::duration<double, std::milli>(ps.max_gap).count());
    }
  }
  double ops_per_s = elapsed > 0 ? acq / elapsed : 0;
  double cpu_per_1000 = served > 0 ? (cpu_after - cpu_before) / served * 1000 : 0;
  // etcd's side of the same window (-1 when its /metrics could not be read): on loopback, beside
  // the client's, it shows where an acquisition's CPU goes.
  double etcd_cpu_per_1000 = served > 0 && etcd_cpu_before >= 0 && etcd_cpu_after >= 0
                                 ? (etcd_cpu_after - etcd_cpu_before) / served * 1000
                                 : -1;
  auto ms = [](double us) { return us / 1000.0; };
  if (cfg.json) {
    std::printf(
        "{\"impl\":%s,\"mode\":%s,\"workers\":%d,\"locks\":%d,\"clients\":%d,\"share_session\":%s,"
        "\"linger_ms\":%d,\"hold_ms\":%.3f,\"permits\":%" PRId64 ","
        "\"seconds\":%.3f,\"share_min\":%.3f,\"share_max\":%.3f,\"max_gap_ms\":%.3f,"
        "\"acquisitions\":%" PRId64 ",\"attempts\":%" PRId64 ",\"acquisitions_per_s\":%.1f,"
        "\"p50_ms\":%.3f,\"p90_ms\":%.3f,\"p99_ms\":%.3f,\"max_ms\":%.3f,\"mean_ms\":%.3f,"
        "\"cpu_s_per_1000\":%.4f,\"etcd_cpu_s_per_1000\":%.4f,\"peak_rss_mb\":%.1f,\"rpcs_per_acq\":%.4f,\"txn_per_acq\":%.2f,"
        "\"range_per_acq\":%.2f,\"delete_per_acq\":%.2f,\"watch_msgs_per_acq\":%.2f,"
        "\"read_p50_ms\":%.3f,\"read_p99_ms\":%.3f,\"write_p50_ms\":%.3f,\"write_p99_ms\":%.3f,\"writes\":%" PRId64 ","
        "\"violations\":%" PRId64 ",\"errors\":%" PRId64 ",\"leftover_keys\":%" PRId64 ",\"first_error\":%s,"
        "\"completions\":\"%s\",\"late\":%" PRId64 ",\"max_idle_ms\":%.3f,\"keep_going\":%s,\"fenced\":%s,\"watched\":%s,\"watched_events\":%" PRId64 ","
        "\"checked\":%s,\"refused\":%" PRId64 ",\"lost_updates\":%" PRId64 "}\n",
        local_mode(cfg.mode) ? "\"local\"" : "\"coetcd\"", bench::json_string(cfg.mode).c_str(), cfg.workers, cfg.locks,
        cfg.clients, cfg.share_session ? "true" : "false", static_cast<int>(cfg.lock_options.linger.count()), cfg.hold.count() / 1000.0, cfg.mode == "sem" ? cfg.permits : 0, elapsed, share_min, share_max, max_gap_ms, st.acquisitions,
        st.attempts,
        ops_per_s, ms(st.wait.quantile(0.5)), ms(st.wait.quantile(0.9)), ms(st.wait.quantile(0.99)),
        ms(double(st.wait.max())), ms(st.wait.mean()), cpu_per_1000, etcd_cpu_per_1000, bench::peak_rss_mb(), rpcs, per_acq("Txn"),
        per_acq("Range"), per_acq("DeleteRange"), per_acq("Watch"), ms(st.read_wait.quantile(0.5)),
        ms(st.read_wait.quantile(0.99)), ms(st.write_wait.quantile(0.5)), ms(st.write_wait.quantile(0.99)), st.writes,
        st.violations, st.errors, leftover,
        bench::json_string(st.first_error).c_str(), mode_name(cfg.completions),
        st.late, std::chrono::duration<double, std::milli>(st.max_idle).count(), cfg.keep_going ? "true" : "false",
        cfg.fenced ? "true" : "false", cfg.watched ? "true" : "false", st.watched_events, cfg.checked ? "true" : "false", st.refused, st.lost_updates);
  } else {
    std::printf("coetcd %s: %d workers, %d locks, %d clients, %.1f s\n", cfg.mode.c_str(), cfg.workers, cfg.locks,
                cfg.clients, elapsed);
    std::printf("  acquisitions      %" PRId64 " (%.0f/s, %" PRId64 " attempts)\n", st.acquisitions, ops_per_s,
                st.attempts);
    std::printf("  wait ms           p50 %.2f  p90 %.2f  p99 %.2f  max %.2f\n", ms(st.wait.quantile(0.5)),
                ms(st.wait.quantile(0.9)), ms(st.wait.quantile(0.99)), ms(double(st.wait.max())));
    if (cfg.mode == "rw")
      std::printf("  by side ms        readers p50 %.2f p99 %.2f, writers p50 %.2f p99 %.2f (%" PRId64 " writes)\n",
                  ms(st.read_wait.quantile(0.5)), ms(st.read_wait.quantile(0.99)), ms(st.write_wait.quantile(0.5)),
                  ms(st.write_wait.quantile(0.99)), st.writes);
    std::printf("  longest idle      %.2f ms (a name free between two holders)\n",
                std::chrono::duration<double, std::milli>(st.max_idle).count());
    std::printf("  client CPU        %.3f s per 1000 acquisitions\n", cpu_per_1000);
    if (cfg.share_session && cfg.clients > 1)
      std::printf("  sessions' share   %.2f-%.2f of the mean; longest a session went without: %.1f ms\n", share_min,
                  share_max, max_gap_ms);
    std::printf("  peak RSS          %.1f MB\n", bench::peak_rss_mb());
    std::printf("  RPCs/acquisition  %.2f (Txn %.2f, Range %.2f, DeleteRange %.2f, Watch msgs %.2f)\n", rpcs,
                per_acq("Txn"), per_acq("Range"), per_acq("DeleteRange"), per_acq("Watch"));
    if (cfg.checked)
      std::printf("  checked in etcd   %" PRId64 " guards refused, %" PRId64 " updates lost\n", st.refused, st.lost_updates);
    std::printf("  violations        %" PRId64 "\n  errors            %" PRId64 "%s%s\n  keys left         %" PRId64 "\n",
                st.violations, st.errors, st.first_error.empty() ? "" : " first: ", st.first_error.c_str(), leftover);
  }
  return st.violations == 0 && st.errors == 0 && leftover <= 0 ? 0 : 1;
}
