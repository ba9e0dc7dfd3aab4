// The client's one LeaseKeepAlive stream (see keepalive_manager.hpp) and the public lease_keepalive.
#include "keepalive_manager.hpp"

#include "coro.hpp"

namespace coetcd::detail {

using namespace std::chrono_literals;

keepalive_manager::keepalive_manager(std::shared_ptr<client_impl> c)
    : client_(std::move(c)), timer_(client_->strand_), reopen_timer_(client_->strand_) {}

void keepalive_manager::add(const std::shared_ptr<kept_lease>& l, std::chrono::seconds ttl_hint) {
  auto now = std::chrono::steady_clock::now();
  l->ttl = ttl_hint.count() > 0 ? std::chrono::duration_cast<std::chrono::steady_clock::duration>(ttl_hint)
                                : std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                      client_->options_.request_timeout);
  // From `since`, not now: the grant's answer took its time to come, and this dispatch too.
  l->set_deadline(std::min(l->since, now) + l->ttl);
  l->next_send = now;
  if (closed_) return lose(l, error::client_closed);
  leases_.emplace(l->id, l);
  count_leases();
  if (!stream_) open();
  tick();
}

namespace {
// A wait's outcome for a keepalive ended by `why`: stop() is the wait's own end, anything else
// the loss it waited for.
void tell_loss(client_impl& c, handler<loss_reason> h, error_code why) {
  if (why == asio::error::operation_aborted) return c.complete(std::move(h), why, loss_reason{});
  c.complete(std::move(h), error_code{}, loss_reason{loss_kind_of(why), why});
}
}  // namespace

void keepalive_manager::wait(const std::shared_ptr<kept_lease>& l, handler<loss_reason> h,
                             std::shared_ptr<early_cancel> cancel) {
  if (l->done) return tell_loss(*client_, std::move(h), l->lost);
  auto key = l->next_waiter++;
  bool cancelled = cancel->registered([weak = std::weak_ptr<kept_lease>(l), key] {
    auto l = weak.lock();
    if (!l) return;
    auto it = l->waiters.find(key);
    if (it == l->waiters.end()) return;
    auto h = std::move(it->second.handler);
    l->waiters.erase(it);
    l->client->complete(std::move(h), make_error_code(asio::error::operation_aborted), loss_reason{});
  });
  if (cancelled) return client_->complete(std::move(h), make_error_code(asio::error::operation_aborted), loss_reason{});
  l->waiters.emplace(key, kept_lease::waiter{std::move(h),
                                             asio::prefer(client_->io_ex_, asio::execution::outstanding_work.tracked)});
}

void keepalive_manager::stop(const std::shared_ptr<kept_lease>& l) {
  if (!l->done) lose(l, asio::error::operation_aborted);
}

void keepalive_manager::close() {
  closed_ = true;
  timer_.cancel();
  reopen_timer_.cancel();
  if (stream_) stream_->cancel();
  auto all = std::exchange(leases_, {});
  count_leases();
  for (auto& [id, l] : all) lose(l, error::client_closed);
}

void keepalive_manager::lose(const std::shared_ptr<kept_lease>& l, error_code why) {
  if (l->done) return;
  l->done = true;
  l->lost = why;
  for (auto it = leases_.lower_bound(l->id); it != leases_.end() && it->first == l->id; ++it) {
    if (it->second == l) {
      leases_.erase(it);
      count_leases();
      break;
    }
  }
  auto waiters = std::exchange(l->waiters, {});
  for (auto& [key, w] : waiters) tell_loss(*client_, std::move(w.handler), why);
  if (leases_.empty()) timer_.cancel();  // nothing to renew: let io_context::run() return
}

void keepalive_manager::send(kept_lease& l, steady_time now) {
  l.in_flight = true;
  l.sent_at = now;
  pb::LeaseKeepAliveRequest req;
  req.set_id(l.id);
  stream_->write(std::move(req));
}

