// The explorer's schedule (test_explore): its own steps beside the callers' — sessions adopted
// across clients, orphaned and closed; slow, held and cut links; objects destroyed while an
// acquisition on them is pending, in the very turn its grant lands among others.
#pragma once

#include "world.hpp"

namespace coetcd::test::explore {

/// Session steps, weighted: adopt a live session's lease from another client, orphan one and
/// adopt its lease from another client, close one, orphan one, start a fresh one, start a fresh
/// one and adopt its lease from another client at once (two sessions of one lease from their
/// first operation on).
struct session_mix {
  int adopt = 0, orphan_adopt = 0, close = 0, orphan = 0, fresh = 0, fresh_adopt = 0;
};

inline asio::awaitable<void> session_chaos(world& w, std::uint64_t seed, session_mix mix) {
  chooser c(seed);
  const int clients = static_cast<int>(w.clients.size());
  auto usable_on = [&](int client) {
    int n = 0;
    for (auto& s : w.sessions) n += s->client == client && s->usable();
    return n;
  };
  // A client may adopt a lease only when no live session of its own keeps it (lease_in_use).
  auto keeps = [&](int client, std::int64_t lease) {
    for (auto& s : w.sessions)
      if (s->client == client && s->lease == lease && !s->closed && !s->orphaned) return true;
    return false;
  };
  while (!w.stopping && clock_type::now() < w.deadline - std::chrono::seconds(2) && w.sessions.size() < 40) {
    co_await sleep_for(ms(c.between(300, 1800)));
    int step = c.weighted({mix.adopt, mix.orphan_adopt, mix.close, mix.orphan, mix.fresh, mix.fresh_adopt});
    const int where = c.between(0, clients - 1), shift = c.between(1, clients - 1);
    if (step == 5) {
      auto* made = co_await w.new_session(where);
      if (made) co_await w.new_session((where + shift) % clients, made->lease, made->id);
      continue;
    }
    auto* s = w.pick_usable(c);
    if (!s) continue;
    if (step <= 1) {
      int to = (s->client + shift) % clients;
      if (keeps(to, s->lease)) continue;
      if (step == 1) w.orphan_session(*s);
      co_await w.new_session(to, s->lease, s->id);
    } else if (step <= 3) {
      if (usable_on(s->client) < 2) continue;  // every client keeps a session to work with
      if (step == 2) co_await w.close_session(*s);
      else w.orphan_session(*s);
    } else {
      co_await w.new_session(where);
    }
  }
}

/// Faults on the proxies in front of clients 0 and 1: every byte delayed, or (unless
/// `delays_only`) connections held or cut, each for a moment well inside the sessions' TTL.
inline asio::awaitable<void> link_faults(world& w, std::uint64_t seed, bool delays_only) {
  chooser c(seed);
  while (!w.stopping && clock_type::now() < w.deadline - std::chrono::seconds(1)) {
    co_await sleep_for(ms(c.between(500, 3000)));
    auto p = c.between(0, static_cast<int>(w.proxies.size()) - 1);
    auto& proxy = *w.proxies[static_cast<std::size_t>(p)];
    int kind = delays_only ? 0 : c.weighted({50, 25, 25});
    auto length = ms(kind == 0 ? c.between(300, 2000) : kind == 1 ? c.between(100, 1200) : c.between(50, 600));
    auto d = ms(c.between(20, 250));
    const char* what = kind == 0 ? "fault.delay" : kind == 1 ? "fault.hold" : "fault.cut";
    w.h.note(-1, what, "", -1, -1, 0, "client " + std::to_string(p) + " for " + std::to_string(length.count()) + " ms" +
                                          (kind == 0 ? ", " + std::to_string(d.count()) + " ms each way" : ""));
    if (kind == 0) proxy.delay(d);
    else if (kind == 1) proxy.hold();
    else proxy.cut();
    co_await sleep_for(length);
    proxy.restore();
    proxy.delay(ms(0));
    w.h.note(-1, "fault.end", "", -1, -1, 0, "client " + std::to_string(p));
  }
}

/// Destroys objects while an acquisition on them is pending: now and then it watches every
/// object for a while, one event-loop turn at a time, and destroys the first for whose session
/// and name a grant has landed (the client told of it) but whose caller has not been told yet (a
/// destroy in that very turn: the grant must be given back); when none does, sometimes one with
/// an acquisition pending, at that random moment. Holds taken through the objects go on.
inline asio::awaitable<void> destroyer(world& w, std::uint64_t seed) {
  chooser c(seed);
  auto ex = co_await asio::this_coro::executor;
  while (!w.stopping && clock_type::now() < w.deadline) {
    co_await sleep_for(ms(c.between(200, 1500)));
    auto until = clock_type::now() + ms(c.between(30, 400));
    bool hit = false;
    while (!hit && !w.stopping && clock_type::now() < until) {
      auto turn = asio::post(ex, use_awaitable);  // each look is one turn of the loop
      co_await std::move(turn);
      for (std::size_t i = 0; i < w.objects.size() && !hit; ++i) {
        auto o = w.objects[i];
        if (!o->granted_untold()) continue;
        w.destroy(o, -1, "destroyed as a grant for its session and name landed, one of its callers waiting: a grant on its way");
        hit = true;
      }
    }
    const bool anyway = c.chance(30);
    const int x = c.between(0, 1 << 20);
    if (hit || !anyway) continue;
    std::vector<obj_ptr> waiting;
    for (auto& o : w.objects)
      if (o->alive && o->pending > 0) waiting.push_back(o);
    if (!waiting.empty())
      w.destroy(waiting[static_cast<std::size_t>(x) % waiting.size()], -1, "destroyed with an acquisition pending");
  }
}

}  // namespace coetcd::test::explore
