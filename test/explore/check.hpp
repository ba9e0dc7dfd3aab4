// The explorer's checks (test_explore) over a case's history and etcd's own records: holders that
// overlap, permits over the count, fenced writes of two holds interleaved in etcd's revisions,
// keys left behind; and the report of each violation with the seed, its window of history and the
// shortest excerpt of its name's history.
#pragma once

#include "world.hpp"

#include <boost/test/unit_test.hpp>

namespace coetcd::test::explore {

/// Whether two holds of one name may not overlap.
using conflict_fn = std::function<bool(const hold&, const hold&)>;

/// A mutex excludes every caller except the sessions that share its key: those on one lease but
/// another session (one holder as far as etcd can tell, as documented). Callers of one session
/// exclude each other (local hand-offs).
inline bool mutex_conflict(const hold& a, const hold& b) { return a.lease != b.lease || a.session == b.session; }
/// An election's candidates are keys: one leader per lease.
inline bool election_conflict(const hold& a, const hold& b) { return a.lease != b.lease; }
/// An rw_mutex: readers beside readers, of any lease; a writer beside nobody but the writers of
/// other sessions of its lease (they share the write key, as a mutex's do). A reader and a writer
/// of one lease have two keys: the later one waits for the other.
inline bool rw_conflict(const hold& a, const hold& b) {
  if (a.shared && b.shared) return false;
  if (a.shared != b.shared) return true;
  return mutex_conflict(a, b);
}

inline std::string hold_text(const hold& h) {
  std::ostringstream s;
  s << "hold " << h.id << " (actor " << h.actor << ", obj" << h.object << ", s" << h.session << ", lease " << std::hex
    << h.lease << std::dec << ", n=" << h.n << ", #" << h.start << "..";
  if (h.end == never) s << "never";
  else s << "#" << h.end;
  s << (h.after_destroy ? ", told after its object was destroyed" : "") << (h.shared ? ", shared" : "") << ")";
  return s.str();
}

/// (a), (d): no two conflicting holds of one name at once.
inline void check_exclusive(history& hist, const std::string& invariant, const conflict_fn& conflict) {
  auto all = hist.holds();
  std::map<std::string, std::vector<hold>> by_name;
  for (auto& h : all)
    if (h.end > h.start) by_name[h.name].push_back(h);  // a discounted hold takes no time
  for (auto& [name, hs] : by_name) {
    std::sort(hs.begin(), hs.end(), [](const hold& a, const hold& b) { return a.start < b.start; });
    for (std::size_t i = 0; i < hs.size(); ++i)
      for (std::size_t j = i + 1; j < hs.size() && hs[j].start < hs[i].end; ++j) {
        if (!conflict(hs[i], hs[j])) continue;
        violation v{invariant, name,
                    "two holders at once: " + hold_text(hs[i]) + " and " + hold_text(hs[j]),
                    hs[j].start, std::min({hs[i].end, hs[j].end, hist.last_seq()}), {hs[i].id, hs[j].id}};
        hist.fail(std::move(v));
      }
  }
}

/// (b): the permits held at once (the sum of n over the holds, whatever their sessions and
/// leases: each acquisition is its own key) never exceed the semaphore's.
inline void check_permits(history& hist, const std::map<std::string, std::int64_t>& permits) {
  std::map<std::string, std::vector<hold>> by_name;
  for (auto& h : hist.holds())
    if (h.end > h.start) by_name[h.name].push_back(h);
  for (auto& [name, hs] : by_name) {
    // Steps in history order; an end before a start at one seq (it cannot be, but be safe).
    std::vector<std::tuple<long, int, const hold*>> steps;
    for (auto& h : hs) {
      steps.emplace_back(h.start, 1, &h);
      if (h.end != never) steps.emplace_back(h.end, 0, &h);
    }
    std::sort(steps.begin(), steps.end(), [](auto& a, auto& b) {
      return std::tie(std::get<0>(a), std::get<1>(a)) < std::tie(std::get<0>(b), std::get<1>(b));
    });
    std::map<long, const hold*> active;
    std::int64_t sum = 0;
    bool over = false;
    const auto limit = permits.at(name);
    for (auto& [seq, starts, h] : steps) {
      if (starts) {
        active[h->id] = h;
        sum += h->n;
      } else {
        active.erase(h->id);
        sum -= h->n;
      }
      if (sum <= limit) {
        over = false;
        continue;
      }
      if (over) continue;
      over = true;
      violation v{"(b) never more permits held than the semaphore has", name,
                  std::to_string(sum) + " of " + std::to_string(limit) + " permits held at once:", seq, seq, {}};
      long to = hist.last_seq();
      for (auto& [id, a] : active) {
        v.what += "\n      " + hold_text(*a);
        v.holds.push_back(id);
        v.from = std::min(v.from, a->start);
        to = std::min(to, a->end);
      }
      v.to = std::max(seq, to);
      hist.fail(std::move(v));
    }
  }
}

/// A fenced write as etcd applied it: the hold it was made for and the txn's revision.
struct applied_write {
  long hold = 0;
  std::int64_t revision = 0;
  std::string key;
};

/// A read of the checks: retried for up to 30 s while it fails (a member fault's election may
/// still be going on when a case's checks begin); the last error is thrown.
inline asio::awaitable<get_result> judge_read(client& c, std::string key, get_options o) {
  const auto until = clock_type::now() + std::chrono::seconds(30);
  for (;;) {
    auto reading = c.async_get(key, o, asio::as_tuple(use_awaitable));
    auto [ec, r] = co_await std::move(reading);
    if (!ec) co_return r;
    if (clock_type::now() >= until) throw boost::system::system_error(ec, "a check's read of " + key);
    co_await sleep_for(ms(250));
  }
}

/// Reads the fenced writes applied under `name` (each txn also put a log key named by its hold)
/// and the stale probes that passed; checks (c): the writes of two conflicting holds never
/// interleave in etcd's revisions, every write told applied is in etcd and none told rejected
/// is, and no finished hold's fence passed.
inline asio::awaitable<void> check_fences(world& w, const std::string& name, conflict_fn conflict) {
  auto& hist = w.h;
  const auto log_prefix = w.data_key(name, "log/");
  auto reading = judge_read(*w.judge, log_prefix, get_options{.prefix = true});
  auto logs = co_await std::move(reading);
  std::map<long, std::pair<std::int64_t, std::int64_t>> span;  // hold -> first, last revision
  std::set<std::string> applied;
  for (auto& kv : logs.kvs) {
    applied.insert(kv.key);
    long id = std::stol(kv.key.substr(log_prefix.size()));
    auto it = span.try_emplace(id, kv.create_revision, kv.create_revision).first;
    it->second.first = std::min(it->second.first, kv.create_revision);
    it->second.second = std::max(it->second.second, kv.create_revision);
  }
  for (auto& k : w.fence_told_ok)
    if (k.rfind(log_prefix, 0) == 0 && !applied.count(k))
      hist.fail({"(c) a fenced write passes only for the hold that built it", name,
                 "told applied, not in etcd: " + k, 0, 0, {}});
  for (auto& k : applied)
    if (w.fence_told_rejected.count(k))
      hist.fail({"(c) a fenced write passes only for the hold that built it", name,
                 "told rejected, applied in etcd: " + k, 0, 0, {}});
  for (auto a = span.begin(); a != span.end(); ++a)
    for (auto b = std::next(a); b != span.end(); ++b) {
      auto* ha = hist.find_hold(a->first);
      auto* hb = hist.find_hold(b->first);
      if (!ha || !hb || !conflict(*ha, *hb)) continue;
      if (a->second.second < b->second.first || b->second.second < a->second.first) continue;
      hist.fail({"(c) a fenced write passes only for the hold that built it", name,
                 "the fenced writes of " + hold_text(*ha) + " (revisions " + std::to_string(a->second.first) + ".." +
                     std::to_string(a->second.second) + ") and " + hold_text(*hb) + " (revisions " +
                     std::to_string(b->second.first) + ".." + std::to_string(b->second.second) + ") interleave",
                 std::max(ha->start, hb->start), std::min({ha->end, hb->end, hist.last_seq()}), {ha->id, hb->id}});
    }
  const auto stale_prefix = w.data_key(name, "stale/");
  auto counting = judge_read(*w.judge, stale_prefix, get_options{.prefix = true, .keys_only = true});
  auto stale = co_await std::move(counting);
  for (auto& kv : stale.kvs)
    hist.fail({"(c) a fenced write passes only for the hold that built it", name,
               "the fence of a finished hold passed: " + kv.key, 0, 0, {}});
}

/// (c) for the holds dropped without a release: once the release the drop began in the
/// background has landed, their fences never pass again. Judged at the end, after every
/// operation is done, when such a release under a session still in use has had `settle` to land
/// (it is retried while the session lives): a fence that still passes then belongs to a hold that
/// never ended. Not judged: a hold whose session is no longer usable (its key goes, or stays,
/// with the lease), or whose lease another session shares, a fault took or the case revoked.
/// The probe is a txn with the fences and nothing to do: it writes nothing either way.
inline asio::awaitable<void> check_dropped_fences(world& w, ms settle) {
  const auto until = clock_type::now() + settle;
  for (auto& d : w.dropped) {
    bool judged = true;
    for (std::size_t i = 0; i < d.sessions.size(); ++i) {
      auto& s = *w.sessions[static_cast<std::size_t>(d.sessions[i])];
      judged = judged && s.usable() && !w.lease_shared(s.lease) && !w.expired.count(s.lease) &&
               !w.revoked.count(s.lease) && !w.shared_key(d.names[i], s.lease);
    }
    if (!judged) continue;
    auto& s0 = *w.sessions[static_cast<std::size_t>(d.sessions[0])];
    txn t;
    for (auto& f : d.fences) t.when(f);
    auto op = w.h.invoke(-1, "dropped_probe", d.names[0], -1, s0.id, s0.lease);
    bool passes = false, answered = false;
    for (;;) {
      auto probing = w.judge->async_txn(t, asio::as_tuple(use_awaitable));
      auto [ec, r] = co_await std::move(probing);
      if (!ec) {
        answered = true;
        passes = r.succeeded;
      }
      if ((answered && !passes) || clock_type::now() >= until) break;
      co_await sleep_for(ms(100));
    }
    w.h.complete(op, !answered ? "no answer" : passes ? "passed" : "rejected", d.hold);
    if (passes)
      w.h.fail({"(c) a dropped hold ends: once its release in the background lands, its fence never passes", d.names[0],
                "the fence of hold " + std::to_string(d.hold) + ", dropped without a release, still passes at the end",
                w.h.find_hold(d.hold) ? w.h.find_hold(d.hold)->end : w.h.last_seq() - 1, w.h.last_seq(), {d.hold}});
  }
}

/// Keys under the case's names, as "key (lease hex)".
inline asio::awaitable<std::vector<std::string>> keys_under(client& c, std::string prefix,
                                                            std::function<bool(std::int64_t)> counts) {
  auto reading = judge_read(c, prefix, get_options{.prefix = true, .keys_only = true});
  auto r = co_await std::move(reading);
  std::vector<std::string> out;
  for (auto& kv : r.kvs)
    if (counts(kv.lease)) out.push_back(kv.key + " (lease " + hex(kv.lease) + ")");
  co_return out;
}

/// Waits up to `limit` for no counted key to be left under `prefix`; what is left then.
inline asio::awaitable<std::vector<std::string>> settled_keys_under(client& c, std::string prefix,
                                                                    std::function<bool(std::int64_t)> counts,
                                                                    ms limit = ms(3000)) {
  auto until = clock_type::now() + limit;
  auto first = keys_under(c, prefix, counts);
  auto left = co_await std::move(first);
  while (!left.empty() && clock_type::now() < until) {
    co_await sleep_for(ms(50));
    auto again = keys_under(c, prefix, counts);
    left = co_await std::move(again);
  }
  co_return left;
}

/// (f) Once every operation is done: no key of a session still in use is left (one orphaned,
/// closed or sharing its lease with such a one keeps or loses its keys with the lease, and a key
/// two sessions of a lease share is theirs to leave); then, every object destroyed and every
/// session closed (and every lease revoked by the judge, for an orphaned one and a close that
/// failed under a fault), nothing at all under the case's names.
inline asio::awaitable<void> check_nothing_left(world& w, ms settle = ms(3000)) {
  std::set<std::int64_t> in_use, ended;
  for (auto& s : w.sessions) (s->usable() ? in_use : ended).insert(s->lease);
  for (auto& [name_lease, users] : w.key_users)
    if (users.size() > 1) ended.insert(name_lease.second);
  for (auto l : ended) in_use.erase(l);
  // Named first: g++ 12 mishandles a lambda written inside a co_await expression.
  std::function<bool(std::int64_t)> of_live = [&](std::int64_t l) { return in_use.count(l) > 0; };
  std::function<bool(std::int64_t)> any = [](std::int64_t) { return true; };
  auto settling = settled_keys_under(*w.judge, w.names_prefix, of_live, settle);
  auto left = co_await std::move(settling);
  auto seq = w.h.note(-1, "check.keys", "", -1, -1, 0, std::to_string(left.size()) + " keys of live sessions left");
  for (auto& k : left)
    w.h.fail({"(f) no key left once every operation is done", "", "key of a live session with no holder or waiter: " + k,
              seq, seq, {}});
  for (auto& o : w.objects) w.destroy(o, -1, "the case ends");
  for (auto& s : w.sessions)
    if (!s->closed && !s->orphaned) co_await w.close_session(*s);
  for (auto& [lease, n] : w.sessions_on_lease) {
    auto revoking = w.judge->async_lease_revoke(lease, asio::as_tuple(use_awaitable));
    co_await std::move(revoking);  // lease_not_found for most: closed already
  }
  auto settling_all = settled_keys_under(*w.judge, w.names_prefix, any);
  left = co_await std::move(settling_all);
  seq = w.h.note(-1, "check.keys", "", -1, -1, 0, std::to_string(left.size()) + " keys left after every session closed");
  for (auto& k : left)
    w.h.fail({"(f) no key left once every session closed", "", "left: " + k, seq, seq, {}});
}

/// A violation as reported: the invariant, what broke it, the window of history around it
/// (`with_window`) and the shortest excerpt of its name's history that shows it.
inline std::string violation_text(const history& h, const violation& v, bool with_window = true) {
  std::ostringstream s;
  s << v.invariant << (v.name.empty() ? "" : " on " + v.name) << ": " << v.what;
  if (v.to > 0 && with_window) s << "\n  history #" << v.from << "..#" << v.to << ":\n" << h.window(v);
  const auto excerpt = h.excerpt_text(v);
  if (!excerpt.empty()) s << (v.to > 0 && with_window ? "" : "\n") << excerpt;
  return s.str();
}

/// Fails the test case for each violation, with the seed, the invariant and the history that
/// shows it (the first few in full; the others counted).
inline void report(world& w) {
  const auto& all = w.h.violations();
  std::map<std::string, int> per_invariant;
  for (auto& v : all) {
    int& n = per_invariant[v.invariant];
    if (++n > 3) continue;
    std::ostringstream s;
    s << "explore " << w.label << " (COETCD_EXPLORE_SEED=" << w.seed << " --run_test=" << w.label << "): " << violation_text(w.h, v);
    std::cerr << s.str() << "\n";
    BOOST_ERROR(s.str());
  }
  for (auto& [inv, n] : per_invariant)
    if (n > 3) BOOST_ERROR("explore " << w.label << " (COETCD_EXPLORE_SEED=" << w.seed << "): " << inv << ": " << n - 3 << " more");
}

}  // namespace coetcd::test::explore
