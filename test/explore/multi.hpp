// The explorer's multi_lock callers (test_explore_more): actors that take random subsets of a
// case's names as one multi_lock of mutex parts (of one session, or a session per part, listed in
// random order), cut short at random, beside plain mutex callers on the same names (locks.hpp);
// each actor owns the multi_lock::hold it is handed, writes through every part's fence, releases
// it or drops it without a release; multi_locks and their parts destroyed and moved while a lock
// is pending or while their hold goes on. Checked beside the mutex's own invariants: all or none.
#pragma once

#include "locks.hpp"

#include <coetcd/multi_lock.hpp>

namespace coetcd::test::explore {

/// One multi_lock and its part objects, which nothing else locks (as the header asks); one actor
/// uses it, the churn moves and destroys it.
struct ml_rec {
  int id = 0;  // 1,000,000 + n: apart from the objects' ids (a hold names what it came through)
  std::vector<std::string> names;  // as listed to the multi_lock
  std::vector<sess_rec*> sessions;  // per part
  std::vector<std::unique_ptr<coetcd::mutex>> parts;   // per part
  std::vector<std::unique_ptr<coetcd::mutex>> spares;  // parts of fresh multi_locks moved over
  std::unique_ptr<multi_lock> ml;
  bool alive = true;
  long destroyed_at = 0;
  int pending = 0, moves = 0;
  std::vector<long> holds;  // of the lock told last, per part (history ids; the hold is the actor's)
  std::vector<int> session_ids() const {
    std::vector<int> out;
    for (auto* s : sessions) out.push_back(s->id);
    return out;
  }
  bool usable() const {
    return std::all_of(sessions.begin(), sessions.end(), [](auto* s) { return s->usable(); });
  }
};
using ml_ptr = std::shared_ptr<ml_rec>;

struct multi_case {
  std::vector<std::string> names;  // three
  int actors = 6;
  std::vector<ml_ptr> recs;
};

inline std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (auto& n : names) out += (out.empty() ? "" : " + ") + n;
  return out;
}

/// Destroys a multi_lock and then its parts (in that order: they must outlive its pending
/// operations), in one turn, as a scope holding them ends: a lock pending is aborted; a hold taken
/// through it is its actor's and goes on.
inline void destroy_multi(world& w, ml_rec& r, int actor, const std::string& why) {
  if (!r.alive) return;
  auto seq = w.h.note(actor, "multi.destroy", r.names[0], r.id, r.sessions[0]->id, r.sessions[0]->lease,
                      why + " (" + std::to_string(r.pending) + " pending; " + joined(r.names) + ")");
  for (std::size_t i = 0; i < r.parts.size(); ++i) w.touch(recipe::mutex, r.names[i], r.sessions[i]->lease, r.sessions[i]->id, seq);
  r.alive = false;
  r.destroyed_at = seq;
  r.ml.reset();
  r.parts.clear();
  r.spares.clear();
}

/// Moves the multi_lock (how 0: move construction; 1: into a fresh multi_lock of a spare part;
/// 2: assigned over `target`'s, which then counts as destroyed) or (how 3) part `part`'s mutex.
inline void move_multi(world& w, ml_rec& r, int how, ml_rec* target, std::size_t part, const std::string& why) {
  std::string what = how == 3 ? "part " + r.names[part] + " move-constructed"
                     : how == 2 && target ? "move-assigned over multi" + std::to_string(target->id)
                     : how >= 1 ? "move-assigned into a fresh multi_lock" : "move-constructed";
  w.h.note(-1, "multi.move", r.names[0], r.id, r.sessions[0]->id, r.sessions[0]->lease,
           what + ", " + why + " (" + std::to_string(r.pending) + " pending)");
  if (how == 3) {
    r.parts[part] = std::make_unique<coetcd::mutex>(std::move(*r.parts[part]));
  } else if (how == 2 && target) {
    *target->ml = std::move(*r.ml);
    std::swap(r.ml, target->ml);
    destroy_multi(w, *target, -1, "assigned over by multi" + std::to_string(r.id) + "'s move");
    ++w.tally["moves assigned over another object"];
  } else if (how >= 1) {
    auto spare = std::make_unique<coetcd::mutex>(r.sessions[0]->s, w.name("spare"));
    auto fresh = std::make_unique<multi_lock>(std::vector<multi_lock::part>{multi_lock::part(*spare)});
    *fresh = std::move(*r.ml);
    r.ml = std::move(fresh);
    r.spares.push_back(std::move(spare));
  } else {
    r.ml = std::make_unique<multi_lock>(std::move(*r.ml));
  }
  ++r.moves;
  ++w.tally["moves"];
}

