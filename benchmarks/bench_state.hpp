// What coetcd-bench's workers share (its flags, each lock name's slot with the in-process
// reference lock, the run's counters), and the loops main() starts (bench_loops.cpp).
#pragma once

#include "bench_support.hpp"

#include <coetcd.hpp>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/post.hpp>

#include <chrono>
#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace bench {

namespace asio = boost::asio;
using clock_type = std::chrono::steady_clock;

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
  std::int64_t start_at = 0;  // Unix ms: measuring starts then, once ready (--start-at; a fleet of processes)
  coetcd::completion_mode completions = coetcd::completion_mode::thread;
  bool keep_abseil_deadlock_detection = false;  // off otherwise, as in the committed figures
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
  // --mode local_async: an unlock that keeps Asio's rules, as coetcd's async_release does: it
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

// The in-process FIFO lock of the bench, no etcd.
inline bool local_mode(const std::string& mode) { return mode == "local" || mode == "local_async"; }
inline bool kv_mode(const std::string& mode) { return mode == "put" || mode == "get" || mode == "kv_txn"; }
// One serial worker against etcd with no lock: the floors.
inline bool chain_mode(const std::string& mode) { return mode == "delete_chain" || mode == "handoff_chain"; }

// Where a chain mode puts its keys (and --watched watches).
inline std::string chain_prefix(const config& cfg) {
  return cfg.prefix + (cfg.mode == "delete_chain" ? "chain/" : "handoff-chain/");
}

asio::awaitable<void> sleep(std::chrono::microseconds d);

/// One worker of the lock, election, txn, rw, sem, local and kv modes, from its session (made
/// here unless shared) to its end; counts itself out of `st.running`.
asio::awaitable<void> worker(run_state& st, coetcd::client& c, int client, int index,
                             std::shared_ptr<coetcd::session> s, lock_slot& slot, bool writer);
/// The floors: one serial worker each (see coetcd_bench.cpp's opening comment).
asio::awaitable<void> delete_chain_loop(run_state& st, coetcd::client& c);
asio::awaitable<void> handoff_chain_loop(run_state& st, coetcd::client& c);
/// --watched: reads every event of the chain's prefix until the run ends (the client closes);
/// a watch that ends sooner, before the clock starts too, fails the run.
asio::awaitable<void> watch_chain(run_state& st, coetcd::watcher w);

}  // namespace bench