void keepalive_manager::tick() {
  if (closed_) return;
  auto now = std::chrono::steady_clock::now();
  std::vector<std::shared_ptr<kept_lease>> expired;
  for (auto& [id, l] : leases_) {
    if (now >= l->deadline) {
      expired.push_back(l);
      continue;
    }
    if (!l->in_flight && now >= l->next_send && stream_ && stream_->ready()) send(*l, now);
    if (!l->late_told && now >= late_point(*l) && client_->wants_events()) {
      l->late_told = true;
      client_->emit({.kind = event_kind::keepalive_late,
                     .detail = l->in_flight ? "renewal sent, not answered" : "no stream to renew on",
                     .lease = l->id,
                     .duration = std::chrono::duration_cast<std::chrono::milliseconds>(l->deadline - now)});
    }
  }
  for (auto& l : expired) lose(l, error::lease_expired);
  // etcd renews a stream's leases one at a time, and a renewal that a follower forwards to a
  // leader which has just been cut off waits for etcd's request timeout (7 s) before it fails:
  // every lease behind it would expire meanwhile (a partition test lost 3 s sessions on the
  // majority side this way). A stream that has answered nothing since a renewal went out, for
  // longer than that renewal's stall point allows, is ended; the next one, usually on another
  // member, renews everything at once.
  if (stream_ && stream_->ready() && !resetting_) {
    for (auto& [id, l] : leases_) {
      if (!l->in_flight || now < stall_point(*l)) continue;
      resetting_ = true;
      ended_by_ = error::request_timeout;
      stream_->cancel();
      break;
    }
  }
  arm_timer();
}

void keepalive_manager::arm_timer() {
  if (leases_.empty()) return;
  auto when = steady_time::max();
  bool can_send = stream_ && stream_->ready();
  const bool events = client_->wants_events();
  for (auto& [id, l] : leases_) {
    when = std::min(when, l->deadline);
    if (!l->in_flight && can_send) when = std::min(when, l->next_send);
    if (l->in_flight && can_send && !resetting_) when = std::min(when, stall_point(*l));
    if (events && !l->late_told) when = std::min(when, late_point(*l));
  }
  timer_.expires_at(when);
  timer_.async_wait([weak = weak_from_this()](error_code ec) {
    if (ec) return;  // re-armed or closed
    if (auto self = weak.lock()) self->tick();
  });
}

void keepalive_manager::on_message(const pb::LeaseKeepAliveResponse& r) {
  backoff_.reset();
  auto now = std::chrono::steady_clock::now();
  last_answer_ = now;
  std::vector<std::shared_ptr<kept_lease>> gone;
  for (auto it = leases_.lower_bound(r.id()); it != leases_.end() && it->first == r.id(); ++it) {
    auto& l = *it->second;
    if (!l.in_flight) continue;
    l.in_flight = false;
    if (r.ttl() <= 0) {
      gone.push_back(it->second);
      continue;
    }
    // Answered after the local deadline (the timer that would have lost it is late): the lease
    // may have counted as lost already (session::lost() reads the clock), and must stay so.
    if (now >= l.deadline) continue;
    auto ttl = std::chrono::seconds(r.ttl());
    l.set_deadline(l.sent_at + ttl);
    l.ttl = ttl;
    l.late_told = false;
    l.next_send = now + std::max<std::chrono::steady_clock::duration>(ttl / 3, 500ms);
  }
  for (auto& l : gone) lose(l, error::lease_not_found);
  arm_timer();
}

void keepalive_manager::open() {
  if (closed_ || stream_ || opening_ || reopen_scheduled_ || leases_.empty()) return;
  opening_ = true;
  client_->with_token([self = shared_from_this()](error_code ec) {
    self->opening_ = false;
    if (self->closed_) return;
    if (ec) return self->on_closed(ec);
    std::weak_ptr<keepalive_manager> weak = self;
    stream_type::callbacks cb{
        [weak] { if (auto s = weak.lock()) s->on_ready(); },
        [weak](const pb::LeaseKeepAliveResponse& r) { if (auto s = weak.lock()) s->on_message(r); },
        [weak](error_code ec) { if (auto s = weak.lock()) s->on_closed(ec); }};
    self->stream_ = std::make_shared<stream_type>(self->client_, std::move(cb));
    self->stream_->start([c = self->client_](grpc::ClientContext* ctx, grpc::CompletionQueue* q) {
      return c->lease_->PrepareAsyncLeaseKeepAlive(ctx, q);
    });
  });
}

