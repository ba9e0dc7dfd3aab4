// The explorer's leaders (test_explore_more): coetcd::leader objects over the three clients
// campaign on one name; each term's body holds a while (writing through the term's fence) and
// returns, or stays until the term is ended for it; runs are cancelled, leaders destroyed and
// moved (while campaigning or leading, also assigned over a leader whose own run is under way)
// and their clients closed. Checked: never two is_leader() at once, terms told never overlap,
// each term told was the oldest key in etcd's record, terms are told in their revisions' order,
// fences as for the locks, every run ends only as it must, and no key is left.
#pragma once

#include "churn.hpp"
#include "data.hpp"

#include <coetcd/leader.hpp>

namespace coetcd::test::explore {

struct leader_rec {
  int id = 0, slot = 0;  // id: 2,000,000 + n, apart from the objects' (a hold names it)
  int client = 0, gen = 0;  // the client it was made on, and that client's closes then
  std::string name;
  std::unique_ptr<coetcd::leader> l;
  bool alive = true, requeue = true;
  long run_op = 0;          // the async_run in flight
  bool stop_asked = false;  // cancelled, destroyed or assigned over: operation_aborted is due
  std::shared_ptr<asio::cancellation_signal> stop;
  long hold = 0;  // the term its body runs
  std::int64_t term_rev = 0;
};
using leader_ptr = std::shared_ptr<leader_rec>;

struct told_term {
  long hold = 0, seq = 0;
  std::int64_t lease = 0, revision = 0;
  std::string key;
};

struct leader_case {
  std::string name;
  int slots = 6;
  std::vector<leader_ptr> recs;
  std::vector<told_term> terms;  // in the order bodies were told
  std::vector<std::pair<long, std::int64_t>> rejected;  // fenced writes refused to a running body
  std::set<std::pair<std::int64_t, std::int64_t>> both_seen;  // is_leader() pairs reported
};
using leader_case_ptr = std::shared_ptr<leader_case>;

/// Ends the hold of `r`'s term (if its body runs one) at `seq`.
inline void end_term_hold(world& w, leader_rec& r, long seq) {
  if (r.hold) w.h.end_hold(r.hold, seq);
  r.hold = 0;
}

/// At most one is_leader() at a time, among every leader object alive: etcd deletes a term's key
/// only once its leader has stopped saying it leads (a resign or revoke follows the term's end,
/// and an expiry its lease's local deadline).
inline void check_one_leader(world& w, leader_case& lc, const std::string& when) {
  std::vector<leader_rec*> leading;
  for (auto& r : lc.recs)
    if (r->alive && r->l && r->l->is_leader()) leading.push_back(r.get());
  for (std::size_t i = 0; i < leading.size(); ++i)
    for (std::size_t j = i + 1; j < leading.size(); ++j) {
      auto a = leading[i]->l->fencing_token(), b = leading[j]->l->fencing_token();
      if (a == b || !lc.both_seen.insert({std::min(a, b), std::max(a, b)}).second) continue;
      auto seq = w.h.note(-1, "check.leaders", lc.name, leading[i]->id, -1, 0, "two say they lead");
      w.h.fail({"(d) at most one is_leader() at a time", lc.name,
                when + ": leader " + std::to_string(leading[i]->id) + " (revision " + std::to_string(a) + ") and leader " +
                    std::to_string(leading[j]->id) + " (revision " + std::to_string(b) + ") both say they lead",
                seq - 1, seq, {}});
    }
}

/// A write guarded by the term's fence, as the locks' fenced_write. `t` is the term the body was
/// handed (the leader's: it outlives the body); `term_rev` its token as the body began.
inline asio::awaitable<void> leader_write(world& w, leader_case_ptr lc, leader_ptr r, long id, election::hold& t,
                                          std::int64_t term_rev, int i) {
  const auto log = w.data_key(lc->name, "log/" + std::to_string(id) + "-" + std::to_string(i));
  const auto lease = t.lease();
  auto tx = txn().when(t.fence()).then(txn_op::put(w.data_key(lc->name, "register"), "hold " + std::to_string(id)))
                .then(txn_op::put(log, ""));
  auto op = w.h.invoke(r->slot, "fenced_write", lc->name, r->id, -1, lease);
  w.op_client[op] = r->client;
  auto writing = w.clients[static_cast<std::size_t>(r->client)]->async_txn(tx, asio::as_tuple(use_awaitable));
  auto [ec, res] = co_await std::move(writing);
  if (ec) {
    w.h.complete(op, "outcome unknown: " + ec.message(), id);
    co_return;
  }
  w.h.complete(op, res.succeeded ? "applied" : "rejected", id);
  (res.succeeded ? w.fence_told_ok : w.fence_told_rejected).insert(log);
  auto* h = w.h.find_hold(id);
  // Refused while the body runs and its leader says it leads: judged at the end, unless a fault
  // took the lease (etcd may expire it a moment before the local deadline shows).
  if (!res.succeeded && h && h->end == never && r->alive && r->l && r->l->is_leader() && r->l->fencing_token() == term_rev)
    lc->rejected.push_back({id, lease});
}

/// A term's body: told it leads, it writes through the fence 0–2 times and returns (the leader
/// resigns and campaigns again), or stays until the term is ended for it (cancelled).
inline asio::awaitable<void> term_body(world& w, leader_case_ptr lc, leader_ptr r, election::hold& t,
                                      std::shared_ptr<chooser> c) {
  const int writes = c->chance(60) ? c->between(1, 2) : 0;
  const bool stay = c->chance(25);
  const auto hold_for = ms(c->between(5, 150));
  // Read as the term begins: the token reads 0 once the term is over.
  const auto rev = t.fencing_token();
  const auto lease = t.lease();
  const auto key = t.key();
  auto seq = w.h.note(r->slot, "term", lc->name, r->id, -1, lease, "revision " + std::to_string(rev) + ", " + key);
  const long id = w.h.begin_hold(lc->name, r->slot, r->id, -1, lease, 1);
  lc->terms.push_back({id, seq, lease, rev, key});
  r->hold = id;
  r->term_rev = rev;
  check_one_leader(w, *lc, "as a term was told");
  // A leader stopped (or its client closed) a moment ago may still start a term before the
  // stop reaches its strand: that term counts no time.
  if (!r->alive || r->stop_asked || r->gen != w.client_gen[static_cast<std::size_t>(r->client)]) {
    w.h.end_hold(id, seq);
    ++w.tally["terms told to a leader being stopped"];
  }
  // The term's own loss: its session's (not its end by the leader: a resign or the term session's
  // close, which end the wait or tell session_ended; nor its client's close or its key's deletion).
  t.async_wait_lost([&w, lc, lease](error_code ec, loss_reason why) {
    if (ec || why.what == loss_reason::kind::session_ended || why.what == loss_reason::kind::client_closed ||
        why.what == loss_reason::kind::key_gone)
      return;
    w.expired.insert(lease);  // lost to a fault: when etcd expired it is unknown
    w.h.note(-1, "term.lost", lc->name, -1, -1, lease, why.cause.message());
  });
  try {
    for (int i = 0; i < writes; ++i) {
      co_await leader_write(w, lc, r, id, t, rev, i);
      co_await sleep_for(hold_for);
    }
    if (writes == 0) co_await sleep_for(hold_for);
    if (stay) co_await sleep_for(std::chrono::seconds(60));
  } catch (const std::exception&) {
    auto end = w.h.note(r->slot, "term.cancelled", lc->name, r->id, -1, lease, "the body's term ended for it");
    if (r->hold == id) end_term_hold(w, *r, end);
    w.h.end_hold(id, end);
    throw;
  }
  auto end = w.h.note(r->slot, "term.return", lc->name, r->id, -1, lease, "the body returns");
  if (r->hold == id) end_term_hold(w, *r, end);
  w.h.end_hold(id, end);
}

/// A run ended: by a stop asked for (operation_aborted), its client closed (client_closed), or a
/// body returned with requeue off (no error). Anything else is a violation.
inline void run_ended(world& w, leader_case& lc, leader_ptr r, long op, std::exception_ptr e) {
  const auto why = code_of(e);
  auto seq = w.h.complete(op, e ? why.message() : "returned");
  if (r->run_op == op) r->run_op = 0;
  end_term_hold(w, *r, seq);
  const bool closed = r->gen != w.client_gen[static_cast<std::size_t>(r->client)];
  const bool expected = (why == asio::error::operation_aborted && r->stop_asked) || (why == error::client_closed && closed) ||
                        (!e && !r->requeue);
  if (!expected)
    w.h.fail({"a leader's run ends only when stopped, its client closes, or (requeue off) its body returns", lc.name,
              "the run of leader " + std::to_string(r->id) + " ended: " + (e ? why.message() : "returned") +
                  (r->stop_asked ? " (stop asked)" : "") + (closed ? " (client closed)" : ""),
              seq - 1, seq, {}});
  ++w.tally["leader runs ended"];
}

inline void start_run(world& w, leader_case_ptr lc, leader_ptr r, std::uint64_t seed) {
  auto op = w.h.invoke(r->slot, "leader.run", lc->name, r->id, -1, 0);
  w.op_client[op] = r->client;
  r->run_op = op;
  r->stop_asked = false;
  r->stop = std::make_shared<asio::cancellation_signal>();
  auto c = std::make_shared<chooser>(seed);
  auto body = [&w, lc, r, c](election::hold& t) { return term_body(w, lc, r, t, c); };
  // The handler keeps the signal: it must outlive the operation.
  r->l->async_run(std::move(body), asio::bind_cancellation_slot(r->stop->slot(), [&w, lc, r, op, sig = r->stop](std::exception_ptr e) {
                    run_ended(w, *lc, r, op, e);
                  }));
}

/// What a leader tells: each `lost` ends the hold of its term (the body may wind down later).
inline asio::awaitable<void> read_events(world& w, leader_case_ptr lc, leader_ptr r) {
  while (r->alive && r->l) {
    auto next = r->l->async_next_event(asio::as_tuple(use_awaitable));
    auto [ec, e] = co_await std::move(next);
    if (ec) break;  // the leader destroyed (or assigned over)
    const char* what = e.what == leader_event::kind::elected ? "elected"
                       : e.what == leader_event::kind::lost  ? "lost"
                       : e.what == leader_event::kind::failed ? "failed"
                                                              : "stopped";
    auto seq = w.h.note(r->slot, std::string("event.") + what, lc->name, r->id, -1, 0,
                        "revision " + std::to_string(e.fencing_token) + (e.why ? ": " + e.why.message() : ""));
    if (e.what == leader_event::kind::lost && r->hold && r->term_rev == e.fencing_token) end_term_hold(w, *r, seq);
  }
}

inline leader_ptr make_leader(world& w, leader_case_ptr lc, int slot, int where, bool requeue, std::uint64_t seed) {
  auto r = std::make_shared<leader_rec>();
  r->id = 2000000 + static_cast<int>(lc->recs.size());
  r->slot = slot;
  r->name = lc->name;
  r->client = where;
  r->gen = w.client_gen[static_cast<std::size_t>(where)];
  r->requeue = requeue;
  leader_options o;
  o.value = "leader " + std::to_string(r->id);
  o.ttl = w.session_ttl;
  o.retry_min = ms(20);
  o.retry_max = ms(500);
  o.requeue = requeue;
  r->l = std::make_unique<coetcd::leader>(*w.clients[static_cast<std::size_t>(where)], lc->name, o);
  w.h.note(slot, "leader.create", lc->name, r->id, -1, 0, "client " + std::to_string(where) + (requeue ? "" : ", requeue off"));
  lc->recs.push_back(r);
  start_run(w, lc, r, seed);
  w.spawn(read_events(w, lc, r));
  return r;
}

/// Destroys `r`'s leader: its run must end with operation_aborted.
inline void destroy_leader(world& w, leader_rec& r, const std::string& why) {
  if (!r.alive) return;
  auto seq = w.h.note(r.slot, "leader.destroy", r.name, r.id, -1, 0, why);
  end_term_hold(w, r, seq);
  r.alive = false;
  r.stop_asked = true;
  r.l.reset();
}

/// Waits up to 8 s (a term's close may wait for a revoke through a faulted link) for `r`'s run
/// to end after a stop; a violation if it does not.
inline asio::awaitable<void> expect_run_ends(world& w, leader_case_ptr lc, leader_ptr r, long op, const char* why) {
  const long since = w.h.last_seq();
  const auto until = clock_type::now() + ms(8000);
  while (!w.h.completed(op) && clock_type::now() < until) co_await sleep_for(ms(20));
  if (!w.h.completed(op))
    w.h.fail({"a stopped leader's run completes", lc->name,
              "the run of leader " + std::to_string(r->id) + " still runs 8 s after " + std::string(why), since, w.h.last_seq(), {}});
}

/// One slot: a leader at a time, started on a random client; now and then its run is cancelled,
/// the leader destroyed, moved (construction, into a fresh idle leader, or over a fresh leader
/// whose own run campaigns), mostly while it campaigns, sometimes once it leads.
inline asio::awaitable<void> leader_slot(world& w, leader_case_ptr lc, int slot, std::uint64_t seed) {
  chooser c(seed);
  leader_ptr r;
  while (!w.stopping && clock_type::now() < w.deadline) {
    // Every choice first.
    const int where = c.between(0, 2), fresh_where = c.between(0, 2);
    const bool requeue = c.chance(85), once_leading = c.chance(40);
    const auto wait = ms(c.between(200, 1500)), pause = ms(c.between(0, 50));
    // 0 nothing; 1 cancel the run; 2 destroy; 3 move construct; 4 into a fresh idle leader;
    // 5 over a fresh leader whose run is under way.
    const int act = c.weighted({15, 15, 15, 25, 15, 15});
    const std::uint64_t body_seed = c.next(), fresh_seed = c.next();
    if (r && r->alive && r->gen != w.client_gen[static_cast<std::size_t>(r->client)]) {
      const long op = r->run_op;
      destroy_leader(w, *r, "its client was closed");
      if (op) co_await expect_run_ends(w, lc, r, op, "its client closed and it was destroyed");
    }
    if (!r || !r->alive) r = make_leader(w, lc, slot, where, requeue, body_seed);
    else if (!r->run_op) start_run(w, lc, r, body_seed);
    co_await sleep_for(wait);
    const auto until = clock_type::now() + ms(1000);
    while (once_leading && !w.stopping && r->alive && !r->l->is_leader() && clock_type::now() < until) co_await sleep_for(ms(2));
    if (w.stopping || !r->alive || !r->run_op) continue;
    const std::string state = r->l->is_leader() ? "leading" : "campaigning";
    const long op = r->run_op;
    if (act == 1) {
      w.h.note(slot, "leader.cancel", lc->name, r->id, -1, 0, "its run cancelled, " + state);
      r->stop_asked = true;
      r->stop->emit(asio::cancellation_type::terminal);
      co_await expect_run_ends(w, lc, r, op, "it was cancelled");
    } else if (act == 2) {
      destroy_leader(w, *r, "destroyed " + state);
      co_await expect_run_ends(w, lc, r, op, "it was destroyed");
    } else if (act == 3 || act == 4) {
      w.h.note(slot, "leader.move", lc->name, r->id, -1, 0,
               std::string(act == 3 ? "move-constructed" : "move-assigned into a fresh idle leader") + ", " + state);
      move_into_new(r->l, act == 4, [&] {
        return std::make_unique<coetcd::leader>(*w.clients[static_cast<std::size_t>(fresh_where)], w.name("spare"));
      });
      ++w.tally["moves"];
    } else if (act == 5) {
      auto t = make_leader(w, lc, slot, fresh_where, true, fresh_seed);
      co_await sleep_for(pause);
      w.h.note(slot, "leader.move", lc->name, r->id, -1, 0,
               "move-assigned over leader " + std::to_string(t->id) + " (its run " +
                   (t->l->is_leader() ? "leading" : "campaigning") + "), " + state);
      const long top = t->run_op;
      *t->l = std::move(*r->l);
      std::swap(r->l, t->l);
      destroy_leader(w, *t, "assigned over by leader " + std::to_string(r->id) + "'s move");
      ++w.tally["moves"];
      ++w.tally["moves assigned over another object"];
      if (top) co_await expect_run_ends(w, lc, t, top, "it was assigned over");
    }
  }
  if (r && r->alive) {
    const long op = r->run_op;
    destroy_leader(w, *r, "the case ends");
    if (op) co_await expect_run_ends(w, lc, r, op, "the case ended");
  }
}

/// Looks at every leader's is_leader() every 2 ms.
inline asio::awaitable<void> leader_sampler(world& w, leader_case_ptr lc) {
  while (!w.stopping) {
    co_await sleep_for(ms(2));
    check_one_leader(w, *lc, "sampled");
  }
}

/// Each term told was etcd's: its key was put at its revision and was the oldest key of the
/// election at some revision of the record (when the record is `complete`); terms were told in
/// their revisions' order; and no fenced write was refused to a running body, unless a fault
/// took its lease (`expired`).
inline void check_terms(history& hist, const leader_case& lc, const etcd_record& rec, bool complete,
                        const std::set<std::int64_t>& expired) {
  std::map<std::string, std::int64_t> live;  // key -> create revision
  std::set<std::pair<std::string, std::int64_t>> put, led;
  for (auto& [k, kv] : rec.initial) live[k] = kv.create_revision;
  auto lead = [&] {
    if (live.empty()) return;
    auto first = std::min_element(live.begin(), live.end(), [](auto& a, auto& b) { return a.second < b.second; });
    led.insert(*first);
  };
  lead();
  for (std::size_t i = 0; i < rec.events.size(); ++i) {
    auto& e = rec.events[i];
    if (e.type == watch_event::kind::put) {
      live[e.kv.key] = e.kv.create_revision;
      put.insert({e.kv.key, e.kv.create_revision});
    } else {
      live.erase(e.kv.key);
    }
    if (i + 1 == rec.events.size() || rec.events[i + 1].kv.mod_revision != e.kv.mod_revision) lead();
  }
  std::int64_t last = 0;
  long last_hold = 0;
  for (auto& t : lc.terms) {
    if (complete && !led.count({t.key, t.revision}))
      hist.fail({"(d) a term told is one etcd gave: its key the election's oldest", lc.name,
                "hold " + std::to_string(t.hold) + ": " + t.key + " at revision " + std::to_string(t.revision) +
                    (put.count({t.key, t.revision}) ? " was put but never the oldest key" : " is not in etcd's record"),
                t.seq, t.seq, {t.hold}});
    if (t.revision <= last)
      hist.fail({"(d) terms are told in the order of their revisions", lc.name,
                "hold " + std::to_string(t.hold) + " (revision " + std::to_string(t.revision) + ") told after hold " +
                    std::to_string(last_hold) + " (revision " + std::to_string(last) + ")",
                t.seq, t.seq, {last_hold, t.hold}});
    if (t.revision > last) {
      last = t.revision;
      last_hold = t.hold;
    }
  }
  for (auto& [id, lease] : lc.rejected)
    if (!expired.count(lease))
      hist.fail({"no caller told it holds after its key is gone", lc.name,
                "the fenced write of term hold " + std::to_string(id) + " was rejected while its body ran and its leader led",
                hist.find_hold(id) ? hist.find_hold(id)->start : 0, hist.last_seq(), {id}});
}

/// The leader case: `slots` leaders at a time on one name, with link faults and client closes.
inline asio::awaitable<void> run_leader_case(world& w, int slots) {
  auto lc = std::make_shared<leader_case>();
  lc->name = w.name("lead");
  lc->slots = slots;
  std::vector<std::uint64_t> seeds;
  for (int i = 0; i < slots + 2; ++i) seeds.push_back(w.choose.next());
  auto starting = start_record(w, lc->name + "/");
  auto rec = co_await std::move(starting);
  w.on_client_close.push_back([&w, lc](int c, long seq) {
    for (auto& r : lc->recs)
      if (r->alive && r->client == c && r->gen == w.client_gen[static_cast<std::size_t>(c)]) end_term_hold(w, *r, seq);
  });
  w.deadline = clock_type::now() + std::chrono::milliseconds(static_cast<long>(w.seconds * 1000));
  for (int k = 0; k < slots; ++k) w.spawn(leader_slot(w, lc, k, seeds[static_cast<std::size_t>(k)]));
  w.spawn(leader_sampler(w, lc));
  w.spawn(link_faults(w, seeds[static_cast<std::size_t>(slots)], false));
  w.spawn(client_closer(w, seeds[static_cast<std::size_t>(slots) + 1], 0));
  auto draining = w.drain();
  const bool ended = co_await std::move(draining);
  w.on_client_close.clear();
  w.h.discount_holds_if([&](const hold& x) { return w.expired.count(x.lease) > 0; });
  check_exclusive(w.h, "(d) at most one leader at a time (the terms told to bodies)", election_conflict);
  w.tally["terms"] = static_cast<long>(lc->terms.size());
  if (!ended) co_return;
  auto finishing = finish_record(w, rec);
  const bool complete = co_await std::move(finishing);
  if (!complete) w.h.note(-1, "check.record", lc->name, -1, -1, 0, "etcd's record incomplete: terms not matched to it");
  check_terms(w.h, *lc, *rec, complete, w.expired);
  co_await check_fences(w, lc->name, election_conflict);
  // Every leader is stopped: its term's session closed, or (its client closed) its lease
  // expiring within the TTL.
  std::function<bool(std::int64_t)> any = [](std::int64_t) { return true; };
  auto settling = settled_keys_under(*w.judge, lc->name + "/", any, std::chrono::duration_cast<ms>(w.session_ttl) + ms(3000));
  auto left = co_await std::move(settling);
  for (auto& k : left)
    w.h.fail({"(f) no election key left once every leader stopped", lc->name, "left: " + k, w.h.last_seq(), w.h.last_seq(), {}});
  auto cleaning = check_nothing_left(w);
  co_await std::move(cleaning);
}

}  // namespace coetcd::test::explore
