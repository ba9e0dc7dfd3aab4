// The explorer's queue case (test_explore_data): producers enqueue unique items on a queue and a
// priority queue through objects on sessions of three clients (two behind fault proxies),
// consumers dequeue, many cut short at random moments, sessions closed and replaced now and then;
// at the end every object is drained of what it claimed. Checked: each item told enqueued is taken
// by exactly one dequeue or is still in the queue, none more than once, and a cut-short or failed
// dequeue took nothing; nothing is taken or left that was never put.
#pragma once

#include "data.hpp"

#include <coetcd/priority_queue.hpp>
#include <coetcd/queue.hpp>

namespace coetcd::test::explore {

/// A queue or priority-queue object on one session.
struct q_obj {
  int id = 0, session = 0;
  bool priority = false;
  std::unique_ptr<coetcd::queue> q;
  std::unique_ptr<priority_queue> pq;
  int aborted_takes = 0, unknown_takes = 0;
};
using q_obj_ptr = std::shared_ptr<q_obj>;

struct item_rec {
  int actor = 0, object = 0, prio = 0;
  bool priority = false, cut = false;
  std::string value, key;
  long invoked = 0, completed = 0;
  bool done = false;
  error_code ec;
  /// 1: told enqueued; 0: maybe (outcome_unknown); -1: told it was not.
  int outcome() const { return done && !ec ? 1 : ec == error::outcome_unknown ? 0 : -1; }
};

struct take_rec {
  int actor = 0, object = 0;
  bool priority = false, cut = false, drain = false;
  long invoked = 0, completed = 0;
  bool done = false;
  error_code ec;
  std::string value;
};

struct queue_case {
  std::string q, pq;  // the names
  queue_options options;
  std::vector<q_obj_ptr> objects;
  std::vector<std::shared_ptr<item_rec>> items;
  std::vector<std::shared_ptr<take_rec>> takes;
  int closes = 0;
};
using queue_case_ptr = std::shared_ptr<queue_case>;

/// A queue and a priority queue on session `s` (none when it is lost already).
inline void queue_objects_for(world& w, queue_case& qc, sess_rec& s) {
  for (bool priority : {false, true}) {
    auto o = std::make_shared<q_obj>();
    o->id = static_cast<int>(qc.objects.size());
    o->session = s.id;
    o->priority = priority;
    try {
      if (priority) o->pq = std::make_unique<priority_queue>(s.s, qc.pq, qc.options);
      else o->q = std::make_unique<coetcd::queue>(s.s, qc.q, qc.options);
    } catch (const std::exception& x) {
      w.h.note(-1, "object.create", priority ? qc.pq : qc.q, o->id, s.id, s.lease, x.what());
      continue;
    }
    w.h.note(-1, "object.create", priority ? qc.pq : qc.q, o->id, s.id, s.lease, "");
    qc.objects.push_back(o);
  }
}

inline q_obj_ptr pick_queue_object(world& w, queue_case& qc, chooser& c) {
  const int x = c.between(0, 1 << 20);
  std::vector<q_obj_ptr> ok;
  for (auto& o : qc.objects)
    if ((o->q || o->pq) && w.sessions[static_cast<std::size_t>(o->session)]->usable()) ok.push_back(o);
  return ok.empty() ? nullptr : ok[static_cast<std::size_t>(x) % ok.size()];
}

inline cut_plan queue_cut(chooser& c, std::initializer_list<int> weights) {
  cut_plan p;
  const int how = c.weighted(weights);
  p.armed = how > 0;
  p.after = ms(how == 1 ? c.between(0, 3) : how == 2 ? c.between(3, 150) : c.between(150, 1500));
  p.type = std::array{asio::cancellation_type::terminal, asio::cancellation_type::partial,
                      asio::cancellation_type::total}[static_cast<std::size_t>(c.between(0, 2))];
  return p;
}

inline asio::awaitable<void> queue_producer(world& w, queue_case_ptr qc, int actor, std::uint64_t seed) {
  chooser c(seed);
  for (int n = 0; !w.stopping && clock_type::now() < w.deadline; ++n) {
    auto o = pick_queue_object(w, *qc, c);
    const auto plan = queue_cut(c, {85, 5, 5, 5});
    const int prio = c.between(0, 3);
    const auto pause = ms(c.between(0, 40));
    if (!o) {
      co_await sleep_for(ms(100));
      continue;
    }
    auto it = std::make_shared<item_rec>();
    it->actor = actor;
    it->object = o->id;
    it->priority = o->priority;
    it->prio = prio;
    it->cut = plan.armed;
    it->value = "p" + std::to_string(actor) + "." + std::to_string(n);
    qc->items.push_back(it);
    auto& s = *w.sessions[static_cast<std::size_t>(o->session)];
    auto op = w.h.invoke(actor, "enqueue", o->priority ? qc->pq : qc->q, o->id, s.id, s.lease, prio);
    it->invoked = w.h.last_seq();
    {
      canceller cut(w, plan);
      auto token = asio::bind_cancellation_slot(cut.slot(), asio::as_tuple(use_awaitable));
      std::tuple<error_code, std::string> r;
      if (o->priority) {
        auto putting = o->pq->async_enqueue(it->value, static_cast<std::uint16_t>(prio), token);
        r = co_await std::move(putting);
      } else {
        auto putting = o->q->async_enqueue(it->value, token);
        r = co_await std::move(putting);
      }
      it->ec = std::get<0>(r);
      it->key = std::get<1>(r);
    }
    it->done = true;
    it->completed = w.h.complete(op, it->value + ": " + (it->ec ? it->ec.message() : it->key));
    co_await sleep_for(pause);
  }
}

/// One dequeue through `o`, recorded.
inline asio::awaitable<std::shared_ptr<take_rec>> take_one(world& w, queue_case& qc, q_obj_ptr o, int actor,
                                                           cut_plan plan, bool drain) {
  auto t = std::make_shared<take_rec>();
  t->actor = actor;
  t->object = o->id;
  t->priority = o->priority;
  t->cut = plan.armed;
  t->drain = drain;
  qc.takes.push_back(t);
  auto& s = *w.sessions[static_cast<std::size_t>(o->session)];
  auto op = w.h.invoke(actor, drain ? "drain" : "dequeue", o->priority ? qc.pq : qc.q, o->id, s.id, s.lease);
  t->invoked = w.h.last_seq();
  {
    canceller cut(w, plan);
    auto token = asio::bind_cancellation_slot(cut.slot(), asio::as_tuple(use_awaitable));
    std::tuple<error_code, std::string> r;
    if (o->priority) {
      auto taking = o->pq->async_dequeue(token);
      r = co_await std::move(taking);
    } else {
      auto taking = o->q->async_dequeue(token);
      r = co_await std::move(taking);
    }
    t->ec = std::get<0>(r);
    t->value = std::get<1>(r);
  }
  t->done = true;
  if (t->ec == asio::error::operation_aborted) ++o->aborted_takes;
  if (t->ec == error::outcome_unknown) ++o->unknown_takes;
  t->completed = w.h.complete(op, t->ec ? t->ec.message() + (t->value.empty() ? "" : " with " + t->value) : t->value);
  co_return t;
}

inline asio::awaitable<void> queue_consumer(world& w, queue_case_ptr qc, int actor, std::uint64_t seed) {
  chooser c(seed);
  while (!w.stopping && clock_type::now() < w.deadline) {
    auto o = pick_queue_object(w, *qc, c);
    const auto plan = queue_cut(c, {45, 20, 20, 15});
    const auto pause = ms(c.between(0, 30));
    if (!o) {
      co_await sleep_for(ms(100));
      continue;
    }
    auto taking = take_one(w, *qc, o, actor, plan, false);
    co_await std::move(taking);
    co_await sleep_for(pause);
  }
}

/// Now and then closes a session (its objects stay, failing from then on) and starts another on
/// the same client, with a queue and a priority queue of its own.
inline asio::awaitable<void> queue_sessions(world& w, queue_case_ptr qc, std::uint64_t seed) {
  chooser c(seed);
  while (!w.stopping && clock_type::now() < w.deadline - std::chrono::seconds(2)) {
    co_await sleep_for(ms(c.between(1500, 4000)));
    const bool close = c.chance(60);
    auto* s = w.pick_usable(c);
    if (!close || !s || w.stopping) continue;
    ++qc->closes;
    const int client = s->client;
    auto closing = w.close_session(*s);
    co_await std::move(closing);
    auto making = w.new_session(client);
    auto* made = co_await std::move(making);
    if (made) queue_objects_for(w, *qc, *made);
  }
}

inline asio::awaitable<void> check_queue(world& w, queue_case& qc);

/// The queue case: two sessions per client, a queue and a priority queue on each, 4 producers,
/// 5 consumers, session closes, links slowed, held and cut; then every object drained, the queues
/// read, and the check.
inline asio::awaitable<void> run_queue_case(world& w) {
  auto qc = std::make_shared<queue_case>();
  qc->q = w.name("q");
  qc->pq = w.name("pq");
  qc->options.max_batch = 8;  // what a claim without an answer may take with it
  const int producers = 4, consumers = 5;
  std::vector<std::uint64_t> seeds;
  for (int i = 0; i < producers + consumers + 2; ++i) seeds.push_back(w.choose.next());
  for (int c = 0; c < static_cast<int>(w.clients.size()); ++c)
    for (int i = 0; i < 2; ++i) {
      auto making = w.new_session(c);
      auto* s = co_await std::move(making);
      if (s) queue_objects_for(w, *qc, *s);
    }
  w.deadline = clock_type::now() + std::chrono::milliseconds(static_cast<long>(w.seconds * 1000));
  for (int a = 0; a < capped(producers); ++a) w.spawn(queue_producer(w, qc, a, seeds[static_cast<std::size_t>(a)]));
  for (int a = 0; a < capped(consumers); ++a)
    w.spawn(queue_consumer(w, qc, 10 + a, seeds[static_cast<std::size_t>(producers + a)]));
  w.spawn(queue_sessions(w, qc, seeds[static_cast<std::size_t>(producers + consumers)]));
  w.spawn(link_faults(w, seeds.back(), false));
  auto draining = w.drain();
  if (!co_await std::move(draining)) co_return;
  auto checking = check_queue(w, *qc);
  co_await std::move(checking);
}

}  // namespace coetcd::test::explore

#include "data_queue_check.hpp"