void keepalive_manager::on_ready() {
  if (auto why = std::exchange(ended_by_, std::nullopt)) {
    bump(client_->telemetry_.stream(stream_kind::keepalive).reopened);
    client_->emit({.kind = event_kind::stream_reopened, .name = "LeaseKeepAlive", .error = *why});
  }
  tick();
}

void keepalive_manager::on_closed(error_code ec) {
  resetting_ = false;
  if (stream_ && ec == error::invalid_auth_token) client_->invalidate_token(stream_->token());
  stream_.reset();
  if (closed_) return;
  if (is_fatal_stream_error(ec)) {
    ended_by_.reset();  // nothing reopens; a later lease starts a new story
    auto all = std::exchange(leases_, {});
    count_leases();
    for (auto& [id, l] : all) lose(l, ec);
    return;
  }
  if (!ended_by_) ended_by_ = ec;
  // Renewals in flight on the dead stream will never be answered: resend on the next one.
  // Deadlines stay: they are what decides that a lease is lost.
  for (auto& [id, l] : leases_) l->in_flight = false;
  arm_timer();
  if (leases_.empty() || reopen_scheduled_) return;
  reopen_scheduled_ = true;
  reopen_timer_.expires_after(backoff_.next());
  reopen_timer_.async_wait([weak = weak_from_this()](error_code) {
    if (auto self = weak.lock()) {
      self->reopen_scheduled_ = false;
      self->open();
    }
  });
}

}  // namespace coetcd::detail

namespace coetcd {

lease_keepalive client::keep_alive(std::int64_t id, std::chrono::seconds ttl_hint) {
  if (!impl_) return lease_keepalive();  // a moved-from client keeps nothing alive
  return detail::keep_alive_on(impl_, id, ttl_hint);
}

lease_keepalive detail::keep_alive_on(const std::shared_ptr<detail::client_impl>& impl, std::int64_t id,
                                      std::chrono::seconds ttl_hint) {
  return lease_keepalive(start_keepalive(impl, id, ttl_hint, std::chrono::steady_clock::now()), id);
}

std::shared_ptr<detail::kept_lease> detail::start_keepalive(const std::shared_ptr<detail::client_impl>& impl,
                                                            std::int64_t id, std::chrono::seconds ttl_hint,
                                                            steady_time since) {
  auto l = std::make_shared<detail::kept_lease>();
  l->id = id;
  l->client = impl;
  l->since = since;
  asio::dispatch(impl->strand_, [l, ttl_hint] {
    if (l->client->closed()) {
      l->done = true;
      l->lost = error::client_closed;
      return;
    }
    l->manager = l->client->keepalives().shared_from_this();
    l->manager->add(l, ttl_hint);
  });
  return l;
}

lease_keepalive& lease_keepalive::operator=(lease_keepalive&& other) noexcept {
  if (this != &other) {
    close();
    state_ = std::move(other.state_);
    id_ = other.id_;
  }
  return *this;
}

lease_keepalive::~lease_keepalive() { close(); }

lease_keepalive::executor_type lease_keepalive::get_executor() const noexcept {
  return state_ ? state_->client->io_ex_ : executor_type();
}

void lease_keepalive::close() {
  if (!state_) return;
  auto s = state_;
  asio::dispatch(s->client->strand_, [s] {
    if (s->manager) s->manager->stop(s);
  });
}

void lease_keepalive::start_wait(const std::shared_ptr<detail::kept_lease>& s,
                                 asio::any_completion_handler<void(error_code, loss_reason)> h) {
  if (!s) return detail::fail_empty(std::move(h));
  auto cancel = detail::early_cancel::take(asio::get_associated_cancellation_slot(h), s->client->strand_);
  asio::dispatch(s->client->strand_, [s, cancel, h = std::move(h)]() mutable {
    if (s->manager) return s->manager->wait(s, std::move(h), std::move(cancel));
    detail::tell_loss(*s->client, std::move(h), s->done ? s->lost : make_error_code(error::client_closed));
  });
}

}  // namespace coetcd
