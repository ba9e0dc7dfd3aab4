// How test_explore and test_explore_data run one case: its seed and length from the run's, the
// world made and run to its end, the report, and a case that cannot finish given up safely.
#pragma once

#include "check.hpp"
#include "world.hpp"

#include <algorithm>
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

/// Runs `body(world&)` for `share` of the run's seconds. Its choices come from the run's seed and
/// the case's index, so `--run_test=<case>` with the same seed replays it alone. Once it finished,
/// `summary(world&, run)` says what it did (and asserts what a run that did anything must show).
/// `links`: where the world's clients connect, when not to the shared etcd.
template <class Body, class Summary>
void run_case(const std::string& label, int index, double share, Body body, Summary summary,
              const world_links& links = {}) {
  const auto& run = run_config::get();
  const std::uint64_t seed = run.seed ^ (0x9e3779b97f4a7c15ull * static_cast<std::uint64_t>(index + 1));
  const double seconds = std::max(3.0, run.seconds * share);
  BOOST_TEST_MESSAGE("explore " << label << ": COETCD_EXPLORE_SEED=" << run.seed << ", " << seconds << " s");
  auto ioc = std::make_unique<asio::io_context>();
  auto w = std::make_unique<world>(*ioc, label, run.seed, seed, seconds, links);
  const auto limit = std::chrono::milliseconds(static_cast<long>(seconds * 1000)) + std::chrono::seconds(90);
  std::string broke;
  try {
    run_for(*ioc, body(*w), limit);
  } catch (const std::exception& x) {
    broke = x.what();
  } catch (...) {  // run_for's BOOST_FAIL: past its time limit
    broke = "past its time limit";
  }
  report(*w);
  if (!broke.empty()) {
    BOOST_ERROR("explore " << label << " (COETCD_EXPLORE_SEED=" << run.seed << ") did not finish: " << broke);
    abandon(std::move(ioc), std::move(w));
    return;
  }
  summary(*w, run);
  if (w->running > 0) {
    BOOST_ERROR("explore " << label << ": " << w->running << " coroutines still running");
    abandon(std::move(ioc), std::move(w));
  }
}

}  // namespace coetcd::test::explore
