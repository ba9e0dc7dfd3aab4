// A semaphore keeps one key per acquisition, not one per session as mutex does: acquisitions of
// one session hold together up to the permits, so they need no local queue, and each is queued
// by create revision with every other acquisition of the name. The rule (turn_rule::permits) is
// walked by the txn's read for the first look and by the name's shared view while waiting.
#include "queue_ops.hpp"

#include "core/loss_waits.hpp"

#include <boost/asio/steady_timer.hpp>

#include <coetcd/semaphore.hpp>

#include <algorithm>
#include <list>
#include <tuple>
#include <optional>

namespace coetcd::detail {

struct permit_hold {
  std::string key;
  std::int64_t rev = 0;
  std::int64_t n = 0;
};

struct semaphore_state {
  std::shared_ptr<session_state> session;
  std::string name;
  std::string prefix;  // name + "/"
  std::int64_t permits = 0;
  pending_ops pending;    // acquisitions in flight, aborted when the object goes
  std::shared_ptr<lock_view> view;  // once a wait needed it, kept for the next acquisitions
  std::shared_ptr<lock_counters> counters;
};

/// One acquisition's permits, owned by its semaphore::hold. It keeps the object's state (name,
/// view, counters), not the object.
struct permit_state {
  std::shared_ptr<semaphore_state> sem;
  permit_hold hold;
  std::atomic<bool> held{true};      // goes false on the strand, read by operator bool anywhere
  std::shared_ptr<loss_waits> losses;  // on the strand, made at the first async_wait_lost
};

namespace {

using clock = std::chrono::steady_clock;

// The permits may be gone already (a timed-out delete that was applied): the deleting is
// retried only while the session lives, since its lease takes the key with it after that.
asio::awaitable<void> delete_later(std::shared_ptr<session_state> s, std::string key, std::int64_t rev) {
  delete_in_flight deleting(*s, key);
  co_await delete_key(*s, key, rev);
}

/// Deletes a held key. Completes with the first attempt's outcome; a failure an outage explains
/// is retried in the background.
asio::awaitable<error_code> give_up(semaphore_state& m, permit_hold h) {
  auto& s = *m.session;
  if (auto it = s.key_users.find(h.key); it != s.key_users.end() && --it->second <= 0) s.key_users.erase(it);
  if (s.lost) co_return error::session_lost;
  std::tuple<error_code, bool> sent;
  {
    delete_in_flight deleting(s, h.key);
    // A plain DeleteRange (rev 0), cheaper for etcd 3.4 than a txn: the key is this
    // acquisition's alone and never made again, so a late copy of the delete cannot hurt.
    auto resent = std::make_shared<bool>(false);
    if (m.view) sent = co_await m.view->core().release(h.key, 0, resent);
    else sent = co_await batched_delete(s.impl, h.key, resent);
    // A delete resent after a failure that was in fact applied finds its key gone: ours.
    if (*resent) std::get<1>(sent) = true;
  }
  auto [ec, deleted] = sent;
  if (!ec) {
    if (!deleted) co_return error::session_lost;  // the lease took it: the permits were gone
    if (s.impl->wants_events())
      s.impl->emit({.kind = event_kind::lock_released, .name = m.name, .key = h.key,
                    .detail = std::to_string(h.n) + " of " + std::to_string(m.permits) + " permits",
                    .lease = s.lease, .revision = h.rev});
    co_return error_code{};
  }
  if (may_pass(ec) && !s.lost && !s.impl->closed())
    asio::co_spawn(s.impl->strand_, delete_later(m.session, h.key, h.rev), asio::detached);
  co_return ec;
}

/// The rule over every key up to and including `key` (in any order): sets `holds`.
error_code weigh_up_to(const std::string& prefix, std::vector<key_value>& kvs, const std::string& key,
                       std::int64_t permits, bool& holds) {
  std::sort(kvs.begin(), kvs.end(), [](const key_value& a, const key_value& b) {
    return std::tie(a.create_revision, a.key) < std::tie(b.create_revision, b.key);
  });
  permit_tally tally(prefix);
  holds = false;
  for (const auto& kv : kvs) {
    tally.add(kv);
    if (kv.key == key) return tally.turn(permits, holds);
  }
  return error::session_lost;  // our key is gone
}

asio::awaitable<error_code> take_permits(std::shared_ptr<semaphore_state> mp, std::int64_t n, bool try_only,
                                         permit_hold& granted) {
  co_await handle_cancellation_manually();
  auto& m = *mp;
  auto& s = *m.session;
  if (n < 1 || n > m.permits) co_return error::invalid_argument;
  if (s.impl->closed()) co_return error::client_closed;
  if (s.lost) co_return error::session_lost;
  const auto since = clock::now();
  const std::string key = m.prefix + lease_hex(s.lease) + "_" + lease_hex(++s.last_permit_key);
  const std::string value = std::to_string(n) + "/" + std::to_string(m.permits);
  const turn_rule rule{.permits = m.permits};
  ++s.key_users[key];
  // A running view of the name spares the txn its read; a try needs the read to answer at once.
  if (!m.view && !try_only) m.view = existing_lock_view(s.impl, m.prefix);
  const std::shared_ptr<lock_view> via = try_only ? nullptr : m.view;  // named: g++ 12 and temporaries
  const bool cancellable = co_await can_be_cancelled();
  bump(m.counters->waiting);
  auto a = co_await acquire_or_abandon(m.session, m.prefix, key, value, via, cancellable, rule);
  error_code ec = a.ec;
  // Lost while the txn was on the wire: the loss was told before anything of ours listened.
  if (!ec && s.lost) ec = error::session_lost;
  if (!ec && !a.owner && a.undecided && try_only) {
    // The read was cut inside our revision's group: read every key up to ours, as of the txn.
    auto [rec, r] = co_await get_on(s.impl, m.prefix,
                                    get_options{.prefix = true, .revision = a.txn.header.revision,
                                                .max_create_revision = a.rev});
    ec = rec;
    bool holds = false;
    if (!ec) ec = weigh_up_to(m.prefix, r.kvs, key, m.permits, holds);
    a.owner = !ec && holds;
  }
  if (!ec && !a.owner) {
    if (try_only) ec = error::locked;
    else if (co_await cancellation_requested()) ec = asio::error::operation_aborted;
    else if (a.rev == 0) ec = error::session_lost;
    else ec = co_await wait_turn(s, m.view, m.prefix, key, a.rev, rule);
  }
  bump(m.counters->waiting, -1);
  // Cancelled after the read showed our turn: the caller has moved on and would never release.
  if (!ec && (m.pending.gone() || co_await cancellation_requested())) ec = asio::error::operation_aborted;
  if (!ec && s.lost_by_now()) ec = error::session_lost;  // lost during a try's second read, or past its deadline
  if (ec) {
    // a.rev 0: the txn failed and its outcome is unknown; release_key sweeps a late put up.
    // A refused try waits for its key's delete (etcd has just answered; a process that exits on
    // `locked` must leave no key). Nobody else waits for a clean-up: see release_key_later.
    if (a.abandoned) co_return ec;
    if (ec == error::locked) {
      // Waited for like a try_lock's delete, but a cancellation ends the wait at once (a
      // `try_acquire || timer` through an outage); the delete goes on in the background.
      // (done may run inside release_key_later: a timer cancelled before its wait would not wake it)
      auto deleted = std::make_shared<std::pair<asio::steady_timer, bool>>(
          asio::steady_timer(s.impl->strand_, asio::steady_timer::time_point::max()), false);
      release_key_later(s, key, a.rev, [deleted](bool) {
        deleted->second = true;
        deleted->first.cancel();
      });
      // A cancellation that came before the wait started is not replayed onto it: look first.
      if (!deleted->second && !(co_await cancellation_requested())) co_await deleted->first.async_wait(as_result);
      if (!deleted->second && co_await cancellation_requested()) ec = asio::error::operation_aborted;
    } else {
      release_key_later(s, key, a.rev);
    }
    co_return ec;
  }
  granted = {key, a.rev, n};
  bump(m.counters->held, n);
  bump(m.counters->acquired);
  m.counters->record_wait(clock::now() - since);
  if (s.impl->wants_events())
    s.impl->emit({.kind = event_kind::lock_acquired, .name = m.name, .key = key,
                  .detail = std::to_string(n) + " of " + std::to_string(m.permits) + " permits", .lease = s.lease,
                  .revision = a.rev,
                  .duration = std::chrono::duration_cast<std::chrono::milliseconds>(clock::now() - since)});
  co_return error_code{};
}

asio::awaitable<std::tuple<error_code, semaphore::hold>> acquire_permits(std::shared_ptr<semaphore_state> m, std::int64_t n,
                                                                         bool try_only) {
  permit_hold granted;
  auto ec = co_await take_permits(m, n, try_only, granted);
  if (ec) co_return std::make_tuple(ec, semaphore::hold());
  auto p = std::make_shared<permit_state>();
  p->sem = std::move(m);
  p->hold = std::move(granted);
  co_return std::make_tuple(error_code{}, semaphore::hold(std::move(p)));
}

asio::awaitable<error_code> release_permits(std::shared_ptr<permit_state> p) {
  if (!p->held.exchange(false)) co_return error::not_locked;
  if (p->losses) p->losses->end();
  bump(p->sem->counters->held, -p->hold.n);
  co_return co_await give_up(*p->sem, p->hold);
}

asio::awaitable<void> release_in_background(std::shared_ptr<permit_state> p) { co_await release_permits(std::move(p)); }

}  // namespace
}  // namespace coetcd::detail

