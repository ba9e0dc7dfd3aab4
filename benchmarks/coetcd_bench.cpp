// coetcd-bench: lock contention on a real etcd. N workers (coroutines on one io_context), each
// with its own session unless --share-session, spread over K lock names and M clients, take the
// lock, run a critical section (a yield, or --hold), and release it, until --duration or --count.
//
// Modes: mutex (async_lock, then the hold's async_release), try_lock (retry at once when held), election
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
//
// This file: the flags and the run (sessions, the clock, etcd's counters around it, the report);
// the workers' loops are in bench_loops.cpp, what they share in bench_state.hpp.
#include "bench_state.hpp"
#include "checked_section.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/program_options.hpp>

#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <sstream>

namespace po = boost::program_options;
using namespace bench;
using asio::use_awaitable;

namespace {

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
      ("start-at", po::value(&cfg.start_at), "start measuring at this Unix time in ms, once ready (a fleet of processes measuring one window: benchmarks/fleet)")
      ("completions", po::value(&completions), "thread (default here, so the committed figures keep their meaning) | poll | adaptive (the library's default): client_options::completions")
      ("keep-abseil-deadlock-detection", po::bool_switch(&cfg.keep_abseil_deadlock_detection),
       "leave Abseil's deadlock detection on (client_options::turn_off_abseil_deadlock_detection = false) to measure what turning it off saves")
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
  // One session is one candidate per name (one key): a second campaign of it is refused.
  if (cfg.share_session && cfg.mode == "election")
    throw std::invalid_argument("--mode election needs a session per worker: drop --share-session");
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
  o.turn_off_abseil_deadlock_detection = !cfg.keep_abseil_deadlock_detection;
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
    if (cfg.start_at > 0) {  // a fleet: every process measures the same window
      const auto at = std::chrono::system_clock::time_point(std::chrono::milliseconds(cfg.start_at));
      if (const auto now = std::chrono::system_clock::now(); at > now)
        co_await sleep(std::chrono::duration_cast<std::chrono::microseconds>(at - now));
      else std::fprintf(stderr, "coetcd-bench: ready %.2f s after --start-at\n", std::chrono::duration<double>(now - at).count());
    }
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
  if (!chain_mode(cfg.mode) && cfg.mode != "sem" && !kv_mode(cfg.mode) && counted != expected)
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
