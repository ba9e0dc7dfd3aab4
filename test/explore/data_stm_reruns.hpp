// The explorer's check of how often an STM body runs (test_explore_data): a body that returned
// runs again only when its commit attempt failed for a conflict of its own, which etcd's record of
// the keys shows — a key it read changed after the version it read, a run before it in its commit
// group whose write it read failed, or (serializable_snapshot) a key it wrote changed after the
// group's snapshot — never for a change of keys it neither read nor wrote (issue 53, item 10).
#pragma once

#include "data_stm.hpp"

#include <limits>

namespace coetcd::test::explore {

/// What the body-run check counted.
struct rerun_tally {
  int bodies = 0;       // bodies started
  int reruns = 0;       // bodies that returned and ran again: their commit attempt did not apply
  int regroups = 0;     // bodies that left their group (mod_revision of a key a body before wrote) and ran again
  int judged = 0;       // reruns judged: not in a hold or cut of their client's link (a refused txn runs alone)
  int unjustified = 0;  // of those, with no conflict of their own
};

/// Judges every rerun (see the file's comment). Where a commit attempt fell in etcd's revisions
/// is not recorded, so it is bounded: at or after the last write answered before the body ended
/// (the group commits after its bodies), before the first write called after the next body
/// started (the attempt's answer came before). A key counts as changed when it changed anywhere
/// up to that upper bound: a rerun the check calls unjustified had none of its keys change then.
/// Needs each run's revision (check_stm fills it in).
inline rerun_tally check_stm_reruns(history& h, const stm_case& sc, const versions& vs) {
  constexpr auto endless = std::numeric_limits<std::int64_t>::max();
  const auto& rec = *sc.record;
  const std::string invariant =
      "(s4) a body runs again only for a conflict of its own (a key it read changed, a run before it in its commit group "
      "that it read from failed, or at serializable_snapshot a key it wrote changed)";
  rerun_tally t;

  // A value's version in the record: where it began, and the next change of its key.
  struct version_at {
    std::int64_t start = 0, next = endless;
  };
  auto find = [&](const std::string& k, const std::string& value) -> std::optional<version_at> {
    const auto& all = vs.of(k);
    for (std::size_t i = 0; i < all.size(); ++i)
      if (all[i].second && all[i].second->value == value)
        return version_at{all[i].second->mod_revision, i + 1 < all.size() ? all[i + 1].first : endless};
    return std::nullopt;
  };
  auto changed_within = [&](const std::string& k, std::int64_t lo, std::int64_t hi) {  // a change in (lo, hi]
    for (auto& [rev, kv] : vs.of(k))
      if (rev >= rec.first && rev > lo && rev <= hi) return true;
    return false;
  };
  auto present_within = [&](const std::string& k, std::int64_t lo, std::int64_t hi) {  // present at some rev in [lo, hi]
    if (vs.at(k, lo)) return true;
    for (auto& [rev, kv] : vs.of(k))
      if (rev > lo && rev <= hi && kv) return true;
    return false;
  };

  // Every write etcd has, by when it was called and answered applied (0: not so answered; one
  // that failed may have been applied after its answer).
  struct write_at {
    long invoked = 0, completed = 0;
    std::int64_t revision = 0;
  };
  std::vector<write_at> writes;
  for (auto& p : sc.puts)
    if (auto f = find(p->key, p->value)) writes.push_back({p->invoked, p->done && !p->ec ? p->completed : 0, f->start});
  for (auto& r : sc.runs)
    if (r->revision) writes.push_back({r->invoked, r->done && !r->ec ? r->completed : 0, r->revision});
  auto lower = [&](long ended) {  // the attempt came after: writes answered before the body ended
    std::int64_t lo = 0;
    for (auto& x : writes)
      if (x.completed && x.completed < ended) lo = std::max(lo, x.revision);
    return lo;
  };
  auto upper = [&](long next) {  // the attempt's answer came before the next body started
    std::int64_t hi = endless;
    for (auto& x : writes)
      if (x.invoked > next) hi = std::min(hi, x.revision - 1);
    return hi;
  };

  // Holds and cuts of each proxied link, in ms, with 2 s after each for the channel to come back:
  // a txn refused then (endpoints_unreachable) runs each member of its group again alone.
  std::map<int, std::vector<std::pair<double, double>>> faults;
  std::map<int, double> open;
  for (auto& e : h.events()) {
    if (e.phase != entry::note || e.result.rfind("client ", 0) != 0) continue;
    const int client = std::atoi(e.result.c_str() + 7);
    if (e.what == "fault.hold" || e.what == "fault.cut") open[client] = e.ms;
    else if (e.what == "fault.end" && open.count(client)) {
      faults[client].push_back({open[client], e.ms + 2000});
      open.erase(client);
    }
  }
  for (auto& [client, since] : open) faults[client].push_back({since, 1e300});
  auto in_fault = [&](int client, long from, long to) {
    const auto *first = h.at(from), *last = h.at(to);
    if (!first || !last) return false;
    for (auto& [f, g] : faults[client])
      if (f <= last->ms && first->ms <= g) return true;
    return false;
  };

  std::map<int, const stm_run*> by_id;
  for (auto& r : sc.runs) by_id[r->id] = r.get();
  // A run's value ("r<id>.<n>|...") certainly read from etcd: its run was over before the body began.
  auto from_etcd = [&](const std::string& v, long began) {
    if (v.empty() || v[0] != 'r' || v.find('|') == std::string::npos) return true;  // a plain put's, or one there before the case
    auto it = by_id.find(std::atoi(v.c_str() + 1));
    return it != by_id.end() && it->second->done && it->second->completed <= began;
  };
  // A body of another run of the group's client and level, not applied, that deleted `k` before `began`.
  auto member_deleted = [&](const stm_run& r, const std::string& k, long began) {
    for (auto& o : sc.runs) {
      if (o.get() == &r || !o->group || o->client != r.client || o->level != r.level) continue;
      for (auto& ob : o->bodies) {
        const bool applied = o->revision && &ob == &o->bodies.back();
        if (auto w = ob.writes.find(k); !applied && w != ob.writes.end() && !w->second && ob.ended <= began) return true;
      }
    }
    return false;
  };

  for (auto& rp : sc.runs) {
    const auto& r = *rp;
    t.bodies += r.started;
    std::set<int> returned;
    for (auto& b : r.bodies) returned.insert(b.number);
    for (int n = 1; n < r.started; ++n) t.regroups += !returned.count(n);
    for (auto& b : r.bodies) {
      const auto n = static_cast<std::size_t>(b.number);
      if (b.number >= r.started || r.starts.size() <= n) continue;  // its attempt ended the run
      ++t.reruns;
      const long began = r.starts[n - 1], next = r.starts[n];
      if (r.client < 2 && in_fault(r.client, b.ended, next)) continue;
      ++t.judged;
      const std::int64_t hi = upper(next);
      std::int64_t snapshot = 0;  // at most the revision its group read at
      for (auto& [k, v] : b.reads)
        if (v && from_etcd(*v, began))
          if (auto f = find(k, *v)) snapshot = std::max(snapshot, f->start);
      const std::int64_t lo = std::max(lower(b.ended), snapshot);
      bool justified = false;
      std::ostringstream unchanged;
      if (r.level != isolation::read_committed) {  // read_committed compares nothing: no conflict
        for (auto& [k, v] : b.reads) {
          const auto key = k.substr(k.rfind('/') + 1);
          if (v) {
            auto f = find(k, *v);
            justified = justified || !f || f->next <= hi;  // not in etcd: a failed member's write
            if (f) unchanged << " " << key << "=" << text_of(v) << " from rev " << f->start;
          } else {
            justified = justified || present_within(k, lo, hi) || (r.group && member_deleted(r, k, began));
            unchanged << " " << key << " absent";
          }
        }
      }
      if (r.level == isolation::serializable_snapshot)
        for (auto& [k, v] : b.writes) justified = justified || changed_within(k, snapshot, hi);
      if (justified) continue;
      ++t.unjustified;
      std::ostringstream s;
      s << run_text(r) << ": " << body_text(b) << "; it ran again (body " << b.number + 1 << " began after #" << next << ")";
      if (r.level == isolation::read_committed) {
        s << ", but a read_committed commit compares nothing, and its link had no hold or cut then";
      } else {
        s << ", but its commit attempt (between revisions " << lo << " and " << (hi == endless ? std::string("the end") : std::to_string(hi))
          << ") found nothing it read changed:" << unchanged.str();
        if (r.level == isolation::serializable_snapshot) s << ", nor anything it wrote since revision " << snapshot;
      }
      h.fail({invariant, sc.name, s.str(), began, next, {}});
    }
  }
  return t;
}

}  // namespace coetcd::test::explore
