// The explorer's STM check (test_explore_data): where etcd applied each run (its receipt), that
// told outcomes hold and nothing was applied twice or in parts, and the replay of the applied runs
// and plain puts in commit order against a model of the keys, each run's reads checked against
// what its isolation level promises at its commit; then how often each body ran
// (data_stm_reruns.hpp).
#pragma once

#include "data_stm.hpp"
#include "data_stm_reruns.hpp"

namespace coetcd::test::explore {

inline void check_stm(history& h, stm_case& sc) {
  const auto& rec = *sc.record;
  const versions vs(rec);
  const std::set<std::string> keys(sc.keys.begin(), sc.keys.end());
  auto fail = [&](const std::string& invariant, const std::string& what, long from, long to) {
    h.fail({invariant, sc.name, what, from, from > 0 && to == 0 ? h.last_seq() : to, {}});
  };
  const std::string once = "(s1) a run is applied once, whole and as told (its receipt and its writes at one revision)";
  const std::string promised = "(s2) a committed run read what its isolation level promises at its commit";
  const std::string plain = "(s3) a plain put is applied once, as told";

  // etcd's side: each run's receipts, and the keys' changes by revision.
  std::map<int, std::vector<std::pair<std::int64_t, std::string>>> receipts;
  std::map<std::int64_t, std::map<std::string, std::optional<std::string>>> changed;
  std::map<std::string, std::set<std::int64_t>> put_at;  // a value -> the revisions it was put at
  for (auto& e : rec.events) {
    const auto& k = e.kv.key;
    const auto rev = e.kv.mod_revision;
    const bool put = e.type == watch_event::kind::put;
    if (k.rfind(sc.receipts, 0) == 0) {
      if (put) receipts[std::stoi(k.substr(sc.receipts.size()))].push_back({rev, e.kv.value});
      else fail(once, "receipt " + k + " deleted at revision " + std::to_string(rev), 0, 0);
    } else if (keys.count(k)) {
      changed[rev][k] = put ? std::optional<std::string>(e.kv.value) : std::nullopt;
      if (put) put_at[e.kv.value].insert(rev);
    }
  }

  // Each run: applied where its receipt is, once, with its last body's writes, as told.
  std::map<std::int64_t, std::vector<const stm_run*>> runs_at;
  int committed = 0, unknown_applied = 0, unknown_not = 0;
  std::map<std::string, int> errors;
  for (auto& rp : sc.runs) {
    auto& r = *rp;
    const auto& got = receipts[r.id];
    const bool told_ok = r.done && !r.ec, unknown = r.ec == error::outcome_unknown;
    r.revision = got.empty() ? 0 : got.front().first;
    if (r.revision) h.set_revision(r.completed, r.revision);  // printed with its completion
    if (got.size() > 1) {
      std::string at;
      for (auto& [rev, tag] : got) at += " " + std::to_string(rev) + " (" + tag + ")";
      fail(once, run_text(r) + ": its receipt was put " + std::to_string(got.size()) + " times, at" + at, r.invoked, r.completed);
    }
    if (told_ok) ++committed;
    else if (unknown) ++(r.revision ? unknown_applied : unknown_not);
    else ++errors[r.ec.message()];
    if (told_ok && !r.revision) fail(once, run_text(r) + ": told committed, its receipt is not in etcd", r.invoked, r.completed);
    if (!told_ok && !unknown && r.revision)
      fail(once, run_text(r) + ": told it failed, yet applied at revision " + std::to_string(r.revision), r.invoked, r.completed);
    if (!r.revision) continue;
    if (r.bodies.empty()) {
      fail(once, run_text(r) + ": applied at revision " + std::to_string(r.revision) + ", but no body of it returned", r.invoked, r.completed);
      continue;
    }
    const auto last = r.tag(r.bodies.back().number);
    if (got.front().second != last)
      fail(once, run_text(r) + ": etcd has the receipt of " + got.front().second + ", not of its last body " + last, r.invoked, r.completed);
    runs_at[r.revision].push_back(&r);
  }

  // Each plain put: applied at most once, and where its answer said when it had one.
  std::map<std::int64_t, const hot_put*> put_rev;
  int puts_ok = 0, puts_failed_applied = 0;
  for (auto& pp : sc.puts) {
    const auto& p = *pp;
    const auto it = put_at.find(p.value);
    const std::size_t n = it == put_at.end() ? 0 : it->second.size();
    if (n > 1) fail(plain, "put " + p.key + "=" + p.value + " applied at " + std::to_string(n) + " revisions", p.invoked, p.completed);
    if (p.done && !p.ec) {
      ++puts_ok;
      if (n == 0) fail(plain, "put " + p.key + "=" + p.value + " told applied at " + std::to_string(p.revision) + ", not in etcd", p.invoked, p.completed);
      else if (*it->second.begin() != p.revision)
        fail(plain, "put " + p.key + "=" + p.value + " told applied at " + std::to_string(p.revision) + ", etcd has it at " +
                        std::to_string(*it->second.begin()), p.invoked, p.completed);
    } else if (n > 0) {
      ++puts_failed_applied;
    }
    if (n > 0) {
      put_rev[*it->second.begin()] = &p;
      h.set_revision(p.completed, *it->second.begin());
    }
  }

  // The replay: every revision that changed a key, or has a run's receipt, or a plain put.
  struct cell {
    std::optional<std::string> value;
    std::int64_t mod = 0;
  };
  std::map<std::string, cell> model;
  for (auto& k : sc.keys)
    if (auto it = rec.initial.find(k); it != rec.initial.end()) model[k] = {it->second.value, it->second.mod_revision};
  std::set<std::int64_t> revisions;
  for (auto& [rev, x] : changed) revisions.insert(rev);
  for (auto& [rev, x] : runs_at) revisions.insert(rev);
  for (auto& [rev, x] : put_rev) revisions.insert(rev);
  std::size_t largest = 0, groups = 0;
  for (const auto R : revisions) {
    std::map<std::string, std::optional<std::string>> wrote;  // at R so far, in turn order
    std::string who;
    long from = 0, to = 0;
    auto span = [&](long a, long b) {
      from = from ? std::min(from, a) : a;
      to = std::max(to, b);
    };
    auto& here = runs_at[R];
    std::sort(here.begin(), here.end(), [](const stm_run* a, const stm_run* b) { return a->bodies.back().ended < b->bodies.back().ended; });
    largest = std::max(largest, here.size());
    groups += here.size() > 1;
    if (auto p = put_rev.find(R); p != put_rev.end()) {
      wrote[p->second->key] = p->second->value;
      who += " put " + p->second->value + ";";
      span(p->second->invoked, p->second->completed);
      if (!here.empty()) fail(once, "revision " + std::to_string(R) + " has a plain put and runs", p->second->invoked, p->second->completed);
    }
    for (const auto* r : here) {
      const auto& b = r->bodies.back();
      who += " " + run_text(*r) + ";";
      span(r->invoked, r->completed);
      auto now = [&](const std::string& k) -> std::optional<std::string> {
        if (auto it = wrote.find(k); it != wrote.end()) return it->second;
        auto m = model.find(k);
        return m == model.end() ? std::nullopt : m->second.value;
      };
      const auto where = run_text(*r) + ", committed at revision " + std::to_string(R) + ": " + body_text(b) + "; ";
      for (auto& [k, m] : b.mods) {
        if (wrote.count(k))
          fail(promised, where + "it was told the mod revision of " + k + ", which a run before it in its commit wrote (it should have run again in the next group)",
               r->invoked, r->completed);
        else if (auto want = model.count(k) ? model[k].mod : 0; m != want && r->level != isolation::read_committed)
          fail(promised, where + "the mod revision of " + k + " at its commit was " + std::to_string(want), r->invoked, r->completed);
      }
      if (r->level != isolation::read_committed) {
        // Every level but read_committed compares what it read at the commit: the reads are the
        // state the commit applied to, after the writes of the runs before it in its group.
        for (auto& [k, v] : b.reads)
          if (auto want = now(k); v != want)
            fail(promised, where + k + " was " + text_of(want) + (wrote.count(k) ? " (written by a run before it in its commit)" : "") + " then",
                 r->invoked, r->completed);
      } else {
        // read_committed: each value read was committed before the commit (or written by a run
        // before it in its group), and a mod revision asked is that value's.
        for (auto& [k, v] : b.reads) {
          if (auto it = wrote.find(k); it != wrote.end() && it->second == v) continue;
          const auto& all = vs.of(k);
          bool found = !v && (all.empty() || all.front().first >= rec.first);  // absent before its first put
          std::int64_t mod = 0;
          for (auto& [rev, kv] : all) {
            if (rev >= R) break;
            if ((kv ? std::optional<std::string>(kv->value) : std::nullopt) == v) {
              found = true;
              mod = kv ? kv->mod_revision : 0;
            }
          }
          if (!found) fail(promised, where + k + " never held " + text_of(v) + " before that commit", r->invoked, r->completed);
          else if (auto m = b.mods.find(k); m != b.mods.end() && m->second != mod)
            fail(promised, where + "the mod revision of " + k + "=" + text_of(v) + " is " + std::to_string(mod), r->invoked, r->completed);
        }
      }
      for (auto& [k, v] : b.writes) wrote[k] = v;
    }
    // Deleting a key that is not there changes nothing in etcd's record.
    std::erase_if(wrote, [&](const auto& kv) {
      auto m = model.find(kv.first);
      return !kv.second && (m == model.end() || !m->second.value);
    });
    const auto& in_etcd = changed[R];
    if (wrote != in_etcd) {
      auto text = [](const std::map<std::string, std::optional<std::string>>& m) {
        std::string s;
        for (auto& [k, v] : m) s += " " + k.substr(k.rfind('/') + 1) + "=" + text_of(v);
        return s.empty() ? std::string(" nothing") : s;
      };
      fail(once, "revision " + std::to_string(R) + ": etcd changed" + text(in_etcd) + "; what was applied there wrote" + text(wrote) +
                     " (" + (who.empty() ? std::string("nothing") : who) + ")", from, to);
    }
    for (auto& [k, v] : in_etcd) model[k] = {v, v ? R : 0};  // on from etcd's state: one difference, one report
  }

  const auto reruns = check_stm_reruns(h, sc, vs);
  std::ostringstream s;
  s << sc.runs.size() << " runs: " << committed << " committed, outcome_unknown " << unknown_applied << " applied / "
    << unknown_not << " not";
  for (auto& [e, n] : errors) s << ", " << n << " " << e;
  s << "; " << groups << " commits of 2+ runs (largest " << largest << "); " << sc.puts.size() << " plain puts (" << puts_ok
    << " answered, " << puts_failed_applied << " unanswered but applied); " << rec.events.size() << " changes recorded; "
    << reruns.bodies << " bodies run, " << reruns.reruns << " again after a failed commit (" << reruns.judged << " judged, "
    << reruns.unjustified << " with no conflict of their own), " << reruns.regroups << " after leaving their group";
  h.note(-1, "summary", "", -1, -1, 0, s.str());
  if (committed == 0)
    fail("(s0) runs commit", "no run committed: " + s.str(), 0, 0);
}

}  // namespace coetcd::test::explore
