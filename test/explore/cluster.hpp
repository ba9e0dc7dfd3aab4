// The explorer's member faults (test_explore_cluster): on a partitionable 3-member etcd_cluster,
// one fault at a time — a member killed (SIGKILL) and restarted, paused (SIGSTOP) and resumed,
// cut off from the other members, or cut off from its clients — each healed and the cluster
// settled before the next; and the history compacted at a recent revision every few seconds.
#pragma once

#include "world.hpp"

#include <future>
#include <utility>

namespace coetcd::test::explore {

enum fault_kind { fault_kill, fault_pause, fault_isolate, fault_isolate_clients, fault_kinds };

inline const char* fault_name(int k) {
  static const char* names[] = {"kill", "pause", "isolate", "isolate_clients"};
  return names[k];
}

/// What one cluster case's schedule did, for its summary and assertions.
struct cluster_tally {
  std::array<int, fault_kinds> faults{};  // by fault_kind, each healed
  int at_leader = 0;                      // faults of the member that was leader
  int restart_failures = 0;               // a killed member that would not start again
  int settle_failures = 0;                // no settled leader within 20 s of a heal
  int compactions = 0, compactions_refused = 0;
  std::vector<std::pair<long, long>> windows;  // each fault's first seq and the seq it was over (settled)
  int total() const {
    int n = 0;
    for (int f : faults) n += f;
    return n;
  }
};

/// Runs `f` (blocking: a member's start, a kill, a look at /metrics) on a thread of its own and
/// waits for it without holding the loop up (actors, keepalives and watches run meanwhile); its
/// exception's message, or "". A paused member never answers /metrics: nothing that reads it
/// (leader(), wait_for_settled_leader()) runs while one is paused.
inline asio::awaitable<std::string> off_loop(std::function<void()> f) {
  auto done = std::async(std::launch::async, [f = std::move(f)]() -> std::string {
    try {
      f();
      return {};
    } catch (const std::exception& e) {
      return e.what();
    }
  });
  while (done.wait_for(std::chrono::seconds(0)) != std::future_status::ready) co_await sleep_for(ms(20));
  co_return done.get();
}

/// Member faults until `w.deadline` (none starts unless it can be over, settled, 5 s before it):
/// the kinds in turn from `first_kind` (so that the suite's cases, starting one apart, see every
/// kind), the member (the leader half the time) and the length drawn. Never two members down: a
/// member that would not restart (twice) ends the faults of the case. Each fault waits for a
/// settled leader after its heal (etcd 3.4 has no pre-vote: a member cut off or paused comes
/// back with a higher term and unseats the leader), at most 20 s.
inline asio::awaitable<void> member_faults(world& w, etcd_cluster& cl, cluster_tally& t, std::uint64_t seed, int first_kind) {
  chooser c(seed);
  for (int i = 0; !w.stopping; ++i) {
    co_await sleep_for(ms(c.between(300, 1000)));
    const int kind = (first_kind + i) % fault_kinds;
    const auto length = ms(kind == fault_pause ? c.between(500, 2500) : c.between(800, 2500));
    const bool at_leader = c.chance(50);
    const int pick = c.between(0, cl.size() - 1);
    if (w.stopping || clock_type::now() + length + std::chrono::seconds(5) > w.deadline) break;
    int leader = -1;
    auto looking = off_loop([&cl, &leader] { leader = cl.leader(); });
    co_await std::move(looking);
    const int m = at_leader && leader >= 0 ? leader : pick;
    auto& member = cl.member(m);
    const auto from = w.h.note(-1, std::string("fault.") + fault_name(kind), "", -1, -1, 0,
                               "member " + std::to_string(m) + (m == leader ? " (leader)" : "") + " for " +
                                   std::to_string(length.count()) + " ms");
    t.at_leader += m == leader;
    std::function<void()> begin, end;
    switch (kind) {
      case fault_kill:
        begin = [&member] { member.kill(); };
        end = [&member] { member.start(); };
        break;
      case fault_pause:
        begin = [&member] { member.pause(); };
        end = [&member] { member.resume(); };
        break;
      case fault_isolate:
        begin = [&cl, m] { cl.isolate(m); };
        end = [&cl] { cl.heal(); };
        break;
      default:
        begin = [&cl, m] { cl.isolate_clients_of(m); };
        end = [&cl] { cl.heal(); };
    }
    auto starting = off_loop(begin);
    auto began = co_await std::move(starting);
    if (!began.empty()) w.h.note(-1, "fault.error", "", -1, -1, 0, began);
    co_await sleep_for(length);
    auto ending = off_loop(end);
    auto ended = co_await std::move(ending);
    if (!ended.empty() && kind == fault_kill) {
      // A port taken meanwhile by another suite's probe, say: once more, a moment later.
      w.h.note(-1, "fault.restart_failed", "", -1, -1, 0, "member " + std::to_string(m) + ": " + ended);
      co_await sleep_for(ms(1000));
      auto again = off_loop(end);
      ended = co_await std::move(again);
    }
    if (!ended.empty()) {
      ++t.restart_failures;
      w.h.note(-1, "fault.restart_failed", "", -1, -1, 0, "member " + std::to_string(m) + ": " + ended + "; no more faults");
      t.windows.emplace_back(from, w.h.last_seq());
      break;
    }
    auto settling = off_loop([&cl] { cl.wait_for_settled_leader(std::chrono::seconds(20)); });
    auto settled = co_await std::move(settling);
    t.settle_failures += !settled.empty();
    ++t.faults[static_cast<std::size_t>(kind)];
    t.windows.emplace_back(from, w.h.note(-1, "fault.end", "", -1, -1, 0,
                                          "member " + std::to_string(m) + (settled.empty() ? ", settled" : ": " + settled)));
  }
}

/// Compacts etcd's history at its revision now (or up to 5 before it) every 1-3 s until the
/// deadline: every watch of the recipes that resumes from an older revision (after a member
/// fault) is refused as compacted and must find its way again.
inline asio::awaitable<void> compactor(world& w, cluster_tally& t, std::uint64_t seed) {
  chooser c(seed);
  while (!w.stopping && clock_type::now() < w.deadline - std::chrono::seconds(1)) {
    co_await sleep_for(ms(c.between(1000, 3000)));
    const int back = c.between(0, 5);
    auto reading = w.judge->async_get("explore-compaction-probe", asio::as_tuple(use_awaitable));
    auto [rec, r] = co_await std::move(reading);
    if (rec) continue;
    const auto at = std::max<std::int64_t>(1, r.header.revision - back);
    auto op = w.h.invoke(-1, "compact", "", -1, -1, 0, at);
    auto compacting = w.judge->async_compact(at, asio::as_tuple(use_awaitable));
    auto [ec, hdr] = co_await std::move(compacting);
    w.h.complete(op, ec ? ec.message() : "ok");
    ++(ec ? t.compactions_refused : t.compactions);
  }
}

}  // namespace coetcd::test::explore