/// Locks `ml` into `into` (the actor's hold), read as the operation starts, in the caller's turn.
inline asio::awaitable<error_code> start_multi(multi_lock& ml, bool try_only, asio::cancellation_slot slot,
                                               multi_lock::hold& into) {
  auto token = asio::bind_cancellation_slot(slot, asio::as_tuple(use_awaitable));
  error_code ec;
  if (try_only) std::tie(ec, into) = co_await ml.async_try_lock(token);
  else std::tie(ec, into) = co_await ml.async_lock(token);
  co_return ec;
}

/// All or none: a lock that failed or was cut short hands back no hold (the parts it took are
/// released first; for a cut that met the success, in the background: the end's checks see a
/// part left held, as a key left or a waiter never granted).
inline void expect_none_held(world& w, int k, const ml_rec& r, const multi_lock::hold& got, error_code ec) {
  if (!got) return;
  auto seq = w.h.note(k, "check.held", r.names[0], r.id, r.sessions[0]->id, r.sessions[0]->lease, "a hold handed back");
  w.h.fail({"(m1) all or none: a multi_lock that failed or was cut short holds none of its parts", r.names[0],
            "multi" + std::to_string(r.id) + " (" + joined(r.names) + ") handed back a hold that says it holds with " +
                ec.message(),
            seq - 1, seq, {}});
}

/// A txn guarded by every part's fence: the register and a log key per part (named by that
/// part's hold and `i`, the hold's write), so check_fences sees each name's writes.
inline asio::awaitable<void> multi_write(world& w, int k, ml_ptr r, const std::vector<compare>& fences, int i) {
  txn t;
  for (auto& f : fences) t.when(f);
  std::vector<std::string> logs;
  for (std::size_t p = 0; p < r->names.size(); ++p) {
    logs.push_back(w.data_key(r->names[p], "log/" + std::to_string(r->holds[p]) + "-" + std::to_string(i)));
    t.then(txn_op::put(w.data_key(r->names[p], "register"), "hold " + std::to_string(r->holds[p]))).then(txn_op::put(logs.back(), ""));
  }
  auto* s0 = r->sessions[0];
  auto op = w.h.invoke(k, "fenced_write", r->names[0], r->id, s0->id, s0->lease);
  w.op_sessions[op] = r->session_ids();
  auto writing = w.clients[static_cast<std::size_t>(s0->client)]->async_txn(t, asio::as_tuple(use_awaitable));
  auto [ec, res] = co_await std::move(writing);
  if (ec) {
    w.h.complete(op, "outcome unknown: " + ec.message(), r->holds[0]);
    co_return;
  }
  w.h.complete(op, res.succeeded ? "applied" : "rejected", r->holds[0]);
  for (auto& l : logs) (res.succeeded ? w.fence_told_ok : w.fence_told_rejected).insert(l);
  bool open = r->usable();  // whatever became of the multi_lock: the hold is the actor's
  for (std::size_t p = 0; p < r->holds.size(); ++p) {
    auto* h = w.h.find_hold(r->holds[p]);
    open = open && h && h->end == never && !w.lease_shared(r->sessions[p]->lease);
  }
  if (!res.succeeded && open)
    w.h.fail({"no caller told it holds after its key is gone", r->names[0],
              "the fenced write of multi" + std::to_string(r->id) + " (" + joined(r->names) + ") was rejected while it held",
              w.h.find_hold(r->holds[0])->start, w.h.last_seq(), r->holds});
}

