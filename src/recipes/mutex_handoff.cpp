// The holding side of a session's local queue on one lock key (see mutex.cpp): grants, local
// hand-offs and when they move the fence first, the rw_mutex's readers' turns, and unlock.
#include "mutex_queue.hpp"

#include <coetcd/mutex.hpp>

namespace coetcd::detail {

bool mutex_queue::may_join() const {
  if (state != key_state::owned || !view || view->core().shows_gone(key, rev) ||
      view->core().may_have_keys_under(blockers))
    return false;
  // A writer of this session whose put is still on its way does not show in the view yet.
  auto w = session->mutex_queues.find({prefix, blockers + "/" + lease_hex(session->lease)});
  auto writer = w == session->mutex_queues.end() ? nullptr : w->second.lock();
  return !writer || writer->state == key_state::none || writer->state == key_state::releasing;
}

void mutex_queue::grant_all(asio::any_completion_handler<void(error_code)> unlocked, bool local) {
  const auto now = clock::now();
  if (session->lost_by_now(now)) {  // the loss listener has failed the waiters
    if (unlocked) session->impl->complete(std::move(unlocked), error::session_lost);
    return;
  }
  // Joining a held key (local) needs no writer anywhere, and the writer a late reader came
  // after may have gone since: then nobody is late.
  const bool keep_late = !local && !may_join();
  std::list<waiter> all;
  for (auto it = waiters.begin(); it != waiters.end();) {
    auto next = std::next(it);
    if (!keep_late || !it->late) all.splice(all.end(), waiters, it);
    it = next;
  }
  count_waiting();
  auto& impl = *session->impl;
  if (holds == 0) held_since = now;
  for (auto& w : all) {
    if (w.by->orphaned) {  // its caller's object is gone: the lock is aborted
      fail_lock(impl, std::move(w.done), asio::error::operation_aborted);
      continue;
    }
    auto hold = new_hold(*w.by);
    ++holds;
    bump(counters->acquired);
    if (local) bump(counters->handoffs);
    counters->record_wait(now - w.since);
    if (impl.wants_events())
      impl.emit({.kind = event_kind::lock_acquired, .name = name, .key = key,
                 .detail = local ? "shared, joined a held read key" : "shared", .lease = session->lease,
                 .revision = rev, .duration = std::chrono::duration_cast<std::chrono::milliseconds>(now - w.since)});
    deliver(std::move(w), lock_hold(std::move(hold)), {});
  }
  count_held();
  if (unlocked) impl.complete(std::move(unlocked), error_code{});
  if (holds == 0) pass_on({}, mutex_options{});  // every one of them had gone
}

bool mutex_queue::end_hold(const std::shared_ptr<hold_state>& by) {
  if (shared) {
    if (!by->held.exchange(false)) return false;
    --holds;
  } else {
    if (!held_by(by)) return false;
    by->held.store(false);  // before taking the mark: see hold_state::read_fence
    holder.reset();
    if (by->fence_asked.exchange(false)) fence_due = true;
  }
  by->end_waits();
  count_held();
  return true;
}

std::shared_ptr<hold_state> mutex_queue::new_hold(const mutex_state& by) {
  auto h = std::make_shared<hold_state>();
  h->queue = shared_from_this();
  h->options = by.options;
  h->kind = shared || !readers.empty() ? hold_state::fence_by::create_revision : hold_state::fence_by::mod_revision;
  // Nobody else sees the hold yet: `held` is published with it, through the post to its caller.
  constexpr auto relaxed = std::memory_order_relaxed;
  h->rev.store(rev, relaxed);
  h->mod_rev.store(mod_rev, relaxed);
  h->fence.store(fence, relaxed);
  h->header = header;
  h->sequence = ++sequence;
  h->held.store(true, relaxed);
  return h;
}

void mutex_queue::grant(asio::any_completion_handler<void(error_code)> unlocked, bool local) {
  const auto now = clock::now();  // one read of the clock: a hand-off's own cost is a few of them
  if (session->lost_by_now(now)) {  // the loss listener has failed the waiters
    if (unlocked) session->impl->complete(std::move(unlocked), error::session_lost);
    return;
  }
  auto w = std::move(waiters.front());
  waiters.pop_front();
  count_waiting();
  if (w.by->orphaned) {  // its caller's object is gone: the lock is aborted
    fail_lock(*session->impl, std::move(w.done), asio::error::operation_aborted);
    if (unlocked) session->impl->complete(std::move(unlocked), error_code{});
    return pass_on({}, w.by->options);
  }
  auto hold = new_hold(*w.by);
  holder = hold;
  count_held();
  held_since = now;
  bump(counters->acquired);
  if (local) bump(counters->handoffs);
  if (std::exchange(fence_moved, false)) bump(counters->fenced_handoffs);
  counters->record_wait(held_since - w.since);
  auto& impl = *session->impl;
  if (impl.wants_events())
    impl.emit({.kind = event_kind::lock_acquired, .name = name, .key = key, .detail = local ? "handed over locally" : "",
               .lease = session->lease, .revision = rev,
               .duration = std::chrono::duration_cast<std::chrono::milliseconds>(held_since - w.since)});
  deliver(std::move(w), lock_hold(std::move(hold)), std::move(unlocked));
}

namespace {

// One post carries a grant and the unlock that made it, if any: each is then dispatched to its
// own executor (inline when that is the one running).
template <class ToHolder>
void post_grant(client_impl& impl, ToHolder to_holder, asio::any_completion_handler<void(error_code)> unlocked) {
  if (!unlocked) return asio::post(impl.io_ex_, [to_holder = std::move(to_holder)]() mutable {
    asio::dispatch(std::move(to_holder));
  });
  auto to_unlocker = impl.bound(std::move(unlocked), error_code{});
  asio::post(impl.io_ex_, [to_holder = std::move(to_holder), to_unlocker = std::move(to_unlocker)]() mutable {
    asio::dispatch(std::move(to_holder));
    asio::dispatch(std::move(to_unlocker));
  });
}

}  // namespace

void mutex_queue::deliver(waiter w, lock_hold hold, asio::any_completion_handler<void(error_code)> unlocked) {
  // A cancellation emitted before the handler runs (the other branch of an `||` finished first,
  // and the lock's result will be discarded), or the mutex object destroyed meanwhile (~mutex
  // promises operation_aborted to its pending locks), must win over the grant. So the check is
  // made on the handler's executor, where the cancellation is emitted and just before the
  // handler runs; a grant given back passes on, on the strand. A grant dropped unrun (its
  // executor shut down) releases itself: the hold travels with it.
  auto& impl = *session->impl;
  auto ex = asio::get_associated_executor(w.done, impl.completion_ex_);
  auto to_holder = asio::bind_executor(std::move(ex), [self = shared_from_this(), w = std::move(w),
                                                       hold = std::move(hold)]() mutable {
    asio::get_associated_cancellation_slot(w.done).clear();
    if (!w.by->orphaned.load() && !(w.cancel && w.cancel->emitted())) return std::move(w.done)(error_code{}, std::move(hold));
    asio::dispatch(self->session->impl->strand_, [self, by = detail::access::state(hold)] { self->give_back(by); });
    std::move(w.done)(make_error_code(asio::error::operation_aborted), lock_hold{});
  });
  post_grant(impl, std::move(to_holder), std::move(unlocked));
}

void mutex_queue::give_back(const std::shared_ptr<hold_state>& by) {
  // The session's loss may have ended it already: then there is nothing left to give.
  // end_hold also takes the hold's fence mark: a compare built from it must fail under the next.
  if (!end_hold(by) || (shared && holds > 0)) return;
  auto& impl = *session->impl;
  if (impl.wants_events())
    impl.emit({.kind = event_kind::lock_released, .name = name, .key = key,
               .detail = "given back: the caller had stopped waiting", .lease = session->lease, .revision = rev});
  pass_on({}, by->options, true);
}

bool mutex_queue::own_writer_after(std::int64_t r) const {
  // Its put may still be on the wire (no revision yet): then it queues after our read key.
  auto w = session->mutex_queues.find({prefix, blockers + "/" + lease_hex(session->lease)});
  auto writer = w == session->mutex_queues.end() ? nullptr : w->second.lock();
  return writer && writer->state == key_state::acquiring && (writer->queued_rev() == 0 || writer->queued_rev() > r);
}

void mutex_queue::watch_writers() {
  if (writers_listener || !view) return;
  writers_listener = view->core().listen([w = weak_from_this()](error_code) {
    auto q = w.lock();
    if (!q || q->waiters.empty()) return;
    // Not from inside the view's notification.
    asio::post(q->session->impl->strand_, [q] { q->recheck_readers(); });
  });
}

void mutex_queue::recheck_readers() {
  if (shared && state == key_state::owned && holds > 0 && !waiters.empty() && may_join()) grant_all({}, true);
}

void mutex_queue::poke_readers() {
  if (readers.empty()) return;
  auto it = session->mutex_queues.find({prefix, readers});
  if (auto r = it == session->mutex_queues.end() ? nullptr : it->second.lock(); r && !r->waiters.empty())
    asio::post(session->impl->strand_, [r] { r->recheck_readers(); });
}

bool mutex_queue::readers_first() const {
  if (readers.empty()) return false;
  auto it = session->mutex_queues.find({prefix, readers});
  auto r = it == session->mutex_queues.end() ? nullptr : it->second.lock();
  if (!r || r->waiters.empty()) return false;
  return waiters.empty() || r->waiters.front().since < waiters.front().since;
}

bool mutex_queue::yield_due(const mutex_options& o) {
  if (readers_first()) return true;
  if (!foreign_waiting()) {
    foreign_since.reset();
    return false;
  }
  auto now = clock::now();
  if (!foreign_since) {
    foreign_since = now;
    handoffs_since_foreign = 0;
  }
  return handoffs_since_foreign >= o.fair_handoffs || now - *foreign_since >= o.fair_hold;
}

void mutex_queue::unlock(const std::shared_ptr<hold_state>& by, asio::any_completion_handler<void(error_code)> h) {
  if (!end_hold(by)) return session->impl->complete(std::move(h), error::not_locked);
  if (session->lost) {
    if (!busy()) {
      state = key_state::none;
      complete_parting();
    }
    return session->impl->complete(std::move(h), error::session_lost);
  }
  if (busy()) {  // other readers still hold the key
    const bool gone = view && view->core().shows_gone(key, rev);
    return session->impl->complete(std::move(h), gone ? make_error_code(error::session_lost) : error_code{});
  }
  const auto options = by->options;
  if (session->impl->wants_events() && !(view && view->core().shows_gone(key, rev)))
    session->impl->emit({.kind = event_kind::lock_released, .name = name, .key = key, .lease = session->lease,
                         .revision = rev,
                         .duration = std::chrono::duration_cast<std::chrono::milliseconds>(clock::now() - held_since)});
  pass_on(std::move(h), options, true);
}

void mutex_queue::pass_on(asio::any_completion_handler<void(error_code)> h, const mutex_options& options,
                          bool was_held) {
  holder.reset();
  count_held();
  if (view && view->core().shows_gone(key, rev)) {
    if (was_held) lost_hold(error::session_lost, "the key was gone when it was unlocked");
    return key_vanished(std::move(h));
  }
  if (shared) {
    // Readers still here were held back by a writer queued behind the key: release it, and
    // they queue again behind that writer.
    if (!waiters.empty() && may_join()) return grant_all(std::move(h), true);
    return start_release(std::move(h));
  }
  if (!waiters.empty() && !yield_due(options)) {
    if (!fence_due) {
      ++handoffs_since_foreign;
      return grant(std::move(h), true);
    }
    // A holder before asked for a fence: move it before the next caller holds. The write side
    // of an rw_mutex queues again instead (see start_refence).
    if (readers.empty()) return start_refence(std::move(h), options);
  }
  if (waiters.empty() && options.linger.count() > 0 && !foreign_waiting() && !readers_first()) {
    start_linger(options.linger);
    if (h) session->impl->complete(std::move(h), error_code{});
    return;
  }
  // Nobody left here, or another session's turn: release the key (the driver queues the callers
  // still waiting again once the delete is done).
  start_release(std::move(h));
}

void mutex_queue::key_vanished(asio::any_completion_handler<void(error_code)> h) {
  state = key_state::none;
  poke_readers();
  fence_due = false;
  if (--session->key_users[key] <= 0) session->key_users.erase(key);
  if (h) session->impl->complete(std::move(h), error::session_lost);
  if (!waiters.empty() && !session->lost) start_driver();
}

void mutex_queue::start_refence(asio::any_completion_handler<void(error_code)> h, mutex_options options) {
  refencing = true;
  asio::co_spawn(session->impl->strand_, refence(std::move(h), options), asio::detached);
}

asio::awaitable<void> mutex_queue::refence(asio::any_completion_handler<void(error_code)> h, mutex_options options) {
  auto self = shared_from_this();
  auto& s = *session;
  // Guarded by the create revision: a copy arriving after the key was released (and made again
  // by a later lock of ours) changes nothing. The value stays (an election of the session may
  // share the key and have written its own). Not resent when merely slow: a late copy would move
  // the fence under a later holder, whose guarded writes would then fail (safe, but spurious).
  // It makes no key: no queue.
  auto t = txn().when(compare::create_revision(key) == rev)
               .then(txn_op::put(key, "", put_options{.lease = s.lease, .ignore_value = true}));
  auto [ec, r] = co_await batched_txn(s.impl, std::move(t), write_queue{});
  refencing = false;
  if (s.lost) {  // the loss listener failed the waiters; the lease takes the key
    state = key_state::none;
    complete_parting();
    if (h) s.impl->complete(std::move(h), error::session_lost);
    co_return;
  }
  if (!ec && !r.succeeded) co_return key_vanished(std::move(h));
  if (ec) {
    // Whether the put landed is unknown, and so is the key's mod revision: no caller may hold on
    // it. Release it (a late copy of the put then finds another create revision, or none) and
    // let the waiters queue again.
    fence_due = false;
    co_return start_release(std::move(h));
  }
  // An election's proclaim committed after our put may have been seen first: keep the newest.
  mod_rev = std::max(mod_rev, r.header.revision);
  fence = r.header.revision;
  fence_due = false;
  fence_moved = true;  // counted by the grant it is for, if pass_on grants
  // The callers may have changed meanwhile (cancelled, a new one, another session's turn).
  pass_on(std::move(h), options);
  fence_moved = false;
}

}  // namespace coetcd::detail
