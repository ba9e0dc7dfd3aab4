// The explorer's watches (test_explore): watchers on the KV case's keys, through faulted links,
// from a start revision or from their creation, and the checks of what they delivered against
// etcd's guarantees (ordered, atomic, unique, reliable, resumable) and of etcd's history
// against the calls recorded (every write told applied is there, none applies twice).
#pragma once

#include "kv.hpp"

#include <limits>

namespace coetcd::test::explore {

/// One event as a watch delivered it.
struct seen_event {
  std::int64_t revision = 0;
  bool put = true;
  std::string key, value;
  std::optional<key_value> prev;
  std::size_t batch = 0;  // the watch's batches, counted from 1
  long seq = 0;           // the history's last seq when the batch arrived
};

inline std::string event_text(const seen_event& e) {
  return "rev " + std::to_string(e.revision) + (e.put ? " put " + e.key + "=" + e.value : " del " + e.key) +
         " (batch " + std::to_string(e.batch) + ")";
}

/// A watch of the case's prefix and what it delivered.
struct watch_rec {
  std::string label;  // "w0 (client 3, from rev 812)"
  std::string name;   // the history's name for its entries and its client's stream notes
  std::int64_t start = 0;  // the first revision it must deliver (0: from its creation)
  std::int64_t floor = 0;  // start 0: the store's revision once it was created (it must deliver every later one)
  bool prev_kv = false;
  watcher wt;
  std::vector<seen_event> events;
  std::size_t batches = 0;
  std::optional<error_code> ended;  // the error that ended it
  bool cancelled = false;           // by the case, for not reaching the end in time
  bool reached_end = false, done = false;
};
using watch_ptr = std::shared_ptr<watch_rec>;

/// Creates the watch, then takes its batches until the case's sentinel comes (or an error).
inline asio::awaitable<void> watch_loop(std::shared_ptr<kv_world> kp, watch_ptr r, client& c) {
  kv_world& k = *kp;
  auto op = k.w.h.invoke(-1, "watch.create " + r->label, r->name, -1, -1, 0);
  watch_options o;
  o.prefix = true;
  o.start_revision = r->start;
  o.prev_kv = r->prev_kv;
  auto creating = c.async_watch(k.prefix, o, asio::as_tuple(use_awaitable));
  auto [ec, wt] = co_await std::move(creating);
  if (ec) {
    k.w.h.complete(op, ec.message());
    r->ended = ec;
    r->done = true;
    co_return;
  }
  r->wt = std::move(wt);
  if (r->start == 0) {
    auto reading = k.w.judge->async_get(k.sentinel, asio::as_tuple(use_awaitable));
    auto [gec, g] = co_await std::move(reading);
    if (!gec) r->floor = g.header.revision;  // else 0: checked from its first event on
  }
  k.w.h.complete(op, r->start ? "ok" : "ok, the store then at rev " + std::to_string(r->floor));
  while (!r->reached_end) {
    auto next = r->wt.async_next(asio::as_tuple(use_awaitable));
    auto [nec, b] = co_await std::move(next);
    if (nec) {
      r->ended = nec;
      break;
    }
    ++r->batches;
    // Nothing after the sentinel counts: a write held in a link until the end may land after it,
    // in one watch's batch with it and in another's next one.
    for (auto& e : b.events) {
      if (r->reached_end) break;
      r->events.push_back({e.kv.mod_revision, e.type == watch_event::kind::put, e.kv.key, e.kv.value, e.prev_kv,
                           r->batches, k.w.h.last_seq()});
      r->reached_end = e.kv.key == k.sentinel;
    }
  }
  r->done = true;
  k.w.h.note(-1, "watch.end", r->name, -1, -1, 0,
             r->label + ": " + std::to_string(r->events.size()) + " events in " + std::to_string(r->batches) + " batches" +
                 (r->ended ? ", ended: " + r->ended->message() : ""));
}

/// Ordered (revisions never go back), atomic (the events of one revision come in one batch),
/// unique (no change twice).
inline void check_watch_order(history& h, const watch_rec& r) {
  std::set<std::pair<std::int64_t, std::string>> seen;
  for (std::size_t i = 0; i < r.events.size(); ++i) {
    const auto& e = r.events[i];
    if (!seen.insert({e.revision, e.key}).second)
      h.fail({"(w) a watch delivers each change once", r.name, r.label + ": " + event_text(e) + " again", e.seq, e.seq, {}});
    if (i == 0) continue;
    const auto& p = r.events[i - 1];
    if (e.revision < p.revision)
      h.fail({"(w) a watch delivers changes in revision order", r.name, r.label + ": " + event_text(e) + " after " + event_text(p),
              p.seq, e.seq, {}});
    else if (e.revision == p.revision && e.batch != p.batch)
      h.fail({"(w) a watch delivers one revision's changes in one batch", r.name, r.label + ": " + event_text(p) + " and " + event_text(e),
              p.seq, e.seq, {}});
  }
}

/// Reliable and resumable: what `r` delivered is exactly the reference's events from its start
/// (a watch from its creation: from its first event, and at least every one after the store's
/// revision when it was created), across every stream it was resumed on. With prev_kv, each
/// event's previous value is the key's value before it in the reference. A watch ends only at
/// the sentinel: an error ending it is a violation (nothing compacts, nobody cancels).
inline void check_watch_delivery(history& h, const watch_rec& r, const std::vector<seen_event>& ref) {
  if (r.ended && !r.cancelled)
    h.fail({"(w) a watch ends only when asked to", r.name,
            r.label + ": ended with \"" + r.ended->message() + "\" after " + std::to_string(r.events.size()) + " events",
            r.events.empty() ? 0 : r.events.back().seq, r.events.empty() ? 0 : r.events.back().seq, {}});
  if (r.cancelled)
    h.fail({"(w) a watch delivers every change", r.name,
            r.label + ": did not deliver the case's last write within 20 s of it (" + std::to_string(r.events.size()) + " events)",
            r.events.empty() ? 0 : r.events.back().seq, h.last_seq(), {}});
  std::int64_t lower = r.start;
  if (r.start == 0) {
    lower = r.floor > 0 ? r.floor + 1 : std::numeric_limits<std::int64_t>::max();  // 0: not read
    if (!r.events.empty()) lower = std::min(lower, r.events.front().revision);
  }
  std::vector<const seen_event*> want;
  std::map<std::pair<std::int64_t, std::string>, std::optional<std::string>> before;  // (rev, key) -> value before it
  std::map<std::string, std::optional<std::string>> now;
  for (auto& e : ref) {
    if (e.revision >= lower) want.push_back(&e);
    before[{e.revision, e.key}] = now[e.key];
    now[e.key] = e.put ? std::optional(e.value) : std::nullopt;
  }
  auto same = [](const seen_event& a, const seen_event& b) {
    return a.revision == b.revision && a.put == b.put && a.key == b.key && a.value == b.value;
  };
  std::size_t i = 0;
  while (i < r.events.size() && i < want.size() && same(r.events[i], *want[i])) ++i;
  if (i < r.events.size() && i < want.size())
    h.fail({"(w) a watch delivers every change once, in etcd's order", r.name,
            r.label + ": after " + std::to_string(i) + " events as etcd has them, delivered " + event_text(r.events[i]) +
                " where etcd's history has " + event_text(*want[i]),
            std::min(r.events[i].seq, want[i]->seq), std::max(r.events[i].seq, want[i]->seq), {}});
  else if (i < r.events.size())
    h.fail({"(w) a watch delivers only changes etcd made", r.name,
            r.label + ": after the whole history, delivered " + event_text(r.events[i]), r.events[i].seq, r.events[i].seq, {}});
  else if (i < want.size() && !r.ended)
    h.fail({"(w) a watch delivers every change", r.name,
            r.label + ": missed " + std::to_string(want.size() - i) + " events from " + event_text(*want[i]), want[i]->seq,
            h.last_seq(), {}});
  if (!r.prev_kv) return;
  for (auto& e : r.events) {
    auto it = before.find({e.revision, e.key});
    if (it == before.end()) continue;  // a difference reported above
    const std::optional<std::string> got = e.prev ? std::optional(e.prev->value) : std::nullopt;
    if (got != it->second)
      h.fail({"(w) a watch's prev_kv is the value before the change", r.name,
              r.label + ": " + event_text(e) + " with prev " + value_text(got) + ", etcd had " + value_text(it->second),
              e.seq, e.seq, {}});
  }
}

/// etcd's history (the reference watch) against the calls: every write answered is there at its
/// revision; every value there was written by a call not surely refused, and once only (a
/// resend never applies a write twice); a compare-and-set that failed wrote nothing; every delete
/// there was asked for (answered at that revision, or one of the deletes whose outcome is unknown);
/// every read shows its key as the history has it at the read's revision; the puts of one txn
/// are there at one revision, or none of them.
inline void check_applied(history& h, const std::vector<kv_op>& ops, const std::vector<seen_event>& ref,
                          const std::string& sentinel) {
  const std::string invariant = "(kv) etcd's history holds the writes answered, each once, and nothing else";
  std::map<std::pair<std::int64_t, std::string>, const seen_event*> at;
  for (auto& e : ref) at[{e.revision, e.key}] = &e;
  std::map<std::string, const kv_op*> writer;
  std::map<std::string, int> unknown_deletes;
  for (auto& o : ops) {
    if (o.writes_value()) writer[o.value] = &o;
    if (o.kind == kv_op::del && o.outcome == kv_op::maybe) ++unknown_deletes[o.key];
    if (!o.changed()) continue;
    auto it = at.find({o.revision, o.key});
    if (it == at.end() || it->second->put != (o.kind != kv_op::del) || (it->second->put && it->second->value != o.value))
      h.fail({invariant, o.key, kv_text(o) + (it == at.end() ? ": not in etcd's history" : ": etcd has " + event_text(*it->second)),
              o.call, o.ret, {}});
  }
  std::map<std::string, std::vector<const seen_event*>> of_key;  // in revision order
  for (auto& e : ref) of_key[e.key].push_back(&e);
  for (auto& o : ops) {
    if (!o.reads()) continue;
    const auto& changes = of_key[o.key];
    auto after = std::upper_bound(changes.begin(), changes.end(), o.revision,
                                  [](std::int64_t r, const seen_event* e) { return r < e->revision; });
    const seen_event* last = after == changes.begin() ? nullptr : *std::prev(after);
    const std::optional<std::string> then = last && last->put ? std::optional(last->value) : std::nullopt;
    if (then != o.read || (then && o.read_mod != last->revision))
      h.fail({"(kv) a read shows its key as etcd's history has it at the read's revision", o.key,
              kv_text(o) + "; at rev " + std::to_string(o.revision) + " etcd's history has " +
                  (last ? event_text(*last) : std::string("nothing (absent)")),
              last ? std::min(o.call, last->seq) : o.call, o.ret, {}});
  }
  std::map<std::string, std::int64_t> put_at;
  for (auto& e : ref)
    if (e.put) put_at.emplace(e.value, e.revision);
  std::map<long, std::set<std::int64_t>> group_at;  // a txn's puts -> their revisions (0: not there)
  std::map<long, const kv_op*> group_op;
  for (auto& o : ops)
    if (o.group != 0 && o.outcome != kv_op::failed) {
      auto it = put_at.find(o.value);
      group_at[o.group].insert(it == put_at.end() ? 0 : it->second);
      group_op.emplace(o.group, &o);
    }
  for (auto& [g, revisions] : group_at)
    if (revisions.size() > 1)
      h.fail({"(kv) a txn applies whole, at one revision", group_op[g]->key,
              kv_text(*group_op[g]) + ": its puts are in etcd's history at " + std::to_string(revisions.size()) +
                  " different revisions (0: not there)",
              group_op[g]->call, group_op[g]->ret, {}});
  std::map<std::string, const seen_event*> put_of;
  for (auto& e : ref) {
    if (e.key == sentinel) continue;
    if (!e.put) {
      auto answered = std::find_if(ops.begin(), ops.end(), [&](const kv_op& o) {
        return o.kind == kv_op::del && o.changed() && o.key == e.key && o.revision == e.revision;
      });
      if (answered == ops.end() && --unknown_deletes[e.key] < 0)
        h.fail({invariant, e.key, event_text(e) + ": more deletes than were asked for", e.seq, e.seq, {}});
      continue;
    }
    auto w = writer.find(e.value);
    if (w == writer.end()) {
      h.fail({invariant, e.key, event_text(e) + ": nobody wrote " + e.value, e.seq, e.seq, {}});
      continue;
    }
    const kv_op& o = *w->second;
    auto [first, fresh] = put_of.emplace(e.value, &e);
    if (!fresh)
      h.fail({"(kv) a write applies at most once (a resend never applies it twice)", e.key,
              kv_text(o) + " applied at " + event_text(*first->second) + " and at " + event_text(e), o.call,
              std::max(o.ret, e.seq), {}});
    else if (o.key != e.key || o.outcome == kv_op::failed || (o.outcome == kv_op::ok && !o.changed()))
      h.fail({invariant, e.key, event_text(e) + " written by " + kv_text(o), o.call, std::max(o.ret, e.seq), {}});
  }
}

}  // namespace coetcd::test::explore