/// One round of a multi_lock actor: a multi_lock (its last one, or a new one on a random subset
/// of the names), a lock or try (maybe cut short), a hold (maybe writing through every fence),
/// then a release, the multi_lock destroyed while the hold goes on and then a release, a release
/// with the multi_lock destroyed or moved in that turn, or the hold dropped without a release;
/// after a release, maybe a probe of the old fences.
inline asio::awaitable<void> multi_round(world& w, multi_case& mc, int k, chooser& c, ml_ptr& mine) {
  // Every choice of the round first.
  const bool fresh = c.chance(35);
  const int size = 1 + c.weighted({15, 40, 45});
  auto names = mc.names;
  for (int i = 0; i < size; ++i)
    std::swap(names[static_cast<std::size_t>(i)], names[static_cast<std::size_t>(c.between(i, 2))]);
  names.resize(static_cast<std::size_t>(size));
  const bool one_session = c.chance(65);
  sess_rec* picks[3] = {w.pick_usable(c), w.pick_usable(c), w.pick_usable(c)};
  const bool try_only = c.chance(20);
  const auto plan = draw_cut(c);
  const bool write = c.chance(50), probe = c.chance(60);
  const auto hold_for = ms(c.between(0, 25));
  // 0: release; 1: destroy the multi_lock and its parts, go on holding, then release; 2: release
  // and destroy in that turn; 3: release and move; 4: drop the hold without releasing it.
  const int how = c.weighted({50, 15, 15, 10, 10});
  if (!mine || !mine->alive || fresh || !mine->usable()) {
    if (mine) destroy_multi(w, *mine, k, "replaced by a new one");
    mine = nullptr;
    bool sessions_there = true;
    for (int i = 0; i < size; ++i) sessions_there = sessions_there && picks[one_session ? 0 : i];
    if (!sessions_there) {
      co_await sleep_for(ms(50));
      co_return;
    }
    auto r = std::make_shared<ml_rec>();
    r->id = 1000000 + static_cast<int>(mc.recs.size());
    std::vector<multi_lock::part> list;
    std::string detail;
    for (int i = 0; i < size; ++i) {
      auto* s = picks[one_session ? 0 : i];
      r->names.push_back(names[static_cast<std::size_t>(i)]);
      r->sessions.push_back(s);
      r->parts.push_back(std::make_unique<coetcd::mutex>(s->s, names[static_cast<std::size_t>(i)]));
      list.emplace_back(*r->parts.back());
      detail += (detail.empty() ? "" : ", ") + names[static_cast<std::size_t>(i)] + " in s" + std::to_string(s->id);
    }
    r->ml = std::make_unique<multi_lock>(std::move(list));
    w.h.note(k, "multi.create", r->names[0], r->id, r->sessions[0]->id, r->sessions[0]->lease, detail);
    mc.recs.push_back(r);
    mine = r;
  }
  auto r = mine;
  auto* s0 = r->sessions[0];
  auto op = w.h.invoke(k, try_only ? "multi.try_lock" : "multi.lock", r->names[0], r->id, s0->id, s0->lease,
                       static_cast<std::int64_t>(r->names.size()));
  w.op_sessions[op] = r->session_ids();
  for (std::size_t i = 0; i < r->names.size(); ++i) w.touch(recipe::mutex, r->names[i], r->sessions[i]->lease, r->sessions[i]->id, w.h.last_seq());
  ++r->pending;
  multi_lock::hold all;  // the actor's
  error_code ec;
  {
    canceller cut(w, plan);
    auto locking = start_multi(*r->ml, try_only, cut.slot(), all);
    ec = co_await std::move(locking);
  }
  --r->pending;
  if (ec) {
    w.h.complete(op, ec.message());
    const bool shared_lease = std::any_of(r->sessions.begin(), r->sessions.end(), [&](auto* s) { return w.lease_shared(s->lease); });
    if (ec == asio::error::operation_aborted && !plan.armed && r->alive && !w.stopping && !shared_lease)
      w.h.fail({"a move does not abort the acquisitions pending on the object", r->names[0],
                "actor " + std::to_string(k) + "'s lock of multi" + std::to_string(r->id) + " (moved " +
                    std::to_string(r->moves) + " times) completed with operation_aborted, never cut short, alive",
                w.h.last_seq() - 1, w.h.last_seq(), {}});
    expect_none_held(w, k, *r, all, ec);
    co_return;
  }
  w.h.complete(op, "ok");
  if (!r->alive) {
    w.h.fail({"a lock pending when its multi_lock is destroyed completes with operation_aborted", r->names[0],
              "actor " + std::to_string(k) + " was told it holds " + joined(r->names) + " through multi" +
                  std::to_string(r->id) + ", destroyed at #" + std::to_string(r->destroyed_at),
              r->destroyed_at, w.h.last_seq(), {}});
    w.h.note(k, "multi.drop", r->names[0], r->id, s0->id, s0->lease, "told by a destroyed multi_lock");
    co_return;  // `all` goes with the round: released in the background
  }
  r->holds.clear();
  const bool parts_usable = r->usable();
  for (std::size_t i = 0; i < r->names.size(); ++i) {
    auto& s = *r->sessions[i];
    auto id = w.h.begin_hold(r->names[i], k, r->id, s.id, s.lease, 1);
    r->holds.push_back(id);
    if (w.revoked.count(s.lease) || w.shared_key(r->names[i], s.lease) || s.client_closed) w.h.end_hold(id, w.h.last_seq());
  }
  // All or none, the other way: told it holds, it holds every part (while their sessions live),
  // one token per part.
  const auto tokens = all.fencing_tokens();
  auto taken = all.names();
  auto listed = r->names;
  std::sort(taken.begin(), taken.end());
  std::sort(listed.begin(), listed.end());
  const bool every_part = tokens.size() == r->names.size() && taken == listed &&
                          std::all_of(tokens.begin(), tokens.end(), [](std::int64_t t) { return t > 0; });
  if (parts_usable && (!all || !every_part))
    w.h.fail({"(m1) all or none: a multi_lock told it holds holds every part", r->names[0],
              "multi" + std::to_string(r->id) + " (" + joined(r->names) + ") was told it holds, but its hold says " +
                  (all ? "it holds " + std::to_string(tokens.size()) + " parts (" + joined(all.names()) + ")"
                       : std::string("it does not hold")),
              w.h.last_seq(), w.h.last_seq(), r->holds});
  std::vector<compare> fences;
  if (write || probe) fences = all.fence();
  if (write) co_await multi_write(w, k, r, fences, 0);
  co_await sleep_for(hold_for);
  // The multi_lock may have been destroyed or moved meanwhile (multi_churn): the hold goes on.
  if (how == 1) {
    destroy_multi(w, *r, k, "its holder destroys it, and goes on holding");
    // Destroying the multi_lock and its parts leaves the hold alone: its fences still pass.
    if (write) co_await multi_write(w, k, r, fences, 1);
  }
  if (how == 4) {
    // No release: the hold ends as far as anyone here can tell at the drop (see lock_round).
    const long dropped_at = w.h.note(k, "multi.drop", r->names[0], r->id, s0->id, s0->lease, "the hold destroyed without a release");
    for (std::size_t i = 0; i < r->names.size(); ++i) {
      w.h.end_hold(r->holds[i], dropped_at);
      w.touch(recipe::mutex, r->names[i], r->sessions[i]->lease, r->sessions[i]->id, dropped_at);
    }
    all = multi_lock::hold();
    bool ended_here = true;
    for (auto id : r->holds) ended_here = ended_here && w.h.find_hold(id) && w.h.find_hold(id)->end == dropped_at;
    if (probe && ended_here) note_dropped_fences(w, r->holds[0], r->names, r->session_ids(), fences);
    co_return;
  }
  auto rel = w.h.invoke(k, "multi.release", r->names[0], r->id, s0->id, s0->lease, static_cast<std::int64_t>(r->names.size()));
  w.op_sessions[rel] = r->session_ids();
  const long released_at = w.h.last_seq();
  for (std::size_t i = 0; i < r->names.size(); ++i) {
    w.h.end_hold(r->holds[i], released_at);
    w.touch(recipe::mutex, r->names[i], r->sessions[i]->lease, r->sessions[i]->id, released_at);
  }
  const bool usable = r->usable();
  auto done = std::make_shared<callback_result>(w.executor());
  all.async_release([done](error_code e) { done->set(e); });
  if (how == 2) destroy_multi(w, *r, k, "destroyed in the turn its hold's release started");
  if (how == 3 && r->alive) move_multi(w, *r, 0, nullptr, 0, "in the turn its hold's release started");
  auto waiting = done->wait();
  auto re = co_await std::move(waiting);
  w.h.complete(rel, re ? re.message() : "ok");
  // Destroying or moving the multi_lock (here, in the turn the release started, or by the churn)
  // releases nothing: the hold releases once, through itself.
  bool judged = usable;
  for (std::size_t i = 0; i < r->names.size(); ++i) {
    auto lease = r->sessions[i]->lease;
    judged = judged && !w.revoked.count(lease) && !w.expired.count(lease) && !w.shared_key(r->names[i], lease);
  }
  if ((re == error::not_locked || re == asio::error::bad_descriptor) && judged)
    w.h.fail({"a multi_lock hold releases through itself (never not_locked), whatever became of its multi_lock", r->names[0],
              "actor " + std::to_string(k) + "'s release of a hold of multi" + std::to_string(r->id) + " (" +
                  (r->alive ? "alive" : "destroyed") + ", moved " + std::to_string(r->moves) + " times) failed with " + re.message(),
              released_at, w.h.last_seq(), r->holds});
  bool ended_here = true;
  for (auto id : r->holds) ended_here = ended_here && w.h.find_hold(id) && w.h.find_hold(id)->end == released_at;
  if (re || !probe || !usable || !r->usable() || !ended_here) co_return;
  // Once released, the fences never pass again.
  txn t;
  for (auto& f : fences) t.when(f);
  t.then(txn_op::put(w.data_key(r->names[0], "stale/" + std::to_string(r->holds[0])), ""));
  auto pop = w.h.invoke(k, "stale_probe", r->names[0], r->id, s0->id, s0->lease);
  auto probing = w.clients[static_cast<std::size_t>(s0->client)]->async_txn(t, asio::as_tuple(use_awaitable));
  auto [pec, pr] = co_await std::move(probing);
  w.h.complete(pop, pec ? "outcome unknown: " + pec.message() : pr.succeeded ? "passed" : "rejected", r->holds[0]);
}

