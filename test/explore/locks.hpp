// The explorer's lock callers (test_explore, test_explore_more): actors that lock, try and release
// mutexes and rw_mutexes (readers and writers), acquire and give back semaphore permits, campaign
// and resign, through objects that several of them share, cut short at random; each actor owns
// the holds it is handed, writes through their fences and probes them once over, releases them,
// or drops them without a release (they end in the background); objects destroyed with
// operations pending (in the very turn a release starts, or a grant lands, among others) and
// while their holds go on; moved and their clients closed too, when the case asks for it.
#pragma once

#include "check.hpp"
#include "churn.hpp"
#include "schedule.hpp"

namespace coetcd::test::explore {

/// What one lock case explores: a recipe on a few names, by `actors` callers.
struct lock_case {
  recipe kind = recipe::mutex;
  int actors = 10;
  std::vector<std::string> names;
  std::map<std::string, std::int64_t> permits;  // a semaphore's, by name
  session_mix sessions;
  bool moves = false;     // a mover (churn.hpp) moves objects with acquisitions pending
  bool closes = false;    // a closer (churn.hpp) closes whole clients and opens them again
  bool live_end = false;  // the end judges liveness (drain_live) before anything is cut short
  /// How long the end waits for the keys of live sessions to go: a lock txn answered late (a
  /// member paused or cut off with it) may put its key after the clean-up's delete, and the
  /// session sweeps such a key 1, 4 and 14 s after (member faults need that last sweep).
  std::chrono::milliseconds keys_settle{3000};
};

inline const char* acquire_name(recipe k, bool try_only, bool shared) {
  switch (k) {
    case recipe::mutex: return try_only ? "try_lock" : "lock";
    case recipe::semaphore: return try_only ? "try_acquire" : "acquire";
    case recipe::election: return "campaign";
    case recipe::rw_mutex:
      if (shared) return try_only ? "try_lock_shared" : "lock_shared";
      return try_only ? "try_lock" : "lock";
  }
  return "?";
}

inline const char* release_name(recipe k, bool shared) {
  if (k == recipe::rw_mutex) return shared ? "release_shared" : "release";
  return k == recipe::election ? "resign" : "release";
}

/// Acquires through `o`, into `into` (the actor's): the hold the operation hands back, empty on
/// error. `o` is read as the operation starts, in the caller's turn.
inline asio::awaitable<error_code> start_acquire(obj_rec& o, bool try_only, bool shared, std::int64_t n,
                                                 const std::string& value, asio::cancellation_slot slot,
                                                 actor_hold& into) {
  auto token = asio::bind_cancellation_slot(slot, asio::as_tuple(use_awaitable));
  into.kind = o.kind;
  into.shared = shared;
  error_code ec;
  if (o.kind == recipe::rw_mutex) {
    if (shared && try_only) std::tie(ec, into.r) = co_await o.rw->async_try_lock_shared(token);
    else if (shared) std::tie(ec, into.r) = co_await o.rw->async_lock_shared(token);
    else if (try_only) std::tie(ec, into.w) = co_await o.rw->async_try_lock(token);
    else std::tie(ec, into.w) = co_await o.rw->async_lock(token);
  } else if (o.kind == recipe::mutex) {
    if (try_only) std::tie(ec, into.m) = co_await o.m->async_try_lock(token);
    else std::tie(ec, into.m) = co_await o.m->async_lock(token);
  } else if (o.kind == recipe::semaphore) {
    if (try_only) std::tie(ec, into.sem) = co_await o.sem->async_try_acquire(n, token);
    else std::tie(ec, into.sem) = co_await o.sem->async_acquire(n, token);
  } else {
    std::tie(ec, into.el) = co_await o.el->async_campaign(value, token);
  }
  co_return ec;
}

/// After an acquisition failed or was cut short: it handed back no hold (a grant that met the
/// cut is given back in the background, not to the caller).
inline void expect_no_hold(world& w, int k, const obj_rec& o, const actor_hold& got, error_code ec) {
  if (!got) return;
  auto& s = *w.sessions[static_cast<std::size_t>(o.session)];
  auto seq = w.h.note(k, "check.held", o.name, o.id, s.id, s.lease, "a hold handed back with " + ec.message());
  w.h.fail({"a failed or cancelled acquisition never holds", o.name,
            "actor " + std::to_string(k) + "'s acquisition through obj" + std::to_string(o.id) + " completed with " +
                ec.message() + " and handed back a hold that says it holds",
            seq - 1, seq, {}});
}

/// A write guarded by the hold's fence: the name's register, and a log key named by the hold
/// (whose create revision is the txn's), so that etcd's revisions show whose writes passed.
inline asio::awaitable<void> fenced_write(world& w, int k, long hold_id, obj_ptr o, sess_rec& s, compare fence, int i) {
  const auto name = o->name;
  const auto log = w.data_key(name, "log/" + std::to_string(hold_id) + "-" + std::to_string(i));
  auto t = txn().when(std::move(fence)).then(txn_op::put(w.data_key(name, "register"), "hold " + std::to_string(hold_id)))
               .then(txn_op::put(log, ""));
  auto op = w.h.invoke(k, "fenced_write", name, o->id, s.id, s.lease);
  auto writing = w.clients[static_cast<std::size_t>(s.client)]->async_txn(t, asio::as_tuple(use_awaitable));
  auto [ec, r] = co_await std::move(writing);
  if (ec) {
    w.h.complete(op, "outcome unknown: " + ec.message(), hold_id);
    co_return;
  }
  w.h.complete(op, r.succeeded ? "applied" : "rejected", hold_id);
  (r.succeeded ? w.fence_told_ok : w.fence_told_rejected).insert(log);
  auto* h = w.h.find_hold(hold_id);
  // Rejected while nothing has ended the hold, on a lease no other session shares, with the
  // session alive: the caller was told it holds while its key was gone or passed on. (Whatever
  // became of the object: a hold does not end with it.)
  if (!r.succeeded && h && h->end == never && !w.lease_shared(s.lease) && s.usable())
    w.h.fail({"no caller told it holds after its key is gone", name,
              "the fenced write of " + hold_text(*h) + " was rejected while it held", h->start, w.h.last_seq(),
              {hold_id}});
}

/// Once a hold is over (its release succeeded): its fence never passes again.
inline asio::awaitable<void> stale_probe(world& w, int k, long hold_id, obj_ptr o, sess_rec& s, compare fence) {
  const auto name = o->name;
  auto t = txn().when(std::move(fence)).then(txn_op::put(w.data_key(name, "stale/" + std::to_string(hold_id)), ""));
  auto op = w.h.invoke(k, "stale_probe", name, o->id, s.id, s.lease);
  auto probing = w.clients[static_cast<std::size_t>(s.client)]->async_txn(t, asio::as_tuple(use_awaitable));
  auto [ec, r] = co_await std::move(probing);
  w.h.complete(op, ec ? "outcome unknown: " + ec.message() : r.succeeded ? "passed" : "rejected", hold_id);
  if (!ec && r.succeeded)
    w.h.fail({"(c) a fenced write passes only for the hold that built it", name,
              "the fence of hold " + std::to_string(hold_id) + " passed after its release", w.h.last_seq() - 1,
              w.h.last_seq(), {hold_id}});
}

/// Another object of the name with an acquisition pending, of the same session when there is one
/// (mostly): a destroy in the turn a release starts meets a local hand-off there.
inline obj_ptr pick_victim(world& w, chooser& c, const obj_ptr& o, bool prefer_same_session) {
  const int x = c.between(0, 1 << 20);
  std::vector<obj_ptr> same, other;
  for (auto& x : w.objects)
    if (x->alive && x != o && x->pending > 0 && x->name == o->name) (x->session == o->session ? same : other).push_back(x);
  auto& from = !same.empty() && (prefer_same_session || other.empty()) ? same : other;
  return from.empty() ? nullptr : from[static_cast<std::size_t>(x) % from.size()];
}

/// A hold dropped with a fence built: its fence is checked at the end (check_dropped_fences), once
/// the release the drop began in the background has had time to land.
inline void note_dropped_fences(world& w, long hold_id, std::vector<std::string> names, std::vector<int> sessions,
                                std::vector<compare> fences) {
  if (fences.empty()) return;
  w.dropped.push_back({hold_id, std::move(names), std::move(sessions), std::move(fences)});
}

/// One round of one actor: choose a session, name and object, acquire (maybe cut short), hold
/// (maybe writing through the fence), then end the hold in one of several ways.
inline asio::awaitable<void> lock_round(world& w, const lock_case& lc, int k, chooser& c, int& rounds) {
  auto* sp = w.pick_usable(c);
  const auto& name = lc.names[static_cast<std::size_t>(c.between(0, static_cast<int>(lc.names.size()) - 1))];
  const std::int64_t permits = lc.kind == recipe::semaphore ? lc.permits.at(name) : 0;
  // Every choice of the round is drawn now, whatever happens after.
  const bool try_only = lc.kind != recipe::election && c.chance(20);
  const std::int64_t n = lc.kind == recipe::semaphore ? c.between(1, static_cast<int>(permits)) : 1;
  const auto plan = draw_cut(c);
  const int writes = lc.kind != recipe::semaphore && c.chance(50) ? c.between(1, 2) : 0;
  const auto hold_for = ms(c.between(0, 25));
  // 0: release; 1: release and destroy a waiting object in that turn; 2: destroy the object,
  // then go on holding (one more fenced write) and release; 3: release and destroy this object in
  // that turn; 4: drop the hold without releasing it (it ends in the background), maybe
  // destroying a waiting object in that turn.
  const int how = c.weighted({45, 25, 10, 10, 10});
  const bool same_session = c.chance(80), probe = c.chance(60);
  const bool shared = lc.kind == recipe::rw_mutex && c.chance(55);  // a reader (drawn for rw_mutex only)
  const bool drop_meets_victim = c.chance(50);
  const auto value = "actor " + std::to_string(k) + " round " + std::to_string(++rounds);
  if (!sp) {
    co_await sleep_for(ms(50));
    co_return;
  }
  auto& s = *sp;
  auto o = w.object_for(c, lc.kind, s, name, permits);
  if (!o) {
    co_await sleep_for(ms(5));
    co_return;
  }
  if (lc.kind == recipe::election) o->busy = true;  // one operation at a time per election
  auto op = w.h.invoke(k, acquire_name(lc.kind, try_only, shared), name, o->id, s.id, s.lease, n);
  w.touch(lc.kind, name, s.lease, s.id, w.h.last_seq());
  ++o->pending;
  // The actor's hold: this round owns it (the world only looks at it, weakly).
  auto mine = std::make_shared<actor_hold>();
  error_code ec;
  {
    canceller cut(w, plan);
    auto acquiring = start_acquire(*o, try_only, shared, n, value, cut.slot(), *mine);
    ec = co_await std::move(acquiring);
  }
  --o->pending;
  w.acquisition_done(*o);
  if (ec) {
    w.h.complete(op, ec.message());
    o->busy = false;
    // Nothing but a cut or the object's destruction aborts an acquisition: a move does not.
    if (lc.moves && ec == asio::error::operation_aborted && !plan.armed && o->alive && !w.stopping &&
        !w.lease_shared(s.lease))
      w.h.fail({"a move does not abort the acquisitions pending on the object", name,
                "actor " + std::to_string(k) + "'s " + acquire_name(lc.kind, try_only, shared) + " on obj" +
                    std::to_string(o->id) + " (moved " + std::to_string(o->moves) +
                    " times) completed with operation_aborted, never cut short, the object alive",
                w.h.last_seq() - 1, w.h.last_seq(), {}});
    expect_no_hold(w, k, *o, *mine, ec);
    co_return;
  }
  w.h.complete(op, "ok");
  if (!o->alive) {
    // Told it holds by an object destroyed before its handler ran: the grant should have been
    // given back. The hold is the actor's all the same: dropped here, it ends in the background.
    auto id = w.h.begin_hold(name, k, o->id, s.id, s.lease, n, true);
    w.h.fail({"an acquisition pending when its object is destroyed completes with operation_aborted", name,
              "actor " + std::to_string(k) + " was told it holds through obj" + std::to_string(o->id) +
                  ", destroyed at #" + std::to_string(o->destroyed_at),
              o->destroyed_at, w.h.last_seq(), {id}});
    w.h.end_hold(id, w.h.note(k, "drop", name, o->id, s.id, s.lease, "told by a destroyed object"));
    mine->drop();
    co_return;
  }
  const auto id = w.h.begin_hold(name, k, o->id, s.id, s.lease, n);
  if (shared) w.h.mark_shared(id);
  w.holding[id] = mine;
  o->told += n;
  const int moves_before = o->moves;
  // Granted under a lease a close had revoked already (by another client's session of the lease,
  // whose revoke this client could not see yet), or on a key another session of the lease uses
  // too: over as it begins.
  // Likewise on a client closed meanwhile (churn.hpp): nothing renews the lease from there.
  if (w.revoked.count(s.lease) || w.shared_key(name, s.lease) || s.client_closed) w.h.end_hold(id, w.h.last_seq());

  std::optional<compare> fence;
  for (int i = 0; i < writes; ++i) {
    if (!fence) fence = mine->fence();
    co_await fenced_write(w, k, id, o, s, *fence, i);
    co_await sleep_for(hold_for);
  }
  if (writes == 0) co_await sleep_for(hold_for);
  // The object may have been destroyed or moved meanwhile (the destroyer, the mover): the hold
  // is the actor's and goes on.

  if (how == 2) {
    w.destroy(o, k, "its holder destroys it, and goes on holding");
    // Destroying the object leaves the hold alone: its fence still passes.
    if (fence) co_await fenced_write(w, k, id, o, s, *fence, writes);
  }
  auto victim = pick_victim(w, c, o, same_session);  // drawn every time, used for how 1 and 4
  if (how != 1 && !(how == 4 && drop_meets_victim)) victim = nullptr;
  if (how == 4) {
    // No release: the hold ends as far as anyone here can tell at the drop, at the latest when
    // its release in the background lands (as a release's hold ends at its call); its key, and
    // so its fence, may outlive the drop for a moment, which nothing here counts against it.
    const long dropped_at = w.h.note(k, "drop", name, o->id, s.id, s.lease, "the hold destroyed without a release");
    w.h.end_hold(id, dropped_at);
    w.touch(lc.kind, name, s.lease, s.id, dropped_at);
    w.holding.erase(id);
    o->told -= n;
    mine->drop();
    if (victim) w.destroy(victim, k, "destroyed in the turn another holder's hold was dropped");
    if (o->alive) o->busy = false;
    const auto* ended = w.h.find_hold(id);
    if (fence && probe && !shared && ended && ended->end == dropped_at) note_dropped_fences(w, id, {name}, {s.id}, {*fence});
    co_return;
  }
  auto rel = w.h.invoke(k, release_name(lc.kind, shared), name, o->id, s.id, s.lease, n);
  const long released_at = w.h.last_seq();
  w.h.end_hold(id, released_at);
  w.touch(lc.kind, name, s.lease, s.id, released_at);
  o->told -= n;
  auto done = std::make_shared<callback_result>(w.executor());
  mine->release([done](error_code e) { done->set(e); });
  if (victim) w.destroy(victim, k, "destroyed in the turn another holder's release started");
  if (how == 3) w.destroy(o, k, "destroyed in the turn its hold's release started");
  auto waiting = done->wait();
  auto re = co_await std::move(waiting);
  w.h.complete(rel, re ? re.message() : "ok");
  w.holding.erase(id);
  if (o->alive) o->busy = false;
  // A hold is its actor's: moving or destroying its object while it held leaves it to be
  // released through it (not_locked is for a hold released already; bad_descriptor for none).
  const bool object_changed = o->moves > moves_before || !o->alive;
  if ((re == error::not_locked || re == asio::error::bad_descriptor) && object_changed && s.usable() &&
      !w.revoked.count(s.lease) && !w.expired.count(s.lease) && !w.shared_key(name, s.lease))
    w.h.fail({"a hold is released through itself, whatever became of its object", name,
              "actor " + std::to_string(k) + "'s " + release_name(lc.kind, shared) + " of a hold taken through obj" +
                  std::to_string(o->id) + (o->alive ? ", moved while it held," : ", destroyed while it held,") +
                  " failed with " + re.message(),
              w.h.find_hold(id) ? w.h.find_hold(id)->start : released_at, w.h.last_seq(), {id}});
  // Probed only when the release ended the hold in a live session: a hold an orphan ended keeps
  // its key, and so its fence, until the lease goes. Not a reader's: its fence holds while any
  // reader of its session holds the read key.
  const auto* ended = w.h.find_hold(id);
  if (!re && fence && probe && !shared && s.usable() && ended && ended->end == released_at)
    co_await stale_probe(w, k, id, o, s, *fence);
}

// The case is shared: an actor that outlives its case's coroutine (a hang) still reads it.
inline asio::awaitable<void> lock_actor(world& w, std::shared_ptr<const lock_case> lc, int k, std::uint64_t seed) {
  chooser c(seed);
  int rounds = 0;
  while (!w.stopping && clock_type::now() < w.deadline) {
    co_await lock_round(w, *lc, k, c, rounds);
    co_await sleep_for(ms(c.between(0, 20)));
  }
}

/// Which holds of one name may not overlap, by recipe (not a semaphore's: see check_permits).
inline conflict_fn conflict_of(recipe k) {
  if (k == recipe::mutex) return mutex_conflict;
  if (k == recipe::rw_mutex) return rw_conflict;
  return election_conflict;
}

/// The seeds a lock case draws beyond its actors' (and its session steps', link faults' and
/// destroyer's): the churn's, drawn only when the case asks for churn, so that cases without it
/// make the same draws as before.
struct churn_seeds {
  std::uint64_t move = 0, close = 0;
};
inline churn_seeds draw_churn_seeds(world& w, const lock_case& lc) {
  churn_seeds c;
  if (lc.moves || lc.closes) {
    c.move = w.choose.next();
    c.close = w.choose.next();
  }
  return c;
}

/// Starts a lock case: two sessions per client, the deadline, then the actors, the session steps,
/// link faults (when `links`: the world's proxies) and the destroyer, from `seeds` (actors + 3),
/// and the churn `lc` asks for (moves, client closes). `also(w)` starts callers of other kinds on
/// the same names (multi_lock.hpp), whose holds are judged with them.
inline asio::awaitable<void> start_lock_case(world& w, const lock_case& lc, std::vector<std::uint64_t> seeds, bool links,
                                             churn_seeds churn = {}, std::function<void(world&)> also = nullptr) {
  for (int c = 0; c < static_cast<int>(w.clients.size()); ++c)
    for (int i = 0; i < 2; ++i) co_await w.new_session(c);
  w.deadline = clock_type::now() + std::chrono::milliseconds(static_cast<long>(w.seconds * 1000));
  auto shared = std::make_shared<const lock_case>(lc);
  for (int k = 0; k < capped(lc.actors); ++k) w.spawn(lock_actor(w, shared, k, seeds[static_cast<std::size_t>(k)]));
  w.spawn(session_chaos(w, seeds[static_cast<std::size_t>(lc.actors)], lc.sessions));
  if (links) w.spawn(link_faults(w, seeds[static_cast<std::size_t>(lc.actors) + 1], false));
  w.spawn(destroyer(w, seeds[static_cast<std::size_t>(lc.actors) + 2]));
  if (lc.moves) w.spawn(mover(w, churn.move));
  if (lc.closes) w.spawn(client_closer(w, churn.close, 2));
  if (also) also(w);
}

/// The checks of a lock case once it drained (`ended`: every coroutine did).
inline asio::awaitable<void> check_lock_case(world& w, const lock_case& lc, bool ended) {
  w.h.discount_holds_if([&](const hold& x) { return w.expired.count(x.lease) > 0; });

  if (lc.kind == recipe::semaphore) {
    check_permits(w.h, lc.permits);
  } else {
    const conflict_fn conflict = conflict_of(lc.kind);
    const char* invariant =
        lc.kind == recipe::mutex      ? "(a) at most one holder per mutex name (per lease; callers of one session apart)"
        : lc.kind == recipe::rw_mutex ? "(a) a writer holds an rw_mutex name alone, readers only beside readers (per lease)"
                                      : "(d) at most one leader per election name (per lease)";
    check_exclusive(w.h, invariant, conflict);
    for (auto& name : lc.names)
      if (ended) co_await check_fences(w, name, conflict);
  }
  if (ended) co_await check_dropped_fences(w, lc.keys_settle);
  if (ended) co_await check_nothing_left(w, lc.keys_settle);
}

/// A lock case from start to end: sessions, actors, session steps, link faults and the
/// destroyer (and the churn it asks for) until the deadline; then every waiting acquisition is
/// cut short (after the liveness window, with live_end), and the checks run. `also`: see
/// start_lock_case.
inline asio::awaitable<void> run_lock_case(world& w, lock_case lc, std::function<void(world&)> also = nullptr) {
  std::vector<std::uint64_t> seeds;
  for (int i = 0; i < lc.actors + 3; ++i) seeds.push_back(w.choose.next());
  const auto churn = draw_churn_seeds(w, lc);
  auto starting = start_lock_case(w, lc, seeds, true, churn, std::move(also));
  co_await std::move(starting);
  bool ended = false;
  if (lc.live_end) {
    // The liveness window: a session's TTL for keys a gone session left, and time to hand over.
    auto draining = drain_live(w, std::chrono::duration_cast<ms>(w.session_ttl) + ms(7000));
    ended = co_await std::move(draining);
  } else {
    auto draining = w.drain();
    ended = co_await std::move(draining);
  }
  auto checking = check_lock_case(w, lc, ended);
  co_await std::move(checking);
}

}  // namespace coetcd::test::explore
