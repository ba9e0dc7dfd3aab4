// The explorer's KV and watch cases (test_explore): KV callers on three clients and, in the watch
// case, watchers through the faulted links until the deadline; then the judge's reads of every
// key, a last write every watch must reach, and the checks of kv_model.hpp and watch.hpp.
#pragma once

#include "check.hpp"
#include "watch.hpp"

namespace coetcd::test::explore {

struct kv_case {
  std::array<int, 3> actors{3, 3, 2};  // per client: behind proxy 0, behind proxy 1, direct
  bool watchers = false;
  long budget = 1'000'000;  // steps of the linearizability search per key
};

/// A watch of the watch case, spawned on client `ci`.
inline watch_ptr start_watch(const std::shared_ptr<kv_world>& kp, std::vector<watch_ptr>& all, int ci,
                             std::int64_t start, std::string how, bool prev_kv = false) {
  auto r = std::make_shared<watch_rec>();
  r->label = "w" + std::to_string(all.size()) + " (client " + std::to_string(ci) + ", " + how + ")";
  r->name = "watch@client" + std::to_string(ci);
  r->start = start;
  r->prev_kv = prev_kv;
  all.push_back(r);
  kp->w.spawn(watch_loop(kp, r, *kp->clients[static_cast<std::size_t>(ci)]));
  return r;
}

/// The watch case's later watchers: at a third of the run one from a revision half-way back
/// (etcd serves it from its history before it catches up), at half one from its creation.
inline asio::awaitable<void> late_watchers(std::shared_ptr<kv_world> kp, std::shared_ptr<std::vector<watch_ptr>> all,
                                           std::int64_t first) {
  kv_world& k = *kp;
  const auto length = k.w.deadline - clock_type::now();
  co_await sleep_for(length / 3);
  if (k.w.stopping) co_return;
  auto reading = k.w.judge->async_get(k.sentinel, use_awaitable);
  auto now = co_await std::move(reading);
  const std::int64_t past = std::max(first, (first + now.header.revision) / 2);
  start_watch(kp, *all, 0, past, "from rev " + std::to_string(past) + ", " + std::to_string(now.header.revision - past) + " back");
  co_await sleep_for(length / 6);
  if (!k.w.stopping) start_watch(kp, *all, 1, 0, "from its creation");
}

inline asio::awaitable<void> run_kv_case(world& w, kv_case kc) {
  auto kp = std::make_shared<kv_world>(w);
  kv_world& k = *kp;
  std::vector<std::uint64_t> seeds;
  for (int i = 0; i < 12; ++i) seeds.push_back(w.choose.next());
  make_kv_clients(k);
  k.clients.push_back(w.judge.get());  // client 3: the judge's own reads at the end
  k.spaces.push_back("");
  // A clean prefix; the case's history starts at the revision after.
  delete_options everything;
  everything.prefix = true;
  auto cleaning = w.judge->async_delete(k.prefix, everything, use_awaitable);
  auto cleaned = co_await std::move(cleaning);
  const std::int64_t first = cleaned.header.revision + 1;
  w.h.note(-1, "kv.start", "", -1, -1, 0, "keys under " + k.prefix + " from rev " + std::to_string(first));

  auto reference = std::make_shared<watch_rec>();
  reference->label = "the judge's watch (direct, from rev " + std::to_string(first) + ")";
  reference->name = "watch@judge";
  reference->start = first;
  w.spawn(watch_loop(kp, reference, *w.judge));
  auto watches = std::make_shared<std::vector<watch_ptr>>();
  if (kc.watchers) {
    start_watch(kp, *watches, 0, first, "from rev " + std::to_string(first));
    start_watch(kp, *watches, 1, first, "from rev " + std::to_string(first) + ", prev_kv", true);
  }
  w.deadline = clock_type::now() + std::chrono::milliseconds(static_cast<long>(w.seconds * 1000));
  if (kc.watchers) w.spawn(late_watchers(kp, watches, first));
  int actor = 0;
  for (int ci = 0; ci < 3; ++ci)
    for (int j = 0; j < kc.actors[static_cast<std::size_t>(ci)] && actor < 10; ++j, ++actor) {
      if (j >= capped(kc.actors[static_cast<std::size_t>(ci)])) continue;  // its seed stays drawn
      w.h.note(actor, "kv.actor", "", -1, -1, 0,
               "on client " + std::to_string(ci) + (ci < 2 ? " (behind proxy " + std::to_string(ci) + ")" : " (direct, namespaced)"));
      w.spawn(kv_actor(kp, actor, ci, seeds[static_cast<std::size_t>(actor)]));
    }
  w.spawn(kv_faults(kp, 0, seeds[10]));
  w.spawn(kv_faults(kp, 1, seeds[11]));

  // The end: every call completes within its deadline; then the links heal, and the last write.
  while (clock_type::now() < w.deadline) co_await sleep_for(ms(100));
  w.stopping = true;
  auto until = clock_type::now() + std::chrono::seconds(15);
  while (k.writing > 0 && clock_type::now() < until) co_await sleep_for(ms(50));
  if (k.writing > 0) {
    for (auto& e : w.h.open_operations())
      w.h.fail({"every operation completes (within its client's request deadline)", e.name,
                "still pending 15 s after the end: " + history::describe(e), e.seq, w.h.last_seq(), {}});
    co_return;  // the explore case sees its coroutines running
  }
  for (auto& p : w.proxies) {
    p->restore();
    p->delay(ms(0));
  }
  // The judge's reads, judged with the rest, come before the last write: nothing after it counts.
  for (auto& key : k.keys) co_await kv_get(k, -1, 3, key);
  auto ending = w.judge->async_put(k.sentinel, "end", use_awaitable);
  auto ended = co_await std::move(ending);
  w.h.note(-1, "kv.end", k.sentinel, -1, -1, 0, "the last write, rev " + std::to_string(ended.header.revision));
  auto all_done = [&] {
    bool done = reference->done;
    for (auto& r : *watches) done = done && r->done;
    return done;
  };
  until = clock_type::now() + std::chrono::seconds(20);
  while (!all_done() && clock_type::now() < until) co_await sleep_for(ms(50));
  if (!all_done()) {
    auto everyone = *watches;
    everyone.push_back(reference);
    for (auto& r : everyone)
      if (!r->done) {
        r->cancelled = true;
        r->wt.close();
      }
    until = clock_type::now() + std::chrono::seconds(5);
    while (!all_done() && clock_type::now() < until) co_await sleep_for(ms(50));
  }
  until = clock_type::now() + std::chrono::seconds(10);  // the fault loops end their last fault
  while (w.running > 0 && clock_type::now() < until) co_await sleep_for(ms(50));

  // The checks.
  check_revisions(w.h, k.ops);
  std::vector<applied_change> changes;
  for (auto& e : reference->events)
    if (e.key != k.sentinel) changes.push_back({e.revision, e.key, e.put ? std::optional(e.value) : std::nullopt});
  const auto judged = reference->reached_end ? settle_unknown(w.h, k.ops, changes) : k.ops;
  const auto verdicts = check_linearizable(w.h, judged, kc.budget);
  check_watch_order(w.h, *reference);
  check_watch_delivery(w.h, *reference, reference->events);
  if (reference->reached_end) check_applied(w.h, k.ops, reference->events, k.sentinel);
  for (auto& r : *watches) {
    check_watch_order(w.h, *r);
    if (reference->reached_end) check_watch_delivery(w.h, *r, reference->events);
  }

  // What the run did, so a quiet run shows as one.
  std::map<std::string, int> outcomes;
  for (auto& o : k.ops) {
    static const char* kinds[] = {"put", "get", "del", "cas"};
    static const char* results[] = {"ok", "maybe applied", "not applied"};
    ++outcomes[std::string(kinds[o.kind]) + " " + (o.kind == kv_op::get && o.outcome != kv_op::ok ? "failed" : results[o.outcome])];
  }
  std::ostringstream s;
  s << "explore " << w.label << ": " << k.ops.size() << " kv operations (";
  for (auto& [what, n] : outcomes) s << what << " " << n << ", ";
  int settled = 0;
  for (auto& o : judged) settled += o.settled;
  s << "reads resent unanswered: " << k.events->resent[0] << " + " << k.events->resent[1] << "; "
    << (reference->reached_end ? std::to_string(settled) + " writes of unknown outcome found applied in etcd's history"
                               : std::string("etcd's history incomplete: unknown outcomes left open"))
    << ")";
  for (auto& v : verdicts)
    s << "\n  " << v.key << ": " << (v.verdict == lin_result::linearizable ? "linearizable" : v.verdict == lin_result::violated ? "NOT linearizable" : "unknown")
      << " (" << v.ops << " operations judged, " << v.steps << " steps)" << (v.verdict == lin_result::unknown ? ": " + v.why : "");
  s << "\n  " << reference->label << ": " << reference->events.size() << " events";
  for (auto& r : *watches)
    s << "\n  " << r->label << ": " << r->events.size() << " events in " << r->batches << " batches";
  std::int64_t reopened[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    auto st = k.clients[static_cast<std::size_t>(i)]->stats();
    auto it = st.streams.find("Watch");
    reopened[i] = it == st.streams.end() ? 0 : static_cast<std::int64_t>(it->second.reopened);
  }
  if (kc.watchers) s << "\n  Watch streams reopened: " << reopened[0] << " + " << reopened[1];
  BOOST_TEST_MESSAGE(s.str());
  int unsure = 0;
  for (auto& o : k.ops) unsure += o.outcome != kv_op::ok;
  // Each link's first hold lasts 1.2 s, past both deadlines: calls must have failed; a cut of a
  // link closes the Watch stream of its client (its first watches are made before any fault).
  if (k.holds[0] + k.holds[1] > 0)
    BOOST_TEST(unsure > 0, "explore " << w.label << ": no call failed; the faults did not reach the calls");
  for (int i = 0; i < 2 && kc.watchers; ++i)
    if (k.cuts[static_cast<std::size_t>(i)] > 0)
      BOOST_TEST(reopened[i] > 0, "explore " << w.label << ": client " << i << "'s link was cut, its Watch stream never reopened");
}

}  // namespace coetcd::test::explore