inline asio::awaitable<void> multi_actor(world& w, std::shared_ptr<multi_case> mc, int k, std::uint64_t seed) {
  chooser c(seed);
  ml_ptr mine;
  while (!w.stopping && clock_type::now() < w.deadline) {
    co_await multi_round(w, *mc, k, c, mine);
    co_await sleep_for(ms(c.between(0, 20)));
  }
  if (mine) destroy_multi(w, *mine, k, "the actor stops");
}

/// Destroys and moves multi_locks (and their parts) while a lock on them is pending, or while
/// they hold: the destroyer and the mover of the multi_locks.
inline asio::awaitable<void> multi_churn(world& w, std::shared_ptr<multi_case> mc, std::uint64_t seed) {
  chooser c(seed);
  while (!w.stopping && clock_type::now() < w.deadline) {
    co_await sleep_for(ms(c.between(150, 900)));
    // 0 destroy; 1 move construct; 2 into a fresh one; 3 over a busy one; 4 move a part.
    const int act = c.weighted({30, 25, 15, 15, 15});
    const bool holder = c.chance(25);
    const int x = c.between(0, 1 << 20);
    std::vector<ml_ptr> from, busy;
    for (auto& r : mc->recs)
      if (r->alive && (holder ? !r->holds.empty() && r->pending == 0 : r->pending > 0)) from.push_back(r);
    if (from.empty()) continue;
    auto& r = *from[static_cast<std::size_t>(x) % from.size()];
    const std::string why = holder ? "its holder holding or between rounds" : "a lock pending";
    if (act == 0) {
      destroy_multi(w, r, -1, "destroyed with " + why);
      continue;
    }
    for (auto& t : mc->recs)
      if (t->alive && t.get() != &r && t->pending > 0) busy.push_back(t);
    ml_rec* target = busy.empty() ? nullptr : busy[static_cast<std::size_t>(x) % busy.size()].get();
    move_multi(w, r, act == 4 ? 3 : act - 1, target, static_cast<std::size_t>(x) % r.parts.size(), why);
  }
}

/// The multi_lock case: plain mutex callers (`lc`, on the three names) and multi_lock callers,
/// judged together by the mutex's invariants (holds of both kinds on a name exclude each other;
/// the fences of both kinds' holds never interleave), and for liveness at the end.
inline asio::awaitable<void> run_multi_case(world& w, lock_case lc, int multi_actors) {
  auto mc = std::make_shared<multi_case>();
  mc->names = lc.names;
  mc->actors = multi_actors;
  std::function<void(world&)> also = [mc](world& wo) {
    std::vector<std::uint64_t> seeds;
    for (int i = 0; i <= mc->actors; ++i) seeds.push_back(wo.choose.next());
    for (int k = 0; k < mc->actors; ++k) wo.spawn(multi_actor(wo, mc, 100 + k, seeds[static_cast<std::size_t>(k)]));
    wo.spawn(multi_churn(wo, mc, seeds.back()));
  };
  auto running = run_lock_case(w, std::move(lc), std::move(also));
  co_await std::move(running);
  w.tally["multi_locks"] = static_cast<long>(mc->recs.size());
}

}  // namespace coetcd::test::explore
