// How test_explore and test_explore_data run one case: its seed and length from the run's, the
// world made and run to its end, the report, a case that cannot finish given up safely, and
// (COETCD_EXPLORE_SHRINK=1) a failing case run again at smaller settings until it stops failing.
#pragma once

#include "check.hpp"
#include "world.hpp"

#include <algorithm>
#include <array>
#include <memory>
#include <string>

namespace coetcd::test::explore {

/// Gives up a case whose coroutines still run: they reference the world and the io_context, so
/// both are left allocated (the clients closed first, so no thread of theirs posts any more).
inline void abandon(std::unique_ptr<asio::io_context> ioc, std::unique_ptr<world> w) {
  for (auto& c : w->clients) c->close();
  w->judge->close();
  ioc->restart();
  ioc->run_for(std::chrono::seconds(2));
  (void)w.release();
  (void)ioc.release();
}

/// A case's seed: the run's and the case's index.
inline std::uint64_t case_seed(std::uint64_t run_seed, int index) {
  return run_seed ^ (0x9e3779b97f4a7c15ull * static_cast<std::uint64_t>(index + 1));
}
/// A case's length: its share of the run's seconds, at least 3.
inline double case_seconds(double run_seconds, double share) { return std::max(3.0, run_seconds * share); }
/// The limit past which a case is given up.
inline std::chrono::milliseconds case_limit(double seconds) {
  return std::chrono::milliseconds(static_cast<long>(seconds * 1000)) + std::chrono::seconds(90);
}

/// What a failed run of a case is shrunk for when it did not finish (it had no violation to go by).
inline const std::string did_not_finish = "the case finishes";

/// Runs the case once, as the run's settings say, and reports it. The invariant of its first
/// violation ("" when there is none, did_not_finish when it did not finish).
template <class Body, class Summary>
std::string run_case_once(const std::string& label, int index, double share, Body& body, Summary& summary,
                          const world_links& links) {
  const auto& run = run_config::get();
  const std::uint64_t seed = case_seed(run.seed, index);
  const double seconds = case_seconds(run.seconds, share);
  BOOST_TEST_MESSAGE("explore " << label << ": COETCD_EXPLORE_SEED=" << run.seed << ", " << seconds << " s");
  actor_cap::get().largest = 0;
  auto ioc = std::make_unique<asio::io_context>();
  auto w = std::make_unique<world>(*ioc, label, run.seed, seed, seconds, links);
  std::string broke;
  try {
    run_for(*ioc, body(*w), case_limit(seconds));
  } catch (const std::exception& x) {
    broke = x.what();
  } catch (...) {  // run_for's BOOST_FAIL: past its time limit
    broke = "past its time limit";
  }
  report(*w);
  if (!broke.empty()) {
    BOOST_ERROR("explore " << label << " (COETCD_EXPLORE_SEED=" << run.seed << ") did not finish: " << broke);
    abandon(std::move(ioc), std::move(w));
    return did_not_finish;
  }
  const std::string failed = w->h.violations().empty() ? "" : w->h.violations().front().invariant;
  summary(*w, run);
  if (w->running > 0) {
    BOOST_ERROR("explore " << label << ": " << w->running << " coroutines still running");
    abandon(std::move(ioc), std::move(w));
  }
  return failed;
}

/// Runs `a` on `ioc` for at most `limit`, recording no test error: what ended it badly ("" when
/// it ran to its end). Its state is shared: an abandoned run's handler may still run later.
inline std::string run_quietly(asio::io_context& ioc, asio::awaitable<void> a, std::chrono::steady_clock::duration limit) {
  struct state_t {
    bool done = false;
    std::exception_ptr error;
  };
  auto state = std::make_shared<state_t>();
  asio::co_spawn(ioc, std::move(a), [state, &ioc](std::exception_ptr e) {
    state->done = true;
    state->error = e;
    ioc.stop();
  });
  ioc.restart();
  ioc.run_for(limit);
  ioc.restart();
  if (!state->done) return "past its time limit";
  try {
    if (state->error) std::rethrow_exception(state->error);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "a non-standard exception";
  }
  return "";
}

/// The case's body, after its names are cleared of what an earlier run of it in this process left.
template <class Body>
asio::awaitable<void> afresh(world& w, Body& body) {
  delete_options everything;
  everything.prefix = true;
  const std::array<std::string, 2> prefixes{w.names_prefix, "explore-data/" + w.names_prefix};  // see world::data_key
  for (auto& p : prefixes) {
    auto deleting = w.judge->async_delete(p, everything, asio::as_tuple(use_awaitable));
    co_await std::move(deleting);
  }
  auto running = body(w);
  co_await std::move(running);
}

/// One try of the shrink: the case run again with the run's seed, at most `actors` actors of a
/// kind (0: no cap) and `run_seconds`. The report of its first violation of `invariant` ("" when
/// none showed); no test error is recorded.
template <class Body>
std::string shrink_try(const std::string& label, int index, double share, Body& body, int actors, double run_seconds,
                       const std::string& invariant, const world_links& links) {
  const auto& run = run_config::get();
  const double seconds = case_seconds(run_seconds, share);
  actor_cap::get().cap = actors;
  auto ioc = std::make_unique<asio::io_context>();
  auto w = std::make_unique<world>(*ioc, label, run.seed, case_seed(run.seed, index), seconds, links);
  const auto broke = run_quietly(*ioc, afresh(*w, body), case_limit(seconds) + std::chrono::seconds(10));
  std::string shown;
  if (invariant == did_not_finish && !broke.empty()) shown = "did not finish: " + broke;
  for (auto& v : w->h.violations())
    if (shown.empty() && v.invariant == invariant) shown = violation_text(w->h, v, false);
  if (!broke.empty() || w->running > 0) abandon(std::move(ioc), std::move(w));
  return shown;
}

/// COETCD_EXPLORE_SHRINK=1: a case that failed runs again with the same seed at smaller
/// settings while its first violation's invariant still shows: fewer actors of each kind
/// (halving), then a shorter length (halving the run's seconds while the case's share is above
/// its 3 s floor); at most 6 tries, each run twice at most (etcd's timing varies: one run that
/// shows it is enough). Prints the smallest settings that still failed, as a line to paste, and
/// what that run showed.
template <class Body>
void shrink_case(const std::string& label, int index, double share, Body& body, const std::string& invariant,
                 const world_links& links) {
  const auto& run = run_config::get();
  auto& cap = actor_cap::get();
  const int original = cap.cap;
  int actors = original > 0 ? std::min(original, cap.largest) : cap.largest;
  auto seconds = static_cast<std::uint64_t>(run.seconds);
  std::string shown;
  int tries = 0;
  bool smaller = false;
  auto shows = [&](int a, std::uint64_t s) {
    ++tries;
    for (int i = 0; i < 2; ++i) {
      auto r = shrink_try(label, index, share, body, a, static_cast<double>(s), invariant, links);
      std::cerr << "explore shrink " << label << ": try " << tries << "." << i + 1 << " at " << a << " actors, "
                << s << " s: " << (r.empty() ? "passed" : "failed") << "\n";
      if (!r.empty()) {
        shown = std::move(r);
        return true;
      }
    }
    return false;
  };
  for (; tries < 6 && actors > 1 && shows(actors / 2, seconds); smaller = true) actors /= 2;
  for (; tries < 6 && seconds / 2 >= 1 && static_cast<double>(seconds) * share > 3.0 && shows(actors, seconds / 2); smaller = true)
    seconds /= 2;
  cap.cap = original;
  std::ostringstream s;
  s << "explore shrink " << label << ": \"" << invariant << "\" ";
  if (!smaller) {
    s << "did not show again at smaller settings (" << tries << " tries)";
  } else {
    s << "still shows at COETCD_EXPLORE_SECONDS=" << seconds;
    if (actors > 0) s << " and at most " << actors << " actors of a kind";
    s << " (" << tries << " tries); replay it with\n  COETCD_EXPLORE_SEED=" << run.seed << " COETCD_EXPLORE_SECONDS=" << seconds;
    if (actors > 0) s << " COETCD_EXPLORE_ACTORS=" << actors;
    s << " " << boost::unit_test::framework::master_test_suite().argv[0] << " --run_test=" << label << "\n  " << shown;
  }
  std::cerr << s.str() << "\n";
  BOOST_TEST_MESSAGE(s.str());
}

/// Runs `body(world&)` for `share` of the run's seconds. Its choices come from the run's seed and
/// the case's index, so `--run_test=<case>` with the same seed replays it alone. Once it finished,
/// `summary(world&, run)` says what it did (and asserts what a run that did anything must show).
/// COETCD_EXPLORE_SHRINK=1 shrinks a case that failed (shrink_case). `links`: where the world's
/// clients connect, when not to the shared etcd.
template <class Body, class Summary>
void run_case(const std::string& label, int index, double share, Body body, Summary summary,
              const world_links& links = {}) {
  const auto failed = run_case_once(label, index, share, body, summary, links);
  if (!failed.empty() && env_u64("COETCD_EXPLORE_SHRINK", 0) != 0) shrink_case(label, index, share, body, failed, links);
}

}  // namespace coetcd::test::explore