namespace coetcd {

semaphore::semaphore(session& s, std::string_view name, std::int64_t permits)
    : state_(std::make_shared<detail::semaphore_state>()) {
  if (name.empty()) throw boost::system::system_error(make_error_code(error::empty_key), "coetcd: semaphore name");
  if (permits < 1)
    throw boost::system::system_error(make_error_code(error::invalid_argument), "coetcd: semaphore permits < 1");
  if (!detail::access::state(s)) throw boost::system::system_error(make_error_code(error::session_lost), "coetcd: semaphore session");
  state_->session = detail::access::state(s);
  state_->name = std::string(name);
  state_->prefix = state_->name + "/";
  state_->permits = permits;
  state_->counters = state_->session->impl->telemetry_.lock(state_->name);
}

semaphore::~semaphore() { abandon(); }

semaphore& semaphore::operator=(semaphore&& other) noexcept {
  if (this != &other) {
    abandon();
    state_ = std::move(other.state_);
  }
  return *this;
}

void semaphore::abandon() noexcept {
  if (!state_) return;
  auto m = std::move(state_);
  m->pending.mark_gone();
  asio::dispatch(m->session->impl->strand_, [m] { m->pending.abort_all(); });
}

void semaphore::run(const std::shared_ptr<detail::semaphore_state>& m, bool try_only, std::int64_t n,
                    asio::any_completion_handler<void(error_code, hold)> h) {
  if (!m) return detail::fail_empty(std::move(h));
  detail::spawn_hold_op<hold>(m->session->impl, detail::acquire_permits(m, n, try_only), std::move(h),
                              std::shared_ptr<detail::pending_ops>(m, &m->pending));
}

semaphore::executor_type semaphore::get_executor() const noexcept {
  return state_ ? state_->session->impl->io_ex_ : executor_type();
}
const std::string& semaphore::name() const noexcept { return state_ ? state_->name : detail::empty_string(); }
std::int64_t semaphore::permits() const noexcept { return state_ ? state_->permits : 0; }

semaphore::hold& semaphore::hold::operator=(hold&& other) noexcept {
  if (this != &other) {
    if (state_) drop(std::move(state_));
    state_ = std::move(other.state_);
  }
  return *this;
}

semaphore::hold::~hold() {
  if (state_) drop(std::move(state_));
}

void semaphore::hold::drop(std::shared_ptr<detail::permit_state> p) noexcept {
  if (!p->held.load()) return;  // false only ever goes false, on the strand
  auto& strand = p->sem->session->impl->strand_;
  asio::dispatch(strand, [p = std::move(p)]() mutable {
    auto& strand = p->sem->session->impl->strand_;
    asio::co_spawn(strand, detail::release_in_background(std::move(p)), asio::detached);
  });
}

semaphore::hold::operator bool() const noexcept {
  return state_ && state_->held && !state_->sem->session->counts_as_lost();
}
std::int64_t semaphore::hold::permits() const noexcept { return state_ ? state_->hold.n : 0; }
const std::string& semaphore::hold::key() const noexcept { return state_ ? state_->hold.key : detail::empty_string(); }
compare semaphore::hold::fence() {
  if (!state_) detail::throw_empty("coetcd: fence() of an empty semaphore hold");
  // The key is this acquisition's alone and never made again: its create revision names it.
  return compare::create_revision(state_->hold.key) == (state_->held ? state_->hold.rev : -1);
}
semaphore::hold::executor_type semaphore::hold::get_executor() const noexcept {
  return state_ ? state_->sem->session->impl->io_ex_ : executor_type();
}

void semaphore::hold::start_release(const std::shared_ptr<detail::permit_state>& p,
                                    asio::any_completion_handler<void(error_code)> h) {
  if (!p) return detail::fail_empty(std::move(h));
  detail::spawn_op(p->sem->session->impl, detail::release_permits(p), std::move(h));
}

void semaphore::hold::start_wait_lost(const std::shared_ptr<detail::permit_state>& p,
                                      asio::any_completion_handler<void(error_code, loss_reason)> h) {
  if (!p) return detail::fail_empty(std::move(h));
  detail::wait_hold_lost(p->sem->session, p->losses, [p] { return !p->held; }, std::move(h), p);
}

}  // namespace coetcd
