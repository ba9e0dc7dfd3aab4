// The explorer's cache check (test_explore_data): each cache brought to the end revision, every
// probe of a cache's range() compared with etcd's record at its revision, and every reader's
// updates replayed from its start: each change once and in order (or a reset with the
// difference), each with the value it replaced, its copy equal to etcd's state after each update.
#pragma once

#include "data_cache.hpp"

namespace coetcd::test::explore {

inline std::string event_text(const watch_event& e) {
  return std::string(e.type == watch_event::kind::put ? "put " : "delete ") + e.kv.key + " at " + std::to_string(e.kv.mod_revision) +
         (e.type == watch_event::kind::put ? " = " + text_of(std::optional<key_value>(e.kv)) : "") +
         (e.prev_kv ? ", prev " + text_of(e.prev_kv) : ", no prev");
}

/// Whether a reader's event is the recorded change: same key, kind and revision, and for a put
/// the same version of the key.
inline bool same_change(const watch_event& got, const watch_event& want) {
  if (got.type != want.type || got.kv.key != want.kv.key || got.kv.mod_revision != want.kv.mod_revision) return false;
  return got.type == watch_event::kind::del || same_version(got.kv, want.kv);
}

/// (k4) for one reader: its updates replayed from its start against etcd's record (`vs`, and
/// `changes`, the prefix's changes in revision order); its updates, resets and events.
inline std::tuple<std::size_t, std::size_t, std::size_t> judge_reader(history& h, const std::string& prefix, const versions& vs,
                                                                      const std::vector<const watch_event*>& changes,
                                                                      const reader_log& r) {
  const std::string follows = "(k4) a reader gets each change once and in order (or a reset with the difference), each with the "
                              "value it replaced, and its copy is etcd's state after each update";
  auto first_after = [&](std::int64_t rev) {
    return std::upper_bound(changes.begin(), changes.end(), rev, [](std::int64_t x, const watch_event* e) { return x < e->kv.mod_revision; });
  };
  std::size_t updates = 0, resets = 0, events = 0;
  const auto who = std::string(r.own ? "the own reader" : "reader " + std::to_string(r.id)) + " of cache " + std::to_string(r.cache);
  auto copy = r.start;
  auto rev = r.start_rev;
  if (auto d = state_difference(copy, vs.state_at(rev, prefix)); !d.empty()) {
    h.fail({follows, prefix, who + ": its start at revision " + std::to_string(rev) + ": " + d, r.started, r.started, {}});
    return {0, 0, 0};
  }
  for (std::size_t i = 0; i < r.updates.size(); ++i) {
    const auto& u = r.updates[i];
    const long seq = r.seqs[i];
    const auto what = who + ", update " + std::to_string(i + 1) + (u.reset ? " (a reset)" : "") + " from revision " +
                      std::to_string(rev) + " to " + std::to_string(u.revision) + ": ";
    auto bad = [&](const std::string& why) { h.fail({follows, prefix, what + why, seq, seq, {}}); };
    ++updates;
    resets += u.reset;
    events += u.events.size();
    if (u.revision < rev) {
      bad("it goes back");
      break;
    }
    if (!u.reset) {
      auto from = first_after(rev), to = first_after(u.revision);
      const auto want = static_cast<std::size_t>(to - from);
      std::string diff;
      for (std::size_t j = 0; j < std::max(want, u.events.size()) && diff.empty(); ++j) {
        if (j >= u.events.size()) diff = "missing " + event_text(**(from + static_cast<long>(j)));
        else if (j >= want) diff = "extra " + event_text(u.events[j]);
        else if (!same_change(u.events[j], **(from + static_cast<long>(j))))
          diff = "event " + std::to_string(j + 1) + " is " + event_text(u.events[j]) + ", etcd's is " + event_text(**(from + static_cast<long>(j)));
      }
      if (!diff.empty()) {
        bad(std::to_string(u.events.size()) + " events where etcd has " + std::to_string(want) + ": " + diff);
        break;
      }
    }
    std::string prev;
    for (auto& e : u.events) {
      auto it = copy.find(e.kv.key);
      const bool had = it != copy.end();
      if (had && (!e.prev_kv || !same_version(*e.prev_kv, it->second)))
        prev = event_text(e) + ", the value before it " + text_of(std::optional<key_value>(it->second));
      else if (!had && e.prev_kv)
        prev = event_text(e) + ", the key was absent before it";
      if (!prev.empty()) break;
      if (e.type == watch_event::kind::put) copy.insert_or_assign(e.kv.key, e.kv);
      else copy.erase(e.kv.key);
    }
    if (!prev.empty()) {
      bad("its prev_kv is not the value it replaced: " + prev);
      break;
    }
    if (auto d = state_difference(copy, vs.state_at(u.revision, prefix)); !d.empty()) {
      bad("the reader's copy after it: " + d);
      break;
    }
    rev = u.revision;
  }
  return {updates, resets, events};
}

inline asio::awaitable<void> check_cache(world& w, cache_case& cc) {
  const std::string reaches = "(k3) a cache reaches a revision written through its client";
  const std::string matches = "(k1) a cache's range() at its revision() is etcd's state at that revision";
  // Each cache at the end: the revision after the last write.
  auto reading = w.judge->async_get(cc.prefix, get_options{.prefix = true, .count_only = true}, use_awaitable);
  auto head = co_await std::move(reading);
  for (int i = 0; i < static_cast<int>(cc.caches.size()); ++i) {
    cut_plan plan;
    plan.armed = true;
    plan.after = ms(10000);
    error_code ec;
    {
      canceller cut(w, plan);
      auto& k = *cc.caches[static_cast<std::size_t>(i)];
      auto waiting = k.async_wait_for(head.header.revision, asio::bind_cancellation_slot(cut.slot(), asio::as_tuple(use_awaitable)));
      auto [e] = co_await std::move(waiting);
      ec = e;
    }
    if (ec)
      w.h.fail({reaches, cc.prefix, "cache " + std::to_string(i) + " did not reach the end, " + std::to_string(head.header.revision) +
                                        ", within 10 s: " + ec.message(), w.h.last_seq(), w.h.last_seq(), {}});
    else
      take_probe(w, cc, i, "the end");
  }

  const auto& rec = *cc.record;
  const versions vs(rec);
  for (auto& p : cc.probes) {
    if (p.revision < rec.first - 1) continue;  // before the record: cannot be, caches sync after it starts
    if (auto d = state_difference(p.range, vs.state_at(p.revision, cc.prefix)); !d.empty())
      w.h.fail({matches, cc.prefix, "cache " + std::to_string(p.cache) + " (" + p.why + ") at revision " + std::to_string(p.revision) +
                                        " against etcd's record: " + d, p.seq, p.seq, {}});
  }

  std::vector<const watch_event*> changes;  // the prefix's, in revision order
  for (auto& e : rec.events)
    if (e.kv.key.rfind(cc.prefix, 0) == 0) changes.push_back(&e);
  std::size_t updates = 0, resets = 0, events = 0;
  for (auto& r : cc.readers) {
    const auto counted = judge_reader(w.h, cc.prefix, vs, changes, *r);
    updates += std::get<0>(counted);
    resets += std::get<1>(counted);
    events += std::get<2>(counted);
  }

  std::ostringstream s;
  s << cc.writes << " writes, " << rec.events.size() << " changes, " << cc.compactions << " compactions; " << cc.probes.size()
    << " probes (" << cc.compared << " compared live, " << cc.compacted_skips << " compacted away); " << cc.readers.size() << " readers ("
    << cc.readers_destroyed << " destroyed), " << updates << " updates, " << resets << " resets, " << events << " events; relists:";
  for (auto& k : cc.caches) s << " " << k->relists();
  summary(w, s.str());
  if (cc.compared == 0 || updates == 0)
    w.h.fail({"(k0) caches are probed and read", cc.prefix, s.str(), 0, 0, {}});
}

}  // namespace coetcd::test::explore
