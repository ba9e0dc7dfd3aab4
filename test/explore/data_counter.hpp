// The explorer's counter case (test_explore_data): adds of positive amounts, compare-and-sets and
// reads through several counter objects on three clients (two behind fault proxies), checked
// against etcd's record of each key: every add told applied took the counter across its own
// stretch (v - delta, v] within one change, no two of them overlap, and what the changes added
// beyond them is made of adds whose outcome is unknown; no add lost or made twice.
#pragma once

#include "data.hpp"

#include <coetcd/counter.hpp>

namespace coetcd::test::explore {

/// An add, or a compare-and-set from `expected` to `expected + delta`.
struct add_rec {
  int actor = 0, object = 0;
  std::string key;
  std::int64_t delta = 0;
  bool cas = false, cut = false;
  std::int64_t expected = 0;
  long invoked = 0, completed = 0;
  bool done = false, swapped = false;
  error_code ec;
  std::int64_t value = 0;  // the value told: after this add, or the one a refused set found
  /// Applied (an add answered, a set that swapped), maybe (no answer), or not.
  int outcome() const {
    if (done && !ec) return !cas || swapped ? 1 : -1;
    return ec == error::outcome_unknown ? 0 : -1;
  }
};

struct get_rec {
  int actor = 0;
  std::string key;
  long invoked = 0, completed = 0;
  bool done = false;
  error_code ec;
  std::int64_t value = 0;
};

struct counter_case {
  std::string name;
  std::vector<std::string> keys;
  struct object {
    int client = 0;
    std::size_t key = 0;
    std::unique_ptr<counter> c;
  };
  std::vector<object> objects;
  std::vector<std::shared_ptr<add_rec>> adds;
  std::vector<std::shared_ptr<get_rec>> gets;
  record_ptr record;
};
using counter_case_ptr = std::shared_ptr<counter_case>;

inline std::string add_text(const add_rec& a) {
  std::ostringstream s;
  s << (a.cas ? "set " + std::to_string(a.expected) + "->" + std::to_string(a.expected + a.delta) : "add " + std::to_string(a.delta))
    << " (actor " << a.actor << ", obj" << a.object << (a.cut ? ", cut short" : "") << ") told "
    << (!a.done ? std::string("nothing") : a.ec ? a.ec.message() : a.cas ? (a.swapped ? "set" : "found " + std::to_string(a.value)) : std::to_string(a.value));
  return s.str();
}

inline asio::awaitable<void> counter_actor(world& w, counter_case_ptr cc, int actor, std::uint64_t seed) {
  chooser c(seed);
  std::map<std::size_t, std::int64_t> hint;  // the last value this actor saw of each key
  while (!w.stopping && clock_type::now() < w.deadline) {
    const auto key = static_cast<std::size_t>(c.between(0, static_cast<int>(cc->keys.size()) - 1));
    std::vector<std::size_t> mine;
    for (std::size_t i = 0; i < cc->objects.size(); ++i)
      if (cc->objects[i].key == key) mine.push_back(i);
    const auto oi = mine[static_cast<std::size_t>(c.between(0, static_cast<int>(mine.size()) - 1))];
    auto& o = *cc->objects[oi].c;
    const int kind = c.weighted({75, 12, 13});
    const std::int64_t delta = c.between(1, 1000);
    cut_plan plan;
    plan.armed = kind == 1 && c.chance(30);
    plan.after = ms(c.between(0, 30));
    const auto pause = ms(c.between(0, 25));
    if (kind == 2) {
      auto g = std::make_shared<get_rec>();
      g->actor = actor;
      g->key = cc->keys[key];
      cc->gets.push_back(g);
      auto op = w.h.invoke(actor, "get", cc->name, static_cast<int>(oi), -1, 0);
      g->invoked = w.h.last_seq();
      auto getting = o.async_get(asio::as_tuple(use_awaitable));
      auto [ec, v] = co_await std::move(getting);
      g->done = true;
      g->ec = ec;
      g->value = v;
      if (!ec) hint[key] = v;
      g->completed = w.h.complete(op, g->key + ": " + (ec ? ec.message() : std::to_string(v)));
    } else {
      auto a = std::make_shared<add_rec>();
      a->actor = actor;
      a->object = static_cast<int>(oi);
      a->key = cc->keys[key];
      a->delta = delta;
      a->cas = kind == 1;
      a->cut = plan.armed;
      a->expected = hint[key];
      cc->adds.push_back(a);
      auto op = w.h.invoke(actor, a->cas ? "cas" : "add", cc->name, static_cast<int>(oi), -1, 0, delta);
      a->invoked = w.h.last_seq();
      if (a->cas) {
        canceller cut(w, plan);
        auto setting = o.async_compare_and_set(a->expected, a->expected + delta,
                                               asio::bind_cancellation_slot(cut.slot(), asio::as_tuple(use_awaitable)));
        auto [ec, swapped, found] = co_await std::move(setting);
        a->ec = ec;
        a->swapped = swapped;
        a->value = swapped ? a->expected + delta : found;
      } else {
        auto adding = o.async_add(delta, asio::as_tuple(use_awaitable));
        auto [ec, v] = co_await std::move(adding);
        a->ec = ec;
        a->value = v;
      }
      a->done = true;
      if (!a->ec) hint[key] = a->value;
      a->completed = w.h.complete(op, a->key + ": " + add_text(*a));
    }
    co_await sleep_for(pause);
  }
}

/// Which sums of `deltas` (each used at most once) can be made, up to their total.
inline std::vector<bool> subset_sums(const std::vector<std::int64_t>& deltas) {
  std::int64_t total = 0;
  for (auto d : deltas) total += d;
  std::vector<bool> can(static_cast<std::size_t>(total) + 1, false);
  can[0] = true;
  std::int64_t reach = 0;
  for (auto d : deltas) {
    for (std::int64_t s = reach; s >= 0; --s)
      if (can[static_cast<std::size_t>(s)]) can[static_cast<std::size_t>(s + d)] = true;
    reach += d;
  }
  return can;
}

inline bool can_make(const std::vector<bool>& sums, std::int64_t x) {
  return x >= 0 && static_cast<std::size_t>(x) < sums.size() && sums[static_cast<std::size_t>(x)];
}

/// (c1), (c2) for one key, from etcd's record and the operations on the key; the key's last value
/// in the record (0 without a change) and a summary.
inline std::pair<std::int64_t, std::string> judge_counter_key(history& h, const std::string& name, const std::string& key,
                                                              const etcd_record& rec,
                                                              const std::vector<std::shared_ptr<add_rec>>& adds,
                                                              const std::vector<std::shared_ptr<get_rec>>& gets) {
  const std::string inv = "(c1) a counter loses no add and makes none twice";
  const std::string reads = "(c2) a counter's read is linearizable";
  auto fail = [&](const std::string& invariant, const std::string& what, long from, long to) {
    h.fail({invariant, name, what, from, from > 0 && to == 0 ? h.last_seq() : to, {}});
  };
  // The values the record went through: (revision, value), from before the case on.
  std::vector<std::pair<std::int64_t, std::int64_t>> steps;
  auto initial = rec.initial.find(key);
  steps.push_back({rec.first - 1, initial == rec.initial.end() ? 0 : counter::parse(initial->second.value).value_or(0)});
  for (auto& e : rec.events) {
    if (e.kv.key != key) continue;
    auto v = counter::parse(e.kv.value);
    if (e.type != watch_event::kind::put || !v) {
      fail(inv, key + " at revision " + std::to_string(e.kv.mod_revision) + ": " +
                    (e.type != watch_event::kind::put ? std::string("deleted") : "not a number: " + e.kv.value), 0, 0);
      continue;
    }
    if (*v <= steps.back().second)
      fail(inv, key + " went from " + std::to_string(steps.back().second) + " to " + std::to_string(*v) + " at revision " +
                    std::to_string(e.kv.mod_revision) + " (every amount added is positive)", 0, 0);
    steps.push_back({e.kv.mod_revision, *v});
  }
  std::vector<const add_rec*> applied;
  std::vector<std::int64_t> maybe, refused;
  std::map<std::string, int> errors;
  for (auto& a : adds) {
    if (a->key != key) continue;
    const int o = a->outcome();
    if (o > 0) applied.push_back(a.get());
    else if (o == 0) maybe.push_back(a->delta);
    else if (a->ec) {
      refused.push_back(a->delta);
      ++errors[a->ec.message()];
    }
  }
  // Each applied add: its stretch inside one change, the stretches apart.
  std::sort(applied.begin(), applied.end(), [](auto* a, auto* b) { return a->value < b->value; });
  std::vector<std::int64_t> told(steps.size(), 0);  // what the applied adds account for in each change
  const add_rec* before = nullptr;
  for (auto* a : applied) {
    const auto lo = a->value - a->delta;
    auto at = std::lower_bound(steps.begin() + 1, steps.end(), a->value, [](auto& s, std::int64_t v) { return s.second < v; });
    if (at == steps.end() || std::prev(at)->second > lo)
      fail(inv, key + ": " + add_text(*a) + ", but no change of the key went from at most " + std::to_string(lo) + " to at least " +
                    std::to_string(a->value), a->invoked, a->completed);
    else
      told[static_cast<std::size_t>(at - steps.begin())] += a->delta;
    if (before && before->value > lo)
      fail(inv, key + ": two adds told overlapping stretches: " + add_text(*before) + " and " + add_text(*a),
           std::min(before->invoked, a->invoked), std::max(before->completed, a->completed));
    before = a;
  }
  // What the changes added beyond the applied adds: made of adds whose outcome is unknown.
  const auto can = subset_sums(maybe);
  for (std::size_t i = 1; i < steps.size(); ++i) {
    const auto rest = steps[i].second - steps[i - 1].second - told[i];
    if (rest != 0 && !can_make(can, rest))
      fail(inv, key + ": the change at revision " + std::to_string(steps[i].first) + " (" + std::to_string(steps[i - 1].second) + " -> " +
                    std::to_string(steps[i].second) + ") added " + std::to_string(rest) + " beyond the adds told applied in it, which no set of the " +
                    std::to_string(maybe.size()) + " adds of unknown outcome makes", 0, 0);
  }
  std::int64_t told_total = 0;
  for (auto* a : applied) told_total += a->delta;
  const auto gap = steps.back().second - steps.front().second - told_total;
  if (!can_make(can, gap)) {
    auto all = maybe;
    all.insert(all.end(), refused.begin(), refused.end());
    std::string why = gap < 0 ? "less than the adds told applied: an add was lost" : "no set of the adds of unknown outcome makes it";
    if (gap > 0 && !refused.empty() && can_make(subset_sums(all), gap)) {
      why += "; adds that failed otherwise would (";
      for (auto& [e, n] : errors) why += std::to_string(n) + " " + e + "; ";
      why += "an error other than outcome_unknown says the add was not applied)";
    }
    fail(inv, key + " went from " + std::to_string(steps.front().second) + " to " + std::to_string(steps.back().second) + ", " +
                  std::to_string(applied.size()) + " adds told applied add " + std::to_string(told_total) + ", the " +
                  std::to_string(gap) + " beyond: " + why, 0, 0);
  }
  // Reads: a value the key held, never below an add told applied before the read began.
  std::set<std::int64_t> held;
  for (auto& [rev, v] : steps) held.insert(v);
  for (auto& g : gets) {
    if (g->key != key || !g->done || g->ec) continue;
    if (!held.count(g->value))
      fail(reads, key + ": a read (actor " + std::to_string(g->actor) + ") found " + std::to_string(g->value) + ", which the key never held",
           g->invoked, g->completed);
    for (auto* a : applied)
      if (a->completed < g->invoked && a->value > g->value) {
        fail(reads, key + ": a read (actor " + std::to_string(g->actor) + ") found " + std::to_string(g->value) + " after " + add_text(*a) +
                        " had completed", a->invoked, g->completed);
        break;
      }
  }
  if (applied.empty()) fail("(c0) adds are applied", key + ": no add was told applied", 0, 0);
  std::ostringstream sum;
  sum << key.substr(key.rfind('/') + 1) << ": " << steps.size() - 1 << " changes to " << steps.back().second << ", "
      << applied.size() << " applied, " << maybe.size() << " unknown (" << gap << " of theirs applied)";
  for (auto& [e, n] : errors) sum << ", " << n << " " << e;
  return {steps.back().second, sum.str()};
}

inline asio::awaitable<void> check_counter(world& w, counter_case& cc) {
  std::string sum;
  for (auto& key : cc.keys) {
    const auto judged = judge_counter_key(w.h, cc.name, key, *cc.record, cc.adds, cc.gets);
    const std::int64_t last = judged.first;
    sum += judged.second + "; ";
    // The key now is the record's last value.
    auto reading = w.judge->async_get(key, get_options{}, use_awaitable);
    auto now = co_await std::move(reading);
    const auto final_value = now.kvs.empty() ? 0 : counter::parse(now.kvs.front().value).value_or(-1);
    if (final_value != last)
      w.h.fail({"(c1) a counter loses no add and makes none twice", cc.name,
                key + " is " + std::to_string(final_value) + ", its record ends at " + std::to_string(last), 0, 0, {}});
  }
  std::size_t reads_ok = 0;
  for (auto& g : cc.gets) reads_ok += g->done && !g->ec;
  summary(w, sum + std::to_string(reads_ok) + " reads");
}

/// The counter case: two keys, an object per key on each client and a second on clients 0 and
/// 2, 9 actors, links slowed, held and cut; then the check.
inline asio::awaitable<void> run_counter_case(world& w) {
  auto cc = std::make_shared<counter_case>();
  cc->name = w.name("counter");
  cc->keys = {cc->name + "/c0", cc->name + "/c1"};
  for (std::size_t k = 0; k < cc->keys.size(); ++k)
    for (int c : {0, 1, 2, 0, 2})
      cc->objects.push_back({c, k, std::make_unique<counter>(*w.clients[static_cast<std::size_t>(c)], cc->keys[k])});
  const int actors = 9;
  std::vector<std::uint64_t> seeds;
  for (int i = 0; i < actors + 1; ++i) seeds.push_back(w.choose.next());
  auto starting = start_record(w, w.names_prefix);
  cc->record = co_await std::move(starting);
  w.deadline = clock_type::now() + std::chrono::milliseconds(static_cast<long>(w.seconds * 1000));
  for (int a = 0; a < capped(actors); ++a) w.spawn(counter_actor(w, cc, a, seeds[static_cast<std::size_t>(a)]));
  w.spawn(link_faults(w, seeds.back(), false));
  auto draining = w.drain();
  const bool drained = co_await std::move(draining);
  auto finishing = finish_record(w, cc->record);
  const bool complete = co_await std::move(finishing);
  if (!complete) {
    w.h.fail({"etcd's record of the case is read back whole", cc->name, "the judge's watch did not reach the end", 0, 0, {}});
    co_return;
  }
  if (!drained) co_return;
  auto checking = check_counter(w, *cc);
  co_await std::move(checking);
}

}  // namespace coetcd::test::explore
