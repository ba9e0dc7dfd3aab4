// The explorer's churn (test_explore_more): recipe objects moved into new variables while an
// acquisition on them is pending or a grant lands, whole clients closed under their sessions and
// objects and opened again, and an end of case that lets every waiter be granted before anything
// is cut short, so that a deadlock shows as a waiter nobody wakes.
#pragma once

#include "check.hpp"
#include "schedule.hpp"

namespace coetcd::test::explore {

/// Moves `*p` into a new object: by move construction, or (`assign`) by move assignment into a
/// fresh object `make()` returns, which holds nothing and waits for nothing.
template <class T, class Make>
void move_into_new(std::unique_ptr<T>& p, bool assign, Make make) {
  if (!assign) {
    p = std::make_unique<T>(std::move(*p));  // the moved-from object is destroyed here
    return;
  }
  auto fresh = make();
  *fresh = std::move(*p);
  p = std::move(fresh);
}

/// Moves object `o` into another variable; its callers go on through the new one (their pending
/// acquisitions with it; their holds are theirs, whatever the object does). `target`: an object
/// of the same kind, session and name that the move is assigned over: it aborts what was pending
/// on it, as its destruction does (the holds taken through it go on), so it counts as destroyed
/// here. Else `assign`: into a fresh idle object (of a spare name), or by move construction.
inline void move_object(world& w, const obj_ptr& o, bool assign, const obj_ptr& target, const std::string& why) {
  auto& s = *w.sessions[static_cast<std::size_t>(o->session)];
  const auto spare = w.name("spare");
  const std::string how = target ? "move-assigned over obj" + std::to_string(target->id)
                                 : assign ? "move-assigned into a fresh object" : "move-constructed";
  w.h.note(-1, "move", o->name, o->id, s.id, s.lease,
           how + ", " + why + " (" + std::to_string(o->pending) + " pending, " + std::to_string(o->told) + " told)");
  if (target) {
    // The target's variable takes the object over; the records then swap variables, so the
    // moved-from one is what the target's destruction below destroys.
    auto over = [](auto& from, auto& to) {
      *to = std::move(*from);
      std::swap(from, to);
    };
    switch (o->kind) {
      case recipe::mutex: over(o->m, target->m); break;
      case recipe::semaphore: over(o->sem, target->sem); break;
      case recipe::election: over(o->el, target->el); break;
      case recipe::rw_mutex: over(o->rw, target->rw); break;
    }
    w.destroy(target, -1, "assigned over by obj" + std::to_string(o->id) + "'s move");
    ++w.tally["moves assigned over another object"];
  } else {
    switch (o->kind) {
      case recipe::mutex: move_into_new(o->m, assign, [&] { return std::make_unique<coetcd::mutex>(s.s, spare); }); break;
      case recipe::semaphore: move_into_new(o->sem, assign, [&] { return std::make_unique<semaphore>(s.s, spare, 1); }); break;
      case recipe::election: move_into_new(o->el, assign, [&] { return std::make_unique<election>(s.s, spare); }); break;
      case recipe::rw_mutex: move_into_new(o->rw, assign, [&] { return std::make_unique<coetcd::rw_mutex>(s.s, spare); }); break;
    }
  }
  ++o->moves;
  ++w.tally["moves"];
}

/// Moves objects while an acquisition on them is pending: now and then it watches every object
/// one event-loop turn at a time and moves the first whose grant has landed untold (a move in
/// that very turn); otherwise one with an acquisition pending, or one whose callers hold.
inline asio::awaitable<void> mover(world& w, std::uint64_t seed) {
  chooser c(seed);
  auto ex = co_await asio::this_coro::executor;
  while (!w.stopping && clock_type::now() < w.deadline) {
    co_await sleep_for(ms(c.between(150, 900)));
    // Every choice first: 0 move construction, 1 into a fresh object, 2 over another of its
    // session and name (one with an acquisition pending, when there is one).
    const int how = c.weighted({45, 25, 30});
    const bool grant_turn = c.chance(40), holder = c.chance(25);
    const auto look = ms(c.between(30, 300));
    const int x = c.between(0, 1 << 20);
    obj_ptr picked;
    std::string why = "an acquisition pending";
    auto until = clock_type::now() + look;
    while (grant_turn && !picked && !w.stopping && clock_type::now() < until) {
      auto turn = asio::post(ex, use_awaitable);
      co_await std::move(turn);
      for (auto& o : w.objects)
        if (!picked && o->granted_untold()) picked = o;
      if (picked) why = "in the turn a grant landed untold";
    }
    if (w.stopping) break;
    if (!picked) {
      std::vector<obj_ptr> from;
      for (auto& o : w.objects)
        if (o->alive && (holder ? o->told > 0 : o->pending > 0)) from.push_back(o);
      if (from.empty()) continue;
      picked = from[static_cast<std::size_t>(x) % from.size()];
      if (holder) why = "its callers holding";
    }
    obj_ptr target;
    if (how == 2 && picked->kind != recipe::election) {  // one election per session and name
      std::vector<obj_ptr> busy, idle;
      for (auto& o : w.objects)
        if (o->alive && o != picked && o->kind == picked->kind && o->session == picked->session && o->name == picked->name)
          (o->pending > 0 ? busy : idle).push_back(o);
      auto& from = busy.empty() ? idle : busy;
      if (!from.empty()) target = from[static_cast<std::size_t>(x) % from.size()];
    }
    move_object(w, picked, how != 0, target, why);
  }
}

/// Whether entry `e` (an invocation) runs on client `c` alone, through sessions in `gone` or
/// the client itself. Not a multi_lock's whose parts are partly elsewhere: it fails for a part
/// taken first only once the part it waits for is granted (as documented), which may take long.
inline bool concerns(const world& w, const entry& e, int c, const std::set<int>& gone) {
  if (auto it = w.op_sessions.find(e.op); it != w.op_sessions.end())
    return std::all_of(it->second.begin(), it->second.end(), [&](int s) { return gone.count(s) > 0; });
  if (e.session >= 0 && gone.count(e.session)) return true;
  auto it = w.op_client.find(e.op);
  return it != w.op_client.end() && it->second == c;
}

/// Closes client `c` under everything made from it and opens a new one in its place, with
/// `sessions` new sessions. Its sessions end as orphans do: their keys live on with their leases,
/// which it renews no more (a session of another client that adopted one still does); their
/// callers' holds end here. Every operation pending on it must complete within 5 s.
inline asio::awaitable<void> close_client(world& w, int c, int sessions) {
  std::set<int> gone;
  for (auto& s : w.sessions)
    if (s->client == c && !s->client_closed) gone.insert(s->id);
  std::vector<entry> pending;
  for (auto& e : w.h.open_operations())
    if (concerns(w, e, c, gone)) pending.push_back(e);
  const auto seq = w.h.note(-1, "client.close", "", -1, -1, 0,
                            "client " + std::to_string(c) + ": " + std::to_string(gone.size()) + " sessions, " +
                                std::to_string(pending.size()) + " operations pending");
  for (int id : gone) w.sessions[static_cast<std::size_t>(id)]->client_closed = true;
  w.h.end_holds_if([&](const hold& x) { return gone.count(x.session) > 0; }, seq);
  for (auto& told : w.on_client_close) told(c, seq);
  auto& slot = w.clients[static_cast<std::size_t>(c)];
  slot->close();
  w.retired.push_back(std::move(slot));
  slot = w.make_client(c);
  ++w.client_gen[static_cast<std::size_t>(c)];
  ++w.tally["client closes"];
  w.tally["operations pending on a closed client"] += static_cast<long>(pending.size());
  for (int i = 0; i < sessions; ++i) co_await w.new_session(c);
  const auto until = clock_type::now() + std::chrono::seconds(5);
  auto open = [&] {
    return std::any_of(pending.begin(), pending.end(), [&](const entry& e) { return !w.h.completed(e.op); });
  };
  while (open() && clock_type::now() < until) co_await sleep_for(ms(50));
  for (auto& e : pending)
    if (!w.h.completed(e.op))
      w.h.fail({"every operation pending on a client that closes completes within 5 s", e.name,
                "still pending 5 s after client " + std::to_string(c) + " closed (#" + std::to_string(seq) +
                    "): " + history::describe(e),
                e.seq, w.h.last_seq(), {}});
}

/// Closes a client now and then (the first after 0.8–2 s) until 2 s before the deadline.
inline asio::awaitable<void> client_closer(world& w, std::uint64_t seed, int sessions) {
  chooser c(seed);
  co_await sleep_for(ms(c.between(800, 2000)));
  while (!w.stopping && clock_type::now() < w.deadline - std::chrono::seconds(2)) {
    const int which = c.between(0, static_cast<int>(w.clients.size()) - 1);
    const auto pause = ms(c.between(1500, 4000));
    co_await close_client(w, which, sessions);
    co_await sleep_for(pause);
  }
}

/// Whether an operation still pending at the end can be judged for liveness: not when a lease it
/// waits under is shared by sessions (they share keys, and either may take one from under the
/// other, as documented) or was lost to a fault.
inline bool judged_live(const world& w, const entry& e) {
  std::vector<std::int64_t> leases{e.lease};
  if (auto it = w.op_sessions.find(e.op); it != w.op_sessions.end())
    for (int s : it->second) leases.push_back(w.sessions[static_cast<std::size_t>(s)]->lease);
  for (auto l : leases)
    if (l && (w.lease_shared(l) || w.expired.count(l))) return false;
  return true;
}

/// The end of a case that judges liveness: at the deadline no new round starts, but nothing is
/// cut short for `window` (the callers' own cuts still fire), so every operation still pending
/// must complete as the others release: one that does not is a deadlock or a waiter nobody
/// wakes. Leases of which a session is gone without a revoke (orphaned, client closed) while
/// another session keeps them alive are revoked first: the keys the gone one left would stay
/// for good, as documented. Then drain() as usual.
inline asio::awaitable<bool> drain_live(world& w, ms window) {
  while (clock_type::now() < w.deadline) co_await sleep_for(ms(100));
  w.stopping = true;
  std::set<std::int64_t> stale;
  for (auto& s : w.sessions)
    if (!s->closed && (s->orphaned || s->client_closed))
      for (auto& o : w.sessions)
        if (o->lease == s->lease && o->usable()) stale.insert(s->lease);
  for (auto lease : stale) {
    auto seq = w.h.note(-1, "liveness.revoke", "", -1, -1, lease, "a gone session's keys would outlive the case");
    w.h.end_holds_if([&](const hold& x) { return x.lease == lease; }, seq);
    w.revoked.insert(lease);
    auto revoking = w.judge->async_lease_revoke(lease, asio::as_tuple(use_awaitable));
    co_await std::move(revoking);
  }
  const auto until = clock_type::now() + window;
  while (w.running > 0 && clock_type::now() < until) co_await sleep_for(ms(50));
  if (w.running > 0) {
    w.h.note(-1, "liveness", "", -1, -1, 0, std::to_string(w.running) + " coroutines still running");
    for (auto& e : w.h.open_operations()) {
      if (!judged_live(w, e)) continue;
      std::string queue;
      if (!e.name.empty()) {
        std::function<bool(std::int64_t)> any = [](std::int64_t) { return true; };
        auto reading = keys_under(*w.judge, e.name + "/", any);
        auto keys = co_await std::move(reading);
        for (auto& k : keys) queue += "\n      " + k;
      }
      w.h.fail({"(g) once callers stop starting rounds, every operation completes without being cut short", e.name,
                "still pending " + std::to_string(window.count()) + " ms after the end: " + history::describe(e) +
                    (queue.empty() ? "" : "; the name's keys now:" + queue),
                e.seq, w.h.last_seq(), {}});
    }
  }
  auto draining = w.drain();
  co_return co_await std::move(draining);
}

}  // namespace coetcd::test::explore
