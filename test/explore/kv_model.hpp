// The explorer's KV model (test_explore): operations on single etcd keys seen as a register (put,
// get, delete, compare-and-set), a linearizability checker for their histories (Wing & Gong's
// search with Lowe's memo, key by key, as porcupine does), and the cheap checks revisions allow.
#pragma once

#include "history.hpp"

#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <utility>

namespace coetcd::test::explore {

/// One operation on one key, as the checkers see it. A txn that writes several keys is one
/// kv_op per key, sharing `group`.
struct kv_op {
  enum kind_t { put, get, del, cas } kind = get;
  /// ok: answered. maybe: failed in a way that leaves open whether it was applied (a deadline, a
  /// dropped connection): it may take effect at any moment after its call, or never (Jepsen's
  /// "info" operation, completed at infinity). failed: the client says it was surely not applied
  /// (detail::surely_not_applied): the checkers leave it out, and its value must never show.
  enum outcome_t { ok, maybe, failed } outcome = ok;
  long op = 0;             // the history's operation id
  long call = 0, ret = 0;  // the seqs of its invocation and completion in the history
  int actor = -1;
  long group = 0;  // the parts of one multi-key txn share it (0: alone)
  std::string key;
  std::string value;                  // put, cas: the value written
  std::optional<std::string> expect;  // cas: the value compared with (none: the key must be absent)
  std::optional<std::string> read;    // get, a cas whose compare failed: the value read (none: absent)
  std::int64_t read_mod = 0;          // ... and its mod revision
  bool succeeded = false;             // cas: the compare held
  std::int64_t deleted = 0;           // del: keys deleted
  std::int64_t revision = 0;          // ok: the response header's revision
  bool settled = false;  // an unknown outcome settled by etcd's history (settle_unknown)

