// Sessions: a lease kept alive, its loss told to waiters and listeners, and keys deleted under it.
#include "session_state.hpp"

#include "keepalive_manager.hpp"

#include <algorithm>
#include <random>

namespace coetcd::detail {

std::uint64_t random_permit_start() {
  // 64 bits of the system's entropy per session (sessions are rare): a session's numbers then
  // never meet those of another session of the same lease in practice, each taking a short run
  // from 2^60.
  std::random_device rd;
  return ((std::uint64_t{rd()} << 32) | rd()) >> 4;
}

void session_state::finish(error_code reason) {
  if (lost) return;
  lost = true;
  why = reason;
  // Its owner ended it: the wait's own end. Else the loss it waited for.
  for (auto& [id, h] : std::exchange(waiters, {})) {
    if (ended) impl->complete(std::move(h), make_error_code(asio::error::operation_aborted), loss_reason{});
    else impl->complete(std::move(h), error_code{}, loss());
  }
  for (auto& [id, fn] : std::exchange(listeners, {})) fn();
  loss_signal.emit(asio::cancellation_type::terminal);
}

bool session_state::past_deadline(std::chrono::steady_clock::time_point now) const noexcept {
  if (!kept) return false;
  const auto d = kept->published_deadline.load(std::memory_order_relaxed);
  return now.time_since_epoch().count() >= d;
}

bool session_state::lost_by_now(std::chrono::steady_clock::time_point now) {
  if (lost || !past_deadline(now)) return lost;
  // The keepalive loses the lease now (its renewals stop, and the session's own wait for the
  // loss reports it: event and telemetry), and the session ends at once, before the caller grants.
  if (kept->manager) kept->manager->expire_due();
  finish(error::lease_expired);
  return lost;
}

asio::awaitable<void> session_state::wait_deleted(const std::string& key) {
  for (auto it = deleting.find(key); it != deleting.end(); it = deleting.find(key)) {
    auto done = it->second;
    co_await done->async_wait(as_result);
    auto cs = co_await asio::this_coro::cancellation_state;
    if (cs.cancelled() != asio::cancellation_type::none) co_return;
  }
}

delete_in_flight::delete_in_flight(session_state& s, std::string key)
    : s_(s), key_(std::move(key)), done_(std::make_shared<asio::steady_timer>(s.impl->strand_)) {
  done_->expires_at(asio::steady_timer::time_point::max());
  s_.deleting.emplace(key_, done_);
}

delete_in_flight::~delete_in_flight() {
  for (auto [it, end] = s_.deleting.equal_range(key_); it != end; ++it)
    if (it->second == done_) {
      s_.deleting.erase(it);
      break;
    }
  done_->cancel();
}

std::uint64_t session_state::listen(std::function<void()> fn) {
  auto id = next_id++;
  listeners.emplace(id, std::move(fn));
  return id;
}

namespace {

// Holds the client's state, not the user's object: that may be moved while the grant is on the wire.
asio::awaitable<std::tuple<error_code, session>> create(std::shared_ptr<client_impl> c, session_options o) {
  // etcd's MaxLeaseTTL: 9,000,000,000 s.
  if (o.ttl.count() <= 0 || o.ttl.count() > 9'000'000'000) co_return std::make_tuple(make_error_code(error::invalid_argument), session());
  std::int64_t id = o.lease;
  std::int64_t ttl = o.ttl.count();
  std::int64_t left = 0;  // what is left of an adopted lease: it expires then unless renewed
  // Before asking: etcd starts (or measures) the TTL after this, so a deadline counted from here
  // is never later than etcd's.
  const auto asked = std::chrono::steady_clock::now();
  if (id != 0) {
    auto init = [c](handler<lease_ttl_result> h, std::int64_t id) { start_lease_ttl(c, id, false, std::move(h)); };
    auto [ec, r] = co_await asio::async_initiate<decltype(as_result), void(error_code, lease_ttl_result)>(init, as_result, id);
    if (ec) co_return std::make_tuple(ec, session());
    if (r.ttl.count() < 0) co_return std::make_tuple(make_error_code(error::lease_not_found), session());
    ttl = r.granted_ttl.count();
    left = std::max<std::int64_t>(r.ttl.count(), 1);
  } else {
    auto init = [c](handler<lease_grant_result> h, std::int64_t ttl) { start_lease_grant(c, ttl, 0, std::move(h)); };
    auto [ec, g] = co_await asio::async_initiate<decltype(as_result), void(error_code, lease_grant_result)>(init, as_result, ttl);
    if (ec) co_return std::make_tuple(ec, session());
    id = g.id;
    ttl = g.ttl.count();
  }
  // Checked after the last await, and registered in the same turn: two adoptions of one lease
  // racing cannot both pass.
  if (o.lease != 0 && c->keeps_lease(id)) co_return std::make_tuple(make_error_code(error::lease_in_use), session());
  auto s = std::make_shared<session_state>();
  s->impl = c;
  c->adopt(s);
  s->lease = id;
  s->ttl = std::chrono::seconds(ttl);
  // The local deadline until the first renewal answers: the granted TTL of a new lease, what
  // remains of an adopted one (counting from its granted TTL would trust it for too long).
  auto kept = start_keepalive(c, id, left > 0 ? std::chrono::seconds(left) : s->ttl, asked);
  s->kept = kept;
  s->keep = lease_keepalive(std::move(kept), id);
  s->keep.async_wait_lost(asio::bind_executor(s->impl->strand_, [w = std::weak_ptr<session_state>(s)](error_code stopped,
                                                                                                     loss_reason why) {
    auto s = w.lock();
    if (!s || stopped) return;  // stopped by close()/orphan()
    const auto ec = why.cause;
    if (ec != error::client_closed) {
      bump(s->impl->telemetry_.sessions_lost);
      s->impl->emit({.kind = event_kind::session_lost, .error = ec, .lease = s->lease});
    }
    s->finish(ec);
  }));
  co_return std::make_tuple(error_code{}, session(std::move(s)));
}

/// Stops renewing; revokes too unless orphaning. Pending waits see operation_aborted, locks
/// waiting under the session fail with session_lost.
void end_session(const std::shared_ptr<session_state>& s) {
  s->ended = true;
  s->keep.close();
  s->finish(error::session_lost);
}

}  // namespace
}  // namespace coetcd::detail

namespace coetcd::detail {

void wait_session_lost(const std::shared_ptr<session_state>& s, handler<loss_reason> h) {
  if (!s) return fail_empty(std::move(h));
  auto cancel = early_cancel::take(asio::get_associated_cancellation_slot(h), s->impl->strand_);
  asio::dispatch(s->impl->strand_, [s, cancel, h = std::move(h)]() mutable {
    const auto aborted = make_error_code(asio::error::operation_aborted);
    if (s->lost) {
      if (s->ended) return s->impl->complete(std::move(h), aborted, loss_reason{});
      return s->impl->complete(std::move(h), error_code{}, s->loss());
    }
    auto id = s->next_id++;
    if (cancel->registered([w = std::weak_ptr<session_state>(s), id] {
          auto s = w.lock();
          if (!s) return;
          auto it = s->waiters.find(id);
          if (it == s->waiters.end()) return;
          auto h = std::move(it->second);
          s->waiters.erase(it);
          s->impl->complete(std::move(h), make_error_code(asio::error::operation_aborted), loss_reason{});
        }))
      return s->impl->complete(std::move(h), aborted, loss_reason{});
    s->waiters.emplace(id, std::move(h));
  });
}

}  // namespace coetcd::detail

namespace coetcd {

void session::start_create(client& c, session_options o, asio::any_completion_handler<void(error_code, session)> h) {
  detail::start_session_create(detail::access::impl(c), o, std::move(h));
}

void detail::start_session_create(const std::shared_ptr<client_impl>& impl, session_options o,
                                  asio::any_completion_handler<void(error_code, session)> h) {
  auto slot = asio::get_associated_cancellation_slot(h);
  asio::co_spawn(impl->strand_, detail::create(impl, o),
                 asio::bind_cancellation_slot(slot, [impl, h = std::move(h)](std::exception_ptr e,
                                                                             std::tuple<error_code, session> r) mutable {
                   if (e) return impl->complete(std::move(h), detail::exception_to_error(e), session());
                   impl->complete(std::move(h), std::get<0>(r), std::move(std::get<1>(r)));
                 }));
}

session& session::operator=(session&& other) noexcept {
  if (this != &other) {
    session dying(std::move(*this));
    state_ = std::move(other.state_);
  }
  return *this;
}

session::~session() {
  if (!state_) return;
  auto s = state_;
  // Revoke in the background so keys held under the session vanish now, not after the TTL.
  asio::dispatch(s->impl->strand_, [s] {
    if (s->ended) return;
    detail::end_session(s);
    detail::start_lease_revoke(s->impl, s->lease, asio::any_completion_handler<void(error_code, response_header)>(
                                                      [](error_code, response_header) {}));
  });
}

session::executor_type session::get_executor() const noexcept {
  return state_ ? state_->impl->io_ex_ : executor_type();
}
std::int64_t session::lease() const noexcept { return state_ ? state_->lease : 0; }
std::chrono::seconds session::ttl() const noexcept { return state_ ? state_->ttl : std::chrono::seconds(0); }
client& session::get_client() const {
  if (!state_) throw boost::system::system_error(make_error_code(asio::error::bad_descriptor), "coetcd: empty session");
  // user_ is touched only by the user's calls (client's constructor, moves, destructor).
  if (!state_->impl->user_)
    throw boost::system::system_error(make_error_code(error::client_closed), "coetcd: the session's client is gone");
  return *state_->impl->user_;
}
bool session::lost() const noexcept { return !state_ || state_->counts_as_lost(); }
asio::cancellation_slot session::loss_slot() const noexcept {
  return state_ ? state_->loss_signal.slot() : asio::cancellation_slot();
}

void session::start_wait_lost(const std::shared_ptr<detail::session_state>& s,
                              asio::any_completion_handler<void(error_code, loss_reason)> h) {
  detail::wait_session_lost(s, std::move(h));
}

void session::start_close(const std::shared_ptr<detail::session_state>& s,
                          asio::any_completion_handler<void(error_code)> h) {
  if (!s) return detail::fail_empty(std::move(h));
  detail::spawn_op(s->impl, [](std::shared_ptr<detail::session_state> s) -> asio::awaitable<error_code> {
    detail::end_session(s);
    auto [ec, hdr] = co_await detail::lease_revoke_on(s->impl, s->lease);
    co_return ec == error::lease_not_found ? error_code() : ec;  // already gone: the same outcome
  }(s), std::move(h));
}

void session::orphan() {
  if (!state_) return;
  auto s = state_;
  asio::dispatch(s->impl->strand_, [s] { detail::end_session(s); });
}

}  // namespace coetcd
