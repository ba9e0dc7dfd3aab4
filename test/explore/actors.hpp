// The explorer's cap on how many actors of one kind a case runs (COETCD_EXPLORE_ACTORS), which the
// shrink mode (run_case.hpp) lowers from one try of a failing case to the next.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <string>

namespace coetcd::test::explore {

struct actor_cap {
  int cap = 0;      // 0: none
  int largest = 0;  // the largest count asked for since it was last reset: what a case would run
  /// The process's one cap, read once from COETCD_EXPLORE_ACTORS (unset or 0: no cap).
  static actor_cap& get() {
    static actor_cap c = [] {
      actor_cap a;
      if (auto v = std::getenv("COETCD_EXPLORE_ACTORS"); v && *v) a.cap = std::max(0, std::stoi(v));
      if (a.cap > 0) std::cerr << "explore: at most " << a.cap << " actors of a kind (COETCD_EXPLORE_ACTORS)\n";
      return a;
    }();
    return c;
  }
};

/// How many of `n` actors of one kind a case runs: `n`, or the cap when it is lower. A case draws
/// the seeds of all `n` and starts the first ones only, so that the others' choices stay as they
/// were and a capped run is the same run with fewer actors.
inline int capped(int n) {
  auto& c = actor_cap::get();
  c.largest = std::max(c.largest, n);
  return c.cap > 0 ? std::min(n, c.cap) : n;
}

}  // namespace coetcd::test::explore