  /// Answered, and made a revision of its own.
  bool changed() const {
    return outcome == ok && (kind == put || (kind == del && deleted > 0) || (kind == cas && succeeded));
  }
  /// Answered with the key's value.
  bool reads() const { return outcome == ok && (kind == get || (kind == cas && !succeeded)); }
  bool writes_value() const { return kind == put || kind == cas; }
};

inline std::string value_text(const std::optional<std::string>& v) { return v ? *v : std::string("<absent>"); }

/// An answer as the history shows it: "succeeded, rev 120", "read v9@118, rev 120", ...
inline std::string kv_answer(const kv_op& o) {
  if (o.settled) return "outcome unknown, applied at rev " + std::to_string(o.revision) + " in etcd's history";
  if (o.outcome == kv_op::maybe) return "maybe applied";
  if (o.outcome == kv_op::failed) return "surely not applied";
  std::ostringstream s;
  if (o.kind == kv_op::cas) s << (o.succeeded ? "succeeded, " : "failed, ");
  if (o.kind == kv_op::del) s << o.deleted << " deleted, ";
  if (o.reads()) s << "read " << value_text(o.read) << "@" << o.read_mod << ", ";
  s << "rev " << o.revision;
  return s.str();
}

/// "op12 (actor 3) cas k0 v5->v17: failed, read v9@118, rev 120" and the like, for messages.
inline std::string kv_text(const kv_op& o) {
  std::ostringstream s;
  if (o.op == 0 && o.settled) return "a delete of " + o.key + " of unknown outcome, at rev " + std::to_string(o.revision) + " in etcd's history";
  s << "op" << o.op << " (actor " << o.actor << ") ";
  switch (o.kind) {
    case kv_op::put: s << "put " << o.key << "=" << o.value; break;
    case kv_op::get: s << "get " << o.key; break;
    case kv_op::del: s << "del " << o.key; break;
    case kv_op::cas: s << "cas " << o.key << " " << value_text(o.expect) << "->" << o.value; break;
  }
  return s.str() + ": " + kv_answer(o);
}

/// What the linearizability search said of one key.
struct lin_result {
  enum verdict_t { linearizable, violated, unknown } verdict = linearizable;
  std::string key;
  std::size_t ops = 0;  // operations judged: answered ones, and writes that may have been applied
  long steps = 0;
  std::string why;        // violated, unknown: what the search found
  long from = 0, to = 0;  // violated: the stretch of history that shows it
};

namespace wgl {

inline std::uint64_t mix(std::uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// A configuration the search has been in: the set of operations placed and the register's
/// value, as two independent 64-bit Zobrist hashes (a collision that would prune a live branch
/// has a chance near 2^-100 per pair; the set itself would cost a bitmask per entry).
struct config {
  std::uint64_t a = 0, b = 0;
  bool operator==(const config&) const = default;
};
struct config_hash {
  std::size_t operator()(const config& c) const { return static_cast<std::size_t>(c.a); }
};

/// One operation, its values as numbers: 0 is "absent", each value written its own number, a
/// value read that nobody wrote one that no state ever has.
struct step_op {
  kv_op::kind_t kind = kv_op::get;
  bool maybe = false, succeeded = false;
  int value = 0, expect = 0, read = 0;
  std::int64_t deleted = 0;
};

/// The register's value after `o` from value `s`, or -1 when `o`'s answer rules `s` out.
inline int apply(int s, const step_op& o) {
  switch (o.kind) {
    case kv_op::put: return o.value;
    case kv_op::get: return s == o.read ? s : -1;
    case kv_op::del:
      if (o.maybe) return 0;
      return (s != 0) == (o.deleted > 0) ? 0 : -1;
    case kv_op::cas:
      if (o.maybe) return s == o.expect ? o.value : s;
      if (o.succeeded) return s == o.expect ? o.value : -1;
      return s != o.expect && s == o.read ? s : -1;
  }
  return -1;
}

}  // namespace wgl

/// Whether the operations on `key` (among `all`) are a linearizable history of a register that
/// starts absent. Each operation takes effect at one instant between its call and its completion
/// (history seqs: the order the one event loop saw them); a write that may have been applied
/// takes effect at any instant after its call, or never (its completion is at infinity: placed
/// after everything else, it changes nothing anyone saw). Failed reads and writes surely not
/// applied say nothing and are left out. Wing & Gong's search over the calls in order, undoing the
/// last placement when a completion comes before its operation was placed, with Lowe's memo of
/// (operations placed, value) so no configuration is explored twice. After `budget` steps the
/// verdict is `unknown`, not a hang.
inline lin_result check_register(const std::string& key, const std::vector<kv_op>& all, long budget) {
  lin_result r;
  r.key = key;
  std::vector<const kv_op*> ops;
  for (auto& o : all)
    if (o.key == key && (o.outcome == kv_op::ok || (o.outcome == kv_op::maybe && o.kind != kv_op::get)))
      ops.push_back(&o);
  const int n = static_cast<int>(ops.size());
  r.ops = ops.size();
  if (n == 0) return r;

  std::unordered_map<std::string, int> ids;
  std::vector<std::string> names{"<absent>"};
  auto id_of = [&](const std::optional<std::string>& v) {
    if (!v) return 0;
    auto [it, fresh] = ids.try_emplace(*v, static_cast<int>(names.size()));
    if (fresh) names.push_back(*v);
    return it->second;
  };
  std::vector<wgl::step_op> sops(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    const kv_op& o = *ops[static_cast<std::size_t>(i)];
    auto& s = sops[static_cast<std::size_t>(i)];
    s.kind = o.kind;
    s.maybe = o.outcome == kv_op::maybe;
    s.succeeded = o.succeeded;
    s.deleted = o.deleted;
    if (o.writes_value()) s.value = id_of(o.value);
    if (o.kind == kv_op::cas) s.expect = id_of(o.expect);
  }
  for (int i = 0; i < n; ++i)  // after every value written has its number
    if (ops[static_cast<std::size_t>(i)]->reads()) sops[static_cast<std::size_t>(i)].read = id_of(ops[static_cast<std::size_t>(i)]->read);

  // The events as one doubly linked list in time order: node 2i is operation i's call, 2i+1
  // its completion; `head` is the sentinel before the first.
  const int head = 2 * n;
  std::vector<std::pair<long, int>> order;
  for (int i = 0; i < n; ++i) {
    const kv_op& o = *ops[static_cast<std::size_t>(i)];
    order.emplace_back(o.call, 2 * i);
    order.emplace_back(o.outcome == kv_op::maybe ? never : o.ret, 2 * i + 1);
  }
  std::sort(order.begin(), order.end());
  std::vector<int> next(static_cast<std::size_t>(2 * n + 1), -1), prev(static_cast<std::size_t>(2 * n + 1), -1);
  int last = head;
  for (auto& [t, node] : order) {
    next[static_cast<std::size_t>(last)] = node;
    prev[static_cast<std::size_t>(node)] = last;
    last = node;
  }
  auto unlink = [&](int x) {
    next[static_cast<std::size_t>(prev[static_cast<std::size_t>(x)])] = next[static_cast<std::size_t>(x)];
    if (next[static_cast<std::size_t>(x)] >= 0) prev[static_cast<std::size_t>(next[static_cast<std::size_t>(x)])] = prev[static_cast<std::size_t>(x)];
  };
  auto relink = [&](int x) {  // the reverse of unlink, in the reverse order of the unlinks
    if (next[static_cast<std::size_t>(x)] >= 0) prev[static_cast<std::size_t>(next[static_cast<std::size_t>(x)])] = x;
    next[static_cast<std::size_t>(prev[static_cast<std::size_t>(x)])] = x;
  };
  auto lift = [&](int call) {
    unlink(call);
    unlink(call + 1);
  };
  auto unlift = [&](int call) {
    relink(call + 1);
    relink(call);
  };

  std::vector<wgl::config> zobrist(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i)
    zobrist[static_cast<std::size_t>(i)] = {wgl::mix(2 * static_cast<std::uint64_t>(i) + 1), wgl::mix(~(2 * static_cast<std::uint64_t>(i)))};
  auto with_state = [](wgl::config c, int s) {
    return wgl::config{c.a ^ wgl::mix(0x5bd1e995ull + static_cast<std::uint64_t>(s)),
                       c.b ^ wgl::mix(0xc2b2ae35ull * (static_cast<std::uint64_t>(s) + 7))};
  };
  std::unordered_set<wgl::config, wgl::config_hash> seen;
  std::vector<std::pair<int, int>> stack;  // (call node placed, the value before it)
  wgl::config placed;
  int state = 0;
  std::size_t deepest = 0;
  int stuck = -1, stuck_state = 0;
  int node = next[static_cast<std::size_t>(head)];
  while (next[static_cast<std::size_t>(head)] >= 0) {
    if (++r.steps > budget) {
      r.verdict = lin_result::unknown;
      r.why = "no verdict within " + std::to_string(budget) + " steps (" + std::to_string(n) + " operations, " +
              std::to_string(stack.size()) + " placed)";
      return r;
    }
    if (node % 2 == 0) {  // a call: place the operation here if its answer allows it
      const int i = node / 2;
      const int after = wgl::apply(state, sops[static_cast<std::size_t>(i)]);
      if (after >= 0) {
        wgl::config moved{placed.a ^ zobrist[static_cast<std::size_t>(i)].a, placed.b ^ zobrist[static_cast<std::size_t>(i)].b};
        if (seen.insert(with_state(moved, after)).second) {
          stack.emplace_back(node, state);
          state = after;
          placed = moved;
          lift(node);
          node = next[static_cast<std::size_t>(head)];
          continue;
        }
      }
      node = next[static_cast<std::size_t>(node)];
      continue;
    }
    // A completion whose operation could not be placed before it: undo the last placement.
    if (stuck < 0 || stack.size() > deepest) {
      deepest = stack.size();
      stuck = node / 2;
      stuck_state = state;
    }
    if (stack.empty()) break;
    auto [call, before] = stack.back();
    stack.pop_back();
    const int i = call / 2;
    placed = {placed.a ^ zobrist[static_cast<std::size_t>(i)].a, placed.b ^ zobrist[static_cast<std::size_t>(i)].b};
    state = before;
    unlift(call);
    node = next[static_cast<std::size_t>(call)];
  }
  if (next[static_cast<std::size_t>(head)] < 0) return r;

  r.verdict = lin_result::violated;
  const kv_op& s = *ops[static_cast<std::size_t>(stuck)];
  r.why = "no order of the " + std::to_string(n) + " operations on the key explains " + kv_text(s) + ": at most " +
          std::to_string(deepest) + " of them fit before its completion, the value then " +
          names[static_cast<std::size_t>(stuck_state)];
  // From a few completions before its call (the writes it should have seen) to its completion.
  std::vector<long> before_call;
  for (auto* o : ops)
    if (o->outcome == kv_op::ok && o->ret < s.call) before_call.push_back(o->call);
  std::sort(before_call.rbegin(), before_call.rend());
  r.from = before_call.empty() ? s.call : before_call[std::min<std::size_t>(before_call.size() - 1, 4)];
  r.to = s.ret;
  return r;
}

/// A change etcd's history shows: its revision, its key, the value put (none: a delete).
struct applied_change {
  std::int64_t revision = 0;
  std::string key;
  std::optional<std::string> value;
};

/// `ops` for the linearizability search, with the writes of unknown outcome settled by etcd's
/// history (`changes`, complete up to a last write made after every operation completed). Left
/// unknown, each may take effect at any moment after its call or never, and a search that must
/// rule a history out tries them in every combination (2^n). Settled: a put or compare-and-set
/// whose value is in the history took effect at its revision r, so after its call and before
/// the completion of the first answer carrying r or a later revision; one whose value is not
/// there took no effect anyone saw, and is left out. A delete in the history that no answered
/// delete made was made by one of the unknown ones (which one is nothing to a register): it is
/// taken as a delete of its own, after the last call of an answer older than r and before that
/// first completion; the unknown deletes are left out. A settled write whose bound comes before
/// its call breaks real time (an answer saw its revision before it was sent): that fails `h`.
inline std::vector<kv_op> settle_unknown(history& h, const std::vector<kv_op>& ops, const std::vector<applied_change>& changes) {
  std::vector<const kv_op*> answered;
  for (auto& o : ops)
    if (o.outcome == kv_op::ok) answered.push_back(&o);
  std::sort(answered.begin(), answered.end(), [](auto* a, auto* b) { return a->revision < b->revision; });
  std::vector<long> first_done(answered.size() + 1, never), last_call(answered.size() + 1, 0);
  for (std::size_t i = answered.size(); i-- > 0;) first_done[i] = std::min(first_done[i + 1], answered[i]->ret);
  for (std::size_t i = 0; i < answered.size(); ++i) last_call[i + 1] = std::max(last_call[i], answered[i]->call);
  auto from = [&](std::int64_t r) {  // the first answer with a revision >= r
    return static_cast<std::size_t>(std::lower_bound(answered.begin(), answered.end(), r, [](auto* a, std::int64_t x) {
                                      return a->revision < x;
                                    }) - answered.begin());
  };
  std::map<std::string, std::int64_t> put_at;
  std::set<std::pair<std::int64_t, std::string>> answered_deletes;
  for (auto& c : changes)
    if (c.value) put_at.emplace(*c.value, c.revision);
  for (auto* o : answered)
    if (o->kind == kv_op::del && o->changed()) answered_deletes.insert({o->revision, o->key});
  std::vector<kv_op> out;
  for (auto& o : ops) {
    if (o.outcome != kv_op::maybe) {
      out.push_back(o);
      continue;
    }
    if (o.kind == kv_op::get || o.kind == kv_op::del) continue;
    auto at = put_at.find(o.value);
    if (at == put_at.end()) continue;
    kv_op x = o;
    x.outcome = kv_op::ok;
    x.settled = true;
    x.succeeded = true;
    x.revision = at->second;
    x.ret = first_done[from(at->second)];
    if (x.ret < x.call) {
      h.fail({"(kv) revisions follow real time (an answer is never older than one completed before its call)", o.key,
              kv_text(x) + ", but an answer carrying that revision or a later one completed before its call", x.ret,
              o.ret, {}});
      x.ret = never;
    }
    out.push_back(std::move(x));
  }
  for (auto& c : changes) {
    if (c.value || answered_deletes.count({c.revision, c.key})) continue;
    kv_op x;
    x.kind = kv_op::del;
    x.key = c.key;
    x.deleted = 1;
    x.revision = c.revision;
    x.settled = true;
    const auto i = from(c.revision);
    x.call = last_call[i];
    x.ret = first_done[i] < x.call ? never : first_done[i];  // the other way round: check_revisions says so
    out.push_back(std::move(x));
  }
  return out;
}

/// check_register for every key of `ops`; each violation fails `h`.
inline std::vector<lin_result> check_linearizable(history& h, const std::vector<kv_op>& ops, long budget) {
  std::set<std::string> keys;
  for (auto& o : ops) keys.insert(o.key);
  std::vector<lin_result> out;
  for (auto& k : keys) {
    out.push_back(check_register(k, ops, budget));
    auto& r = out.back();
    if (r.verdict == lin_result::violated)
      h.fail({"(kv) each key's history is linearizable (a write that failed ambiguously applies after its call, or never)",
              k, r.why, r.from, r.to, {}});
  }
  return out;
}

/// Checks what revisions make cheap, failing `h` for each violation: (1) two distinct writes
/// answered never share a revision; (2) no answer carries a revision older than one completed
/// before it was called, and a write called after another completed has a newer one; (3) a value
/// read was written by a write not surely refused, carries that write's revision when it was
/// answered, and one revision only when it was not (a write applies at most once).
inline void check_revisions(history& h, const std::vector<kv_op>& ops) {
  std::map<std::int64_t, const kv_op*> by_revision;
  for (auto& o : ops) {
    if (!o.changed()) continue;
    auto [it, fresh] = by_revision.emplace(o.revision, &o);
    if (!fresh && (o.group == 0 || o.group != it->second->group))
      h.fail({"(kv) two writes never share a revision", o.key, kv_text(*it->second) + " and " + kv_text(o),
              std::min(o.call, it->second->call), std::max(o.ret, it->second->ret), {}});
  }
  std::vector<const kv_op*> by_call, by_ret;
  for (auto& o : ops)
    if (o.outcome == kv_op::ok) by_call.push_back(&o);
  by_ret = by_call;
  std::sort(by_call.begin(), by_call.end(), [](auto* a, auto* b) { return a->call < b->call; });
  std::sort(by_ret.begin(), by_ret.end(), [](auto* a, auto* b) { return a->ret < b->ret; });
  const kv_op* newest = nullptr;  // the answer with the highest revision completed before the call
  std::size_t j = 0;
  for (auto* x : by_call) {
    for (; j < by_ret.size() && by_ret[j]->ret < x->call; ++j)
      if (!newest || by_ret[j]->revision > newest->revision) newest = by_ret[j];
    if (!newest) continue;
    const bool older = x->revision < newest->revision || (x->changed() && x->revision == newest->revision);
    if (older)
      h.fail({"(kv) revisions follow real time (an answer is never older than one completed before its call)", x->key,
              kv_text(*x) + ", called after " + kv_text(*newest) + " completed", newest->call, x->ret, {}});
  }
  std::map<std::string, const kv_op*> writer;
  for (auto& o : ops)
    if (o.writes_value()) writer[o.value] = &o;
  std::map<std::string, std::int64_t> applied_at;  // value of a write not answered -> revision read
  for (auto& o : ops) {
    if (!o.reads() || !o.read) continue;
    auto fail = [&](const std::string& invariant, const std::string& what, const kv_op* w) {
      h.fail({invariant, o.key, what, w ? std::min(w->call, o.call) : o.call, o.ret, {}});
    };
    if (o.read_mod > o.revision) fail("(kv) a value read is no newer than its answer", kv_text(o), nullptr);
    auto it = writer.find(*o.read);
    if (it == writer.end()) {
      fail("(kv) a get reads only values written", kv_text(o) + ": nobody wrote " + *o.read, nullptr);
      continue;
    }
    const kv_op& w = *it->second;
    if (w.key != o.key) fail("(kv) a get reads only values written", kv_text(o) + ": written to " + w.key + " by " + kv_text(w), &w);
    else if (w.outcome == kv_op::failed)
      fail("(kv) a write the client calls surely not applied is not applied", kv_text(o) + ", written by " + kv_text(w), &w);
    else if (w.outcome == kv_op::ok && !w.changed())
      fail("(kv) a cas whose compare failed writes nothing", kv_text(o) + ", written by " + kv_text(w), &w);
    else if (w.outcome == kv_op::ok && o.read_mod != w.revision)
      fail("(kv) a value read carries its write's revision", kv_text(o) + ", written by " + kv_text(w), &w);
    else if (w.outcome == kv_op::maybe) {
      auto [at, fresh] = applied_at.emplace(*o.read, o.read_mod);
      if (!fresh && at->second != o.read_mod)
        fail("(kv) a write applies at most once",
             kv_text(o) + ", but " + *o.read + " was read at revision " + std::to_string(at->second) + " before; written by " + kv_text(w), &w);
    }
  }
}

}  // namespace coetcd::test::explore
