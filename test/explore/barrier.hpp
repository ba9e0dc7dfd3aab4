// The explorer's double barriers (test_explore): rounds of N participants and a few extra over the
// sessions of three clients, mostly a first group entering and the rest together a moment later,
// checked for (e): nobody through before N entered; once N entered, exactly N through and the
// others refused (too_many_clients), nobody left waiting; every one through leaves; no key left.
#pragma once

#include "check.hpp"
#include "schedule.hpp"

#include <coetcd/double_barrier.hpp>

namespace coetcd::test::explore {

struct participant {
  int actor = 0;
  sess_rec* s = nullptr;
  std::unique_ptr<double_barrier> b;
  ms delay{0};
  long entered_at = 0;  // the seq of its enter's invocation
  long enter_done = 0;
  std::optional<error_code> entered, left;
  std::shared_ptr<asio::cancellation_signal> cut = std::make_shared<asio::cancellation_signal>();
};
using participant_ptr = std::shared_ptr<participant>;

inline asio::awaitable<void> enter_barrier(world& w, participant_ptr p, std::string name) {
  co_await sleep_for(p->delay);
  auto op = w.h.invoke(p->actor, "enter", name, -1, p->s->id, p->s->lease);
  p->entered_at = w.h.last_seq();
  auto entering = p->b->async_enter(asio::bind_cancellation_slot(p->cut->slot(), asio::as_tuple(use_awaitable)));
  auto [ec] = co_await std::move(entering);
  p->entered = ec;
  p->enter_done = w.h.complete(op, ec ? ec.message() : "passed");
}

inline asio::awaitable<void> leave_barrier(world& w, participant_ptr p, std::string name) {
  p->cut = std::make_shared<asio::cancellation_signal>();  // the enter's may still be referenced
  auto op = w.h.invoke(p->actor, "leave", name, -1, p->s->id, p->s->lease);
  auto leaving = p->b->async_leave(asio::bind_cancellation_slot(p->cut->slot(), asio::as_tuple(use_awaitable)));
  auto [ec] = co_await std::move(leaving);
  p->left = ec;
  w.h.complete(op, ec ? ec.message() : "left");
}

/// Waits until `done()` or `limit`; whether done.
inline asio::awaitable<bool> wait_until(std::function<bool()> done, ms limit) {
  auto until = clock_type::now() + limit;
  while (!done() && clock_type::now() < until) co_await sleep_for(ms(10));
  co_return done();
}

inline asio::awaitable<void> barrier_round(world& w, int round, chooser& c) {
  const auto name = w.name("db" + std::to_string(round));
  // Every choice of the round first.
  const int count = c.between(2, 3);
  const int extra = c.weighted({40, 40, 20});
  const int total = count + extra;
  const bool together = c.chance(70);
  const int first = c.between(1, count - 1);  // when the rest come together: how many come first
  const auto later = ms(c.between(50, 400));
  std::vector<participant_ptr> ps;
  for (int i = 0; i < total; ++i) {
    auto p = std::make_shared<participant>();
    p->actor = round * 10 + i;
    p->delay = together ? (i < first ? ms(c.between(0, 20)) : later + ms(c.between(0, 3))) : ms(c.between(0, 400));
    p->s = w.pick_usable(c);
    ps.push_back(p);
  }
  for (auto& p : ps)
    if (!p->s) co_return;  // no session to enter with (cannot happen without session steps)
  w.h.note(-1, "barrier.round", name, -1, -1, 0,
           std::to_string(total) + " participants for a count of " + std::to_string(count) +
               (together ? ", " + std::to_string(first) + " first, the rest together " + std::to_string(later.count()) + " ms later"
                         : ", spread over 400 ms"));
  for (auto& p : ps) {
    p->b = std::make_unique<double_barrier>(p->s->s, name, count);
    w.spawn(enter_barrier(w, p, name));
  }
  std::function<bool()> all_invoked = [&] {
    return std::all_of(ps.begin(), ps.end(), [](auto& p) { return p->entered_at > 0; });
  };
  std::function<bool()> all_entered = [&] {
    return std::all_of(ps.begin(), ps.end(), [](auto& p) { return p->entered.has_value(); });
  };
  auto invoking = wait_until(all_invoked, ms(5000));
  co_await std::move(invoking);
  auto entering = wait_until(all_entered, ms(6000));
  const bool none_hung = co_await std::move(entering);
  int hung = 0;
  if (!none_hung) {
    for (auto& p : ps)
      if (!p->entered) {
        ++hung;
        w.h.note(p->actor, "cut", name, -1, p->s->id, p->s->lease, "still waiting to enter 6 s after the last came");
        p->cut->emit(asio::cancellation_type::terminal);
      }
    auto cutting = wait_until(all_entered, ms(5000));
    co_await std::move(cutting);
  }
  long first_seq = w.h.last_seq();
  for (auto& p : ps) first_seq = std::min(first_seq, p->entered_at);
  const std::string inv = "(e) double barrier: nobody through before N entered, everybody through once N entered";
  int passed = 0, refused = 0, other = 0;
  for (auto& p : ps) {
    if (!p->entered) continue;
    if (!*p->entered) {
      ++passed;
      long before = 0;
      for (auto& q : ps) before += q->entered_at > 0 && q->entered_at < p->enter_done;
      if (before < count)
        w.h.fail({inv, name, "actor " + std::to_string(p->actor) + " passed when " + std::to_string(before) + " of " +
                                 std::to_string(count) + " had entered",
                  first_seq, p->enter_done, {}});
    } else if (*p->entered == error::too_many_clients) {
      ++refused;
    } else if (*p->entered != asio::error::operation_aborted) {
      ++other;
    }
  }
  const auto tally = std::to_string(passed) + " passed, " + std::to_string(refused) + " refused, " +
                     std::to_string(hung) + " still waiting after 6 s, count " + std::to_string(count) + ", " +
                     std::to_string(total) + " entered";
  if (other == 0 && hung > 0)
    w.h.fail({inv, name, "it stays shut: " + tally, first_seq, w.h.last_seq(), {}});
  else if (other == 0 && passed != count)
    w.h.fail({inv, name, (passed == 0 ? "nobody passed: " : passed < count ? "it opened for fewer than N: " : "more than N passed: ") + tally,
              first_seq, w.h.last_seq(), {}});

  // Everybody through leaves, together.
  std::vector<participant_ptr> through;
  for (auto& p : ps)
    if (p->entered && !*p->entered) through.push_back(p);
  for (auto& p : through) w.spawn(leave_barrier(w, p, name));
  std::function<bool()> all_left = [&] {
    return std::all_of(through.begin(), through.end(), [](auto& p) { return p->left.has_value(); });
  };
  auto leaving = wait_until(all_left, ms(6000));
  if (!co_await std::move(leaving)) {
    for (auto& p : through)
      if (!p->left) {
        w.h.fail({"(e) double barrier: everybody through leaves", name,
                  "actor " + std::to_string(p->actor) + " still leaving 6 s after " + tally, first_seq, w.h.last_seq(), {}});
        p->cut->emit(asio::cancellation_type::terminal);
      }
    auto cutting = wait_until(all_left, ms(5000));
    co_await std::move(cutting);
  }
  std::function<bool(std::int64_t)> any = [](std::int64_t) { return true; };
  auto settling = settled_keys_under(*w.judge, name + "/", any, ms(2000));
  auto left = co_await std::move(settling);
  for (auto& k : left)
    w.h.fail({"(f) no key left once every participant is done", name, "left: " + k + " after " + tally, first_seq,
              w.h.last_seq(), {}});
  // The objects go before their sessions; a coroutine still on one holds its own reference.
  for (auto& p : ps) p->b.reset();
}

inline asio::awaitable<void> barrier_rounds(world& w, int lane, int lanes, std::uint64_t seed) {
  chooser c(seed);
  for (int round = lane; !w.stopping && clock_type::now() < w.deadline; round += lanes) {
    co_await barrier_round(w, round, c);
    co_await sleep_for(ms(c.between(0, 50)));
  }
}

/// The double-barrier case: two lanes of rounds over two sessions per client, links slowed now
/// and then (not held or cut: a round's bound would count the outage as a hang).
inline asio::awaitable<void> run_barrier_case(world& w) {
  const int lanes = 2;
  std::vector<std::uint64_t> seeds;
  for (int i = 0; i < lanes + 1; ++i) seeds.push_back(w.choose.next());
  for (int c = 0; c < static_cast<int>(w.clients.size()); ++c)
    for (int i = 0; i < 2; ++i) co_await w.new_session(c);
  w.deadline = clock_type::now() + std::chrono::milliseconds(static_cast<long>(w.seconds * 1000));
  for (int l = 0; l < capped(lanes); ++l) w.spawn(barrier_rounds(w, l, lanes, seeds[static_cast<std::size_t>(l)]));
  w.spawn(link_faults(w, seeds[static_cast<std::size_t>(lanes)], true));
  auto draining = w.drain(std::chrono::seconds(30));  // a round under way runs to its end
  if (co_await std::move(draining)) co_await check_nothing_left(w);
}

}  // namespace coetcd::test::explore
