// The acquiring side of a session's local queue on one lock key (see mutex.cpp): the driver that
// takes the key from etcd, callers that join or give up, clean-ups, the release and the linger.
#include "mutex_queue.hpp"

#include <coetcd/mutex.hpp>

namespace coetcd::detail {

std::shared_ptr<mutex_queue> queue_of(const std::shared_ptr<mutex_state>& m) {
  if (m->queue) return m->queue;
  auto& slot = m->session->mutex_queues[{m->prefix, m->key}];
  if (auto q = slot.lock()) return m->queue = q;
  auto q = std::make_shared<mutex_queue>(m->session, *m);
  q->loss_listener = m->session->listen([w = std::weak_ptr<mutex_queue>(q)] {
    if (auto q = w.lock()) {
      q->loss_listener.reset();
      if (q->busy() && !q->session->ended) q->lost_hold(q->session->why, "session lost while held");
      q->stop_linger();
      q->fail_all(error::session_lost);
      if (q->state != mutex_queue::key_state::acquiring) q->complete_parting();  // else the driver does
    }
  });
  slot = q;
  return m->queue = q;
}


mutex_queue::~mutex_queue() {
  // The last reference may go on a user's thread (a handler's copy of a mutex's state): the
  // session's and the view's maps are changed on the strand.
  bump(counters->waiting, -counted_waiting);
  bump(counters->held, -counted_held);
  auto forget = [s = session, v = std::move(view), id = std::pair(prefix, key), loss = loss_listener,
                 linger = linger_listener, writers = writers_listener] {
    if (loss) s->unlisten(*loss);
    if (linger && v) v->core().unlisten(*linger);
    if (writers && v) v->core().unlisten(*writers);
    if (auto it = s->mutex_queues.find(id); it != s->mutex_queues.end() && it->second.expired())
      s->mutex_queues.erase(it);
  };
  auto& strand = session->impl->strand_;
  if (strand.running_in_this_thread()) forget();
  else asio::dispatch(strand, std::move(forget));
}

void mutex_queue::lock(std::shared_ptr<mutex_state> by, bool try_only, bool cancellable,
                       std::shared_ptr<early_cancel> cancel, lock_handler h) {
  auto& impl = *session->impl;
  if (impl.closed()) return fail_lock(impl, std::move(h), error::client_closed);
  if (session->lost) return fail_lock(impl, std::move(h), error::session_lost);
  // A deferred lock launched after its mutex was destroyed.
  if (by->orphaned) return fail_lock(impl, std::move(h), asio::error::operation_aborted);
  if (try_only && shared && !(waiters.empty() && (state == key_state::none || may_join())))
    return fail_lock(impl, std::move(h), error::locked);
  if (try_only && !shared &&
      (held() || !waiters.empty() || (state == key_state::owned && yield_due(by->options))))
    return fail_lock(impl, std::move(h), error::locked);
  auto id = next_id++;
  if (cancel && cancel->registered([w = weak_from_this(), id] {
        if (auto q = w.lock()) q->cancel_waiter(id);
      }))
    return fail_lock(impl, std::move(h), asio::error::operation_aborted);
  const auto options = by->options;
  waiters.push_back(waiter{id, std::move(by), try_only, cancellable, std::move(cancel), std::move(h)});
  if (impl.options_.spans) waiters.back().trace = op_trace::current();
  count_waiting();
  if (shared) {
    // Whether a reader may join a held key depends on the writers queued behind it: watch them.
    ensure_view();
    watch_writers();
    if (may_join()) return grant_all({}, true);
    // Our read key waits for its turn and a writer queued after it: this reader comes after
    // that writer.
    if (state == key_state::acquiring && queued_rev() != 0 &&
        (view->core().has_keys_under_after(blockers, queued_rev()) || own_writer_after(queued_rev())))
      waiters.back().late = true;
    if (state == key_state::none) start_driver();
    return;
  }
  if (state == key_state::owned && !held() && !refencing) {  // idle between callers, or lingering
    stop_linger();
    return pass_on({}, options);
  }
  // Local contention: watch the name so that a waiter of another session behind us is seen.
  if (held() || waiters.size() > 1) ensure_view();
  if (state == key_state::none) start_driver();
}

void mutex_queue::cancel_waiter(std::uint64_t id) {
  auto it = std::find_if(waiters.begin(), waiters.end(), [id](const waiter& w) { return w.id == id; });
  if (it == waiters.end()) return;
  auto h = std::move(it->done);
  waiters.erase(it);
  count_waiting();
  // Nobody is left to take the key the driver is after: stop it. The last caller completes when
  // the driver sees the cancellation (its clean-up then goes on in the background: give_up), or
  // at once when its put is still on the wire (the put is abandoned, its key deleted when it
  // completes).
  if (waiters.empty() && state == key_state::acquiring && driver_cancellable) {
    parting.emplace_back(std::move(h), asio::error::operation_aborted);
    if (!turn) return driver_cancel.emit(asio::cancellation_type::terminal);
    turn->cancelled = true;
    return turn_ended(asio::error::operation_aborted);
  }
  fail_lock(*session->impl, std::move(h), asio::error::operation_aborted);
}

void mutex_queue::abort_waiters_of(const mutex_state& m) {
  // A refused try waiting for its key's delete is the object's too.
  for (auto& [by, h] : refusing)
    if (auto t = h.lock(); by == &m && t && *t) fail_lock(*session->impl, std::move(*t), asio::error::operation_aborted);
  std::vector<std::uint64_t> ids;
  for (auto& w : waiters)
    if (w.by.get() == &m) ids.push_back(w.id);
  for (auto id : ids) cancel_waiter(id);
}

void mutex_queue::fail_all(error_code ec) {
  auto all = std::exchange(waiters, {});
  count_waiting();
  for (auto& w : all) fail_lock(*session->impl, std::move(w.done), ec);
}

void mutex_queue::start_driver() {
  state = key_state::acquiring;
  spawn_driver();
}

void mutex_queue::spawn_driver() {
  if (waiters.empty()) {  // everyone left before it started
    state = key_state::none;
    poke_readers();
    return complete_parting();
  }
  ++session->key_users[key];
  for (auto& w : waiters) w.late = false;  // a new key: behind every writer there is now
  // A caller nobody can cancel stays first in the queue until it holds: then the driver cannot
  // be cancelled either, and awaits its txn without the abandonable side task.
  const auto& first = waiters.front();
  driver_cancellable = first.try_only || first.cancellable;
  // On the strand; with span hooks, as part of the wait first in line (which it is for).
  asio::any_io_executor ex = session->impl->strand_;
  if (first.trace) ex = traced_executor(std::move(ex), first.trace);
  if (driver_cancellable)
    asio::co_spawn(ex, drive(), asio::bind_cancellation_slot(driver_cancel.slot(), asio::detached));
  else
    asio::co_spawn(ex, drive(), asio::detached);
}

asio::awaitable<void> mutex_queue::drive() {
  auto self = shared_from_this();
  co_await handle_cancellation_manually();
  auto& s = *session;
  // A try_lock first in line reads the oldest key in its txn, so it learns at once whether it
  // would have to wait.
  const std::optional<std::uint64_t> try_id =
      waiters.front().try_only ? std::optional(waiters.front().id) : std::nullopt;
  if (!view) view = existing_lock_view(s.impl, prefix);
  const auto via = try_id ? nullptr : view;
  const std::string no_value;
  const turn_rule waits_for{.blockers = shared ? blockers : std::string()};
  const bool cancellable = co_await can_be_cancelled();
  auto a = co_await acquire_or_abandon(session, prefix, key, no_value, via, cancellable, waits_for);
  if (a.ec) {
    // The txn may have been applied: remove what it may have made (abandoned: its side task does).
    if (!a.abandoned) co_return fail_acquisition(a.ec, 0);
    give_up(a.ec);
    co_return acquire_failed();
  }
  // The key was there before our txn and no other lock or campaign of this session uses it: it
  // is another session's of the same lease (adopted by a restarted process or another client),
  // or a late copy of an earlier txn of ours. Its mod revision is what that holder's fence()
  // compares, so the first grant on it puts it again first (see acquired()). A resent txn of
  // ours that found its own first copy costs one needless put.
  adopted = !a.txn.succeeded && s.key_users[key] == 1;
  // Only the header is used from here on: the txn's reads (the oldest key, ours) would stay in
  // memory for the whole wait, about 230 bytes a waiter (heaptrack, 1000 waiters).
  a.txn.responses = {};
  // A try whose txn read a longer name's key first (is_own_key) learns its turn from one more read.
  if (!a.owner && a.undecided && try_id && !waiters.empty() && waiters.front().id == *try_id) {
    const std::string& read = shared ? blockers : prefix;
    auto ec = co_await decide_by_read(s, prefix, read, key, shared, a);
    if (ec) co_return fail_acquisition(ec, a.rev);
  }
  // A try_lock refused while alone completes once its key is gone: a try is no timed wait (etcd
  // has just answered), and a process that exits on `locked` must leave no key behind.
  std::optional<lock_handler> refused;  // emplaced: pitfall 1
  std::shared_ptr<early_cancel> refused_cancel;
  const mutex_state* refused_by = nullptr;
  if (!a.owner) {
    if (try_id && !waiters.empty() && waiters.front().id == *try_id) {
      auto h = std::move(waiters.front().done);
      refused_cancel = std::move(waiters.front().cancel);
      refused_by = waiters.front().by.get();
      waiters.pop_front();
      count_waiting();
      if (waiters.empty()) refused.emplace(std::move(h));
      else fail_lock(*s.impl, std::move(h), error::locked);
    }
    error_code ec;
    if (waiters.empty() || co_await cancellation_requested()) ec = asio::error::operation_aborted;
    else if (a.rev == 0) ec = error::session_lost;
    else if (s.lost) ec = error::session_lost;  // lost while our txn was on the wire
    else {
      await_turn(a.rev, a.mod_rev, a.txn.header, waits_for);
      co_return;  // this frame and its spawn are freed while the key waits
    }
    co_return fail_acquisition(ec, a.rev, refused ? std::move(*refused) : lock_handler{},
                               std::move(refused_cancel), refused_by);
  }
  acquired(a.rev, a.mod_rev, a.txn.header);
}

void mutex_queue::await_turn(std::int64_t r, std::int64_t m, response_header h, turn_rule rule) {
  ensure_view();
  // With span hooks, what follows stays part of the wait the driver is for.
  turn.emplace(turn_wait{.rev = r, .mod_rev = m, .header = std::move(h), .trace = op_trace::current()});
  turn->in_view = view->core().add({key, r, [w = weak_from_this()](error_code ec) {
                                      if (auto q = w.lock()) q->turn_ended(ec);
                                    },
                                    std::move(rule)});
  // Decided inside add() (in a hand-off the release's watch event often comes before our txn's
  // answer): on at once, as the driver went on without a pause.
  if (turn->told) return after_turn();
  // The listener owns the queue while the key waits (as the driver's frame did), so a key whose
  // callers all left without a way to cancel is still taken and released, not left behind. The
  // session's end drops it, which ends the wait.
  turn->listener = session->listen([self = shared_from_this()] { self->turn_ended(error::session_lost); });
}

void mutex_queue::turn_ended(error_code ec) {
  if (!turn || turn->told) return;
  turn->told = true;
  turn->ec = ec;
  if (!turn->listener) return;  // inside add(): await_turn goes on
  // Not from inside the view's or the session's loop of notifications: the rest changes both.
  auto rest = [self = shared_from_this()] { self->after_turn(); };
  auto& strand = session->impl->strand_;
  if (turn->trace) asio::post(traced_executor(strand, turn->trace), std::move(rest));
  else asio::post(strand, std::move(rest));
}

void mutex_queue::after_turn() {
  const auto t = std::move(*turn);
  turn.reset();
  view->core().remove(t.in_view);
  if (t.listener) session->unlisten(*t.listener);
  auto ec = t.ec;
  // The view says it is our turn, but the lease may be past its deadline with the keepalive's
  // timer still queued behind this (a busy loop): etcd may have expired it and given the turn on.
  if (!ec && session->lost_by_now()) ec = error::session_lost;
  // A cancelled wait never reports ownership: the canceller (a timeout, say) has moved on.
  else if (t.cancelled) ec = asio::error::operation_aborted;
  if (!ec) return acquired(t.rev, t.mod_rev, t.header);
  // Told its turn but not holding: the clean-up's delete does not go through the view.
  if (!t.ec) view->core().hold_ended(key);
  fail_acquisition(ec, t.rev);
}

void mutex_queue::fail_acquisition(error_code ec, std::int64_t r, lock_handler refused,
                                   std::shared_ptr<early_cancel> refused_cancel, const mutex_state* refused_by) {
  give_up(ec);
  clean_up(r, std::move(refused), std::move(refused_cancel), refused_by);
  acquire_failed();
}

void mutex_queue::give_up(error_code ec) {
  // Nobody waits for a clean-up: through an outage its delete may take until etcd is back or
  // the session ends, and a `lock || timer` must return at the timer's deadline. A later lock
  // of the session waits for the delete (session_state::wait_deleted), so it never adopts the
  // key on its way out.
  complete_parting();
  if (ec != asio::error::operation_aborted) fail_all(ec);
}

void mutex_queue::clean_up(std::int64_t r, lock_handler refused,
                           std::shared_ptr<early_cancel> refused_cancel, const mutex_state* refused_by) {
  // Not awaited: the driver is done as soon as the key stops counting as ours, so a caller that
  // comes (and maybe gives up) while the delete waits out an outage gets a driver of its own.
  bump(counters->cleaning);
  // std::function copies its target: the move-only handler travels behind a shared_ptr.
  auto then = std::make_shared<lock_handler>(std::move(refused));
  // The refused try waits for the delete, but like any wait it ends at once when cancelled (a
  // `try_lock || timer` through an outage), or when its mutex is destroyed (abort_waiters_of);
  // the delete goes on in the background. Weak: the handler's own cancellation slot keeps the
  // callback, and a strong reference would keep the handler (and what it owns) for ever if the
  // loop stopped before the delete ended.
  if (*then && refused_cancel &&
      refused_cancel->registered([w = std::weak_ptr(then), impl = session->impl] {
        if (auto t = w.lock(); t && *t) fail_lock(*impl, std::move(*t), asio::error::operation_aborted);
      }))
    fail_lock(*session->impl, std::move(*then), asio::error::operation_aborted);
  if (*then && refused_by) {
    std::erase_if(refusing, [](const auto& e) { return e.second.expired(); });
    refusing.emplace_back(refused_by, then);
  }
  release_key_later(*session, key, r, [self = shared_from_this(), r, then, since = clock::now()](bool deleted) {
    bump(self->counters->cleaning, -1);
    auto& impl = *self->session->impl;
    if (*then) fail_lock(impl, std::move(*then), error::locked);
    if (deleted && impl.wants_events())
      impl.emit({.kind = event_kind::lock_released, .name = self->name, .key = self->key,
                 .detail = "clean-up after callers that gave up (the key deleted in the background)",
                 .lease = self->session->lease, .revision = r,
                 .duration = std::chrono::duration_cast<std::chrono::milliseconds>(clock::now() - since)});
  });
}

void mutex_queue::complete_parting() {
  for (auto& [h, ec] : std::exchange(parting, {})) fail_lock(*session->impl, std::move(h), ec);
}

void mutex_queue::acquire_failed() {
  state = key_state::none;
  poke_readers();
  complete_parting();
  // Callers that came since the driver gave up need a new driver. Not from inside this one:
  // its cancellation slot is the one the next driver takes.
  if (!waiters.empty()) {
    state = key_state::acquiring;
    asio::post(session->impl->strand_, [self = shared_from_this()] { self->spawn_driver(); });
  }
}

void mutex_queue::acquired(std::int64_t r, std::int64_t m, response_header h) {
  state = key_state::owned;
  // The same key again (an election of the session kept it across our release): a fence asked
  // before still has to move. A new key has a new create revision, and mod revision with it.
  // An election's rewrite seen while we queued (key_rewritten) may be newer than our txn's read.
  if (r != rev) fence_due = false;
  // An adopted key: the hold before ours may have built a fence on it (see drive()), so it moves
  // first. The write side of an rw_mutex fences by the key's create revision, which no put moves
  // (start_refence): it gives the key up (the other holder's hold on it ends too, as the lease's
  // one holder) and queues again with a new one. The read side has no fence of its own to move.
  const bool adopted_now = std::exchange(adopted, false) && !shared;
  if (adopted_now && readers.empty()) fence_due = true;
  rev = r;
  mod_rev = std::max(m, mod_rev);
  // Every holder before us (of any session, coetcd's tokens) had its token before its key's
  // delete, which came before our turn: the txn that found us the oldest, or the view that saw
  // that delete, is at a later revision.
  fence = std::max(h.revision, view ? view->core().revision() : 0);
  header = std::move(h);
  foreign_since.reset();
  handoffs_since_foreign = 0;
  complete_parting();  // a caller that left while the txn was on the wire
  if (waiters.empty()) {  // the last caller was cancelled as the key became ours
    start_release({});
    return;
  }
  if (shared) return grant_all();
  if (adopted_now && !readers.empty()) return start_release({});
  if (fence_due && readers.empty()) return start_refence({}, waiters.front().by->options);
  fence_due = false;
  grant();
}

asio::awaitable<void> mutex_queue::release(asio::any_completion_handler<void(error_code)> h) {
  auto self = shared_from_this();
  auto& s = *session;
  error_code result;
  if (--s.key_users[key] > 0) {  // an election of this session on the same name still uses it
    // The key stays: no release of it for the view to park a lock's txn for.
    if (view) view->core().hold_ended(key);
    state = key_state::none;
  } else {
    s.key_users.erase(key);
    delete_in_flight deleting(s, key);
    for (int attempt = 0;; ++attempt) {
      auto resent = std::make_shared<bool>(false);
      std::tuple<error_code, bool> sent;
      // A txn guarded by our create revision, not Go's plain delete: a resent copy may be applied
      // after the first (held in a partition, or resent after resend_after) and after our next
      // put of this same key, which a plain delete would remove while we hold it. The price, for
      // a lone lock: the guarded txn takes 42-48 us longer at the server than Go's DeleteRange
      // (p50 from send to completion, one worker; etcd 3.4 evaluates a Txn's compare through a
      // copy of its read buffer), about 4-5 % of an acquisition. Under contention it did not
      // show (coetcd-bench --mode mutex, 3 rounds: 10 workers -2 %, 100 +4 %).
      if (view) sent = co_await view->core().release(key, rev, resent);
      else sent = co_await guarded_delete(s.impl, key, rev, resent);
      auto [ec, deleted] = sent;
      // A delete resent after a failure that was in fact applied (a leader change mid-commit)
      // finds its key gone: that is our release, not a loss.
      if (!ec) {
        if (attempt == 0 && !deleted && !*resent) result = error::session_lost;
        break;
      }
      if (attempt == 0) result = ec;
      if (attempt == 0 && h) s.impl->complete(std::move(h), result);
      // The key may still be there under a live lease, blocking the name: keep trying while the
      // session lives (after it ends, the lease takes the key with it).
      if (!may_pass(ec) || s.lost || s.impl->closed()) break;
      asio::steady_timer pause(s.impl->strand_, retry_pause(attempt));
      co_await pause.async_wait(as_result);
      if (s.lost || s.impl->closed()) break;
    }
    state = key_state::none;
  }
  poke_readers();
  if (h) s.impl->complete(std::move(h), result);
  complete_parting();
  if (!waiters.empty() && state == key_state::none && !s.lost) start_driver();
}

void mutex_queue::start_linger(std::chrono::milliseconds d) {
  ensure_view();
  lingering = true;
  linger_listener = view->core().listen([w = weak_from_this()](error_code) {
    auto q = w.lock();
    if (!q || !q->lingering || !q->foreign_waiting()) return;
    // Not from inside the view's notification: the release goes through the view.
    asio::post(q->session->impl->strand_, [q] { q->end_linger(); });
  });
  if (!linger_timer) linger_timer = std::make_unique<asio::steady_timer>(session->impl->strand_);
  linger_timer->expires_after(d);
  linger_timer->async_wait([self = shared_from_this()](error_code ec) {
    if (!ec) self->end_linger();
  });
}

void mutex_queue::stop_linger() {
  if (!lingering) return;
  lingering = false;
  if (linger_listener && view) view->core().unlisten(*linger_listener);
  linger_listener.reset();
  if (linger_timer) linger_timer->cancel();
}

void mutex_queue::end_linger() {
  if (!lingering) return;
  stop_linger();
  if (!held() && waiters.empty() && state == key_state::owned)
    start_release({});
}


void key_rewritten(session_state& s, const std::string& prefix, const std::string& key, std::int64_t mod_rev) {
  auto it = s.mutex_queues.find({prefix, key});
  auto q = it == s.mutex_queues.end() ? nullptr : it->second.lock();
  if (!q) return;
  // Also while queueing: acquired() keeps the newer of this and its txn's read.
  q->mod_rev = std::max(q->mod_rev, mod_rev);
  if (auto h = q->holder.lock()) h->mod_rev = std::max(h->mod_rev.load(), mod_rev);
}

}  // namespace coetcd::detail
