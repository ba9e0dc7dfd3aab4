// coetcd::registration: put the key under a fresh session, watch it and the session, put again.
#include "recipes/held_key.hpp"

#include <coetcd/registration.hpp>

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>

#include <atomic>

namespace coetcd {
namespace detail {

struct registration_state {
  std::shared_ptr<client_impl> impl;
  std::string key, value;
  registration_options options;
  std::atomic<bool> registered{false};
  std::atomic<std::int64_t> lease{0};
  std::atomic<std::uint64_t> puts{0};
  bool running = false;  // on the client's strand, as everything below
  bool stopped = false;
  asio::steady_timer stop_timer;  // never expires: stop() cancels it
  std::minstd_rand spread{std::random_device{}()};

  explicit registration_state(const std::shared_ptr<client_impl>& c) : impl(c), stop_timer(c->strand_) {
    stop_timer.expires_at(asio::steady_timer::time_point::max());
  }
};

namespace {

using namespace asio::experimental::awaitable_operators;
using clock_type = std::chrono::steady_clock;

// Puts the key under the session's lease and reads it back in one txn: the read gives the
// create revision that tells our key from one put over it later, and the revision of this put,
// from which the key is watched (a put over ours, then ours again, keeps the create revision).
struct put_result {
  error_code ec;
  std::int64_t create_rev = 0;
  std::int64_t put_rev = 0;
};
asio::awaitable<put_result> put_key(registration_state& s, session& sess) {
  put_options po;
  po.lease = sess.lease();
  auto t = txn().then(txn_op::put(s.key, s.value, po)).then(txn_op::get(s.key));
  auto [ec, r] = co_await txn_on(s.impl, std::move(t));
  put_result out{ec};
  if (!ec && r.responses.size() == 2 && !r.responses[1].get().kvs.empty()) {
    out.create_rev = r.responses[1].get().kvs.front().create_revision;
    out.put_rev = r.responses[1].get().kvs.front().mod_revision;
  }
  co_return out;
}

// After our key was taken: waits while another lease holds the key (a second registration of it,
// or anyone's put with a lease, which goes with that lease), else two registrants of one key
// would take it from each other for ever. Empty once the key is ours to put again (absent, or
// put without a lease: it would outlive every registrant), else why the session ended.
asio::awaitable<error_code> stand_by(registration_state& s, session& sess) {
  asio::steady_timer pause(s.impl->strand_);
  for (int attempt = 0;;) {
    auto [gec, r] = co_await get_on(s.impl, s.key, get_options{});
    if (cancelled(co_await asio::this_coro::cancellation_state)) co_return asio::error::operation_aborted;
    if (gec && fatal(gec)) co_return gec;
    if (sess.lost()) co_return error::session_lost;
    if (gec) {
      pause.expires_after(backoff(s.options.retry_min, s.options.retry_max, attempt++, s.spread));
      auto [pec] = co_await pause.async_wait(as_result);
      if (pec) co_return asio::error::operation_aborted;
      continue;
    }
    if (r.kvs.empty() || r.kvs.front().lease == 0 || r.kvs.front().lease == sess.lease()) co_return error_code{};
    const auto& theirs = r.kvs.front();
    auto race = wait_lost(sess) || wait_key_gone(s.impl, s.key, theirs.create_revision, theirs.lease, r.header.revision,
                                                 make_error_code(error::not_locked));
    auto raced = co_await std::move(race);
    if (cancelled(co_await asio::this_coro::cancellation_state)) co_return asio::error::operation_aborted;
    if (raced.index() == 0) co_return std::get<0>(raced);
    attempt = 0;  // their key went or changed hands: look again
  }
}

// On one session: put, wait until the key is no longer ours (put again, or stand by while another
// lease holds it) or the session is lost (return why). A put that fails is tried again after a
// pause while the session lives.
asio::awaitable<error_code> hold_on(registration_state& s, session& sess) {
  error_code why;
  int attempt = 0;
  asio::steady_timer pause(s.impl->strand_);
  while (!why) {
    auto [ec, rev, put_rev] = co_await put_key(s, sess);
    if (cancelled(co_await asio::this_coro::cancellation_state)) why = asio::error::operation_aborted;
    else if (ec && fatal(ec)) why = ec;
    else if (sess.lost()) why = error::session_lost;
    else if (ec == error::lease_not_found) why = ec;  // revoked: the keepalive has yet to tell
    if (why) break;
    if (!ec) {
      s.lease = sess.lease();
      s.registered = true;
      ++s.puts;
      const auto since = clock_type::now();
      auto raced = co_await (wait_lost(sess) || wait_key_gone(s.impl, s.key, rev, sess.lease(), put_rev, make_error_code(error::not_locked)));
      s.registered = false;
      s.lease = 0;
      const bool held_long = clock_type::now() - since > std::chrono::seconds(1);
      if (cancelled(co_await asio::this_coro::cancellation_state)) why = asio::error::operation_aborted;
      else if (raced.index() == 0) why = std::get<0>(raced);
      else why = co_await stand_by(s, sess);
      if (why) break;
      // Ours to put again: after a pause that grows while it keeps being taken at once (a writer
      // without a lease that keeps putting it would otherwise trade puts with us).
      attempt = held_long ? 0 : attempt + 1;
    } else {
      ++attempt;
    }
    if (attempt > 0 && cancelled(co_await asio::this_coro::cancellation_state)) why = asio::error::operation_aborted;
    if (attempt > 0 && !why) {
      pause.expires_after(backoff(s.options.retry_min, s.options.retry_max, attempt - 1, s.spread));
      auto [pec] = co_await pause.async_wait(as_result);
      if (pec) why = asio::error::operation_aborted;
    }
  }
  co_return why;
}

// Sessions one after another until cancelled or a failure no retry mends. Cancellation shows as
// operation_aborted results, never as a throw from a co_await: the session is closed first.
asio::awaitable<error_code> keep_registered(registration_state& s) {
  co_await asio::this_coro::throw_if_cancelled(false);
  error_code out;
  int attempt = 0;
  asio::steady_timer pause(s.impl->strand_);
  while (!out) {
    session_options so;
    so.ttl = s.options.ttl;
    auto [sec, sess] = co_await create_session_on(s.impl, so);
    if (sec) {
      if (sec == asio::error::operation_aborted || fatal(sec)) out = sec;
      if (!out && cancelled(co_await asio::this_coro::cancellation_state)) out = asio::error::operation_aborted;
      if (out) break;
      pause.expires_after(backoff(s.options.retry_min, s.options.retry_max, attempt++, s.spread));
      auto [pec] = co_await pause.async_wait(as_result);
      if (pec) out = asio::error::operation_aborted;
      continue;
    }
    attempt = 0;
    auto why = co_await hold_on(s, sess);
    if (cancelled(co_await asio::this_coro::cancellation_state)) why = asio::error::operation_aborted;
    co_await asio::this_coro::reset_cancellation_state();
    co_await close_whatever_happens(sess);
    if (why == asio::error::operation_aborted || fatal(why)) out = why;
  }
  co_return out;
}

asio::awaitable<void> wait_stopped(registration_state& s) {
  if (!s.stopped) co_await s.stop_timer.async_wait(as_result);
}

asio::awaitable<error_code> run_registration(std::shared_ptr<registration_state> s) {
  // Partial and total as terminal: each ends the run the one way, its session closed first.
  co_await stop_on_any_cancellation();
  if (s->running) co_return asio::error::already_started;
  if (s->stopped) co_return asio::error::operation_aborted;
  s->running = true;
  auto outcome = co_await (keep_registered(*s) || wait_stopped(*s));
  s->running = false;
  co_return outcome.index() == 0 ? std::get<0>(outcome) : make_error_code(asio::error::operation_aborted);
}

}  // namespace

void start_registration(const std::shared_ptr<registration_state>& s, handler<> h) {
  if (!s) return fail_empty(std::move(h));
  spawn_op(s->impl, run_registration(s), std::move(h));
}

}  // namespace detail

registration::registration(client& c, std::string key, std::string value, registration_options options) {
  auto fail = [](error e) { throw boost::system::system_error(make_error_code(e), "coetcd::registration"); };
  if (key.empty()) fail(error::empty_key);
  if (options.ttl < std::chrono::seconds(1) || options.retry_min.count() < 1 || options.retry_min > options.retry_max)
    fail(error::invalid_argument);
  if (!detail::access::impl(c)) fail(error::client_closed);
  state_ = std::make_shared<detail::registration_state>(detail::access::impl(c));
  state_->key = std::move(key);
  state_->value = std::move(value);
  state_->options = options;
}

registration& registration::operator=(registration&& other) noexcept {
  if (this != &other) {
    stop();
    state_ = std::move(other.state_);
  }
  return *this;
}

registration::~registration() { stop(); }

void registration::stop() noexcept {
  if (!state_) return;
  auto s = std::move(state_);
  asio::dispatch(s->impl->strand_, [s] {
    s->stopped = true;
    s->stop_timer.cancel();
  });
}

registration::executor_type registration::get_executor() const noexcept {
  return state_ ? state_->impl->io_ex_ : executor_type();
}
const std::string& registration::key() const noexcept { return state_ ? state_->key : detail::empty_string(); }
bool registration::is_registered() const noexcept { return state_ && state_->registered; }
std::int64_t registration::lease() const noexcept { return state_ ? state_->lease.load() : 0; }
std::uint64_t registration::puts() const noexcept { return state_ ? state_->puts.load() : 0; }

}  // namespace coetcd
