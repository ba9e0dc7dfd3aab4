#include "queue_ops.hpp"

#include <coetcd/mutex.hpp>


namespace coetcd::detail {

struct mutex_state {
  std::shared_ptr<session_state> session;
  std::string name;
  std::string prefix;  // name + "/"
  std::string key;     // prefix + hex(lease)
  int holds = 0;       // successful locks of this object not yet unlocked
  std::int64_t rev = 0;
  response_header header;
  std::shared_ptr<lock_view> view;  // kept once contended, so hand-offs reuse the watch
};

namespace {

asio::awaitable<error_code> lock(std::shared_ptr<mutex_state> mp, bool try_only) {
  co_await handle_cancellation_manually();
  auto& m = *mp;
  auto& s = *m.session;
  if (s.lost) co_return error::session_lost;
  if (m.holds > 0) {  // reentrant on the same object
    ++m.holds;
    ++s.key_users[m.key];
    co_return error_code{};
  }
  ++s.key_users[m.key];
  // A name this client has seen contended keeps its view: queue through it (no Range, and the
  // put may ride on a local holder's release).
  if (!m.view) m.view = existing_lock_view(*s.owner, m.prefix);
  // Named, not a temporary in the co_await: g++ 12.2 would destroy that shared_ptr twice.
  const auto view = try_only ? nullptr : m.view;
  const std::string no_value;
  const bool cancellable = co_await can_be_cancelled();
  auto a = co_await acquire_or_abandon(m.session, m.prefix, m.key, no_value, view, cancellable);
  if (a.ec) {
    // The txn may have been applied: remove what it may have made.
    if (!a.abandoned) co_await release_key(s, m.key, 0);
    co_return a.ec;
  }
  if (!a.owner) {
    error_code ec;
    if (try_only) ec = error::locked;
    else if (co_await cancellation_requested()) ec = asio::error::operation_aborted;
    else if (a.rev == 0) ec = error::session_lost;
    else ec = co_await wait_turn(s, m.view, m.prefix, m.key, a.rev);
    if (ec) {
      co_await release_key(s, m.key, a.rev);
      co_return ec;
    }
  }
  m.holds = 1;
  m.rev = a.rev;
  m.header = a.txn.header;
  s.key_rev[m.key] = a.rev;
  co_return error_code{};
}

asio::awaitable<error_code> unlock(std::shared_ptr<mutex_state> mp) {
  // Runs to its outcome even when cancelled: holds is decremented below, so an unlock stopped
  // before its delete would leave the key held with nobody left to release it.
  co_await asio::this_coro::throw_if_cancelled(false);
  auto& m = *mp;
  auto& s = *m.session;
  if (m.holds == 0) co_return error::not_locked;
  --m.holds;
  auto& users = s.key_users[m.key];
  bool stale = s.key_rev[m.key] != m.rev;  // our key was lost and re-created by a newer lock
  if (--users > 0) co_return stale ? make_error_code(error::session_lost) : error_code();
  s.key_users.erase(m.key);
  s.key_rev.erase(m.key);
  if (!m.view) m.view = existing_lock_view(*s.owner, m.prefix);  // waiters came after we got it
  auto resent = std::make_shared<bool>(false);
  // A plain DeleteRange, as in Go's Unlock, not a txn guarded by our create revision: etcd 3.4
  // copies its backend's read buffer for every Txn it applies, so under load a txn delete
  // costs about 15 % of the lock rate. The guard would add nothing: only this session's locks
  // create this key, and they count themselves in key_users and wait for this delete.
  delete_in_flight deleting(s, m.key);
  std::tuple<error_code, bool> sent;
  if (m.view) sent = co_await m.view->core().release(m.key, resent);
  else sent = co_await batched_delete(*s.owner, m.key, resent);
  auto [ec, deleted] = sent;
  if (ec) co_return ec;
  // A delete resent after a failure that was in fact applied (a leader change mid-commit)
  // finds its key gone: that is our release, not a loss.
  co_return deleted || *resent ? error_code() : make_error_code(error::session_lost);
}

}  // namespace
}  // namespace coetcd::detail

namespace coetcd {

mutex::mutex(session& s, std::string_view name) : state_(std::make_shared<detail::mutex_state>()) {
  if (name.empty()) throw boost::system::system_error(make_error_code(error::empty_key), "coetcd: mutex name");
  if (!s.state()) throw boost::system::system_error(make_error_code(error::session_lost), "coetcd: mutex session");
  state_->session = s.state();
  state_->name = std::string(name);
  state_->prefix = state_->name + "/";
  state_->key = state_->prefix + detail::lease_hex(s.lease());
}

mutex::~mutex() {
  if (!state_ || state_->holds == 0) return;
  // Still held: release in the background so the key does not outlive its user.
  auto m = state_;
  asio::co_spawn(m->session->impl->strand_, [](std::shared_ptr<detail::mutex_state> m) -> asio::awaitable<void> {
    while (m->holds > 0) co_await detail::unlock(m);
  }(m), asio::detached);
}

void mutex::start_lock(const std::shared_ptr<detail::mutex_state>& m, bool try_only,
                       asio::any_completion_handler<void(error_code)> h) {
  detail::spawn_op(m->session->impl, detail::lock(m, try_only), std::move(h));
}

void mutex::start_unlock(const std::shared_ptr<detail::mutex_state>& m, asio::any_completion_handler<void(error_code)> h) {
  detail::spawn_op(m->session->impl, detail::unlock(m), std::move(h));
}

void mutex::start_wait_lost(const std::shared_ptr<detail::mutex_state>& m,
                            asio::any_completion_handler<void(error_code)> h) {
  detail::wait_session_lost(m->session, std::move(h));
}

const std::string& mutex::name() const noexcept { return state_->name; }
const std::string& mutex::key() const noexcept { return state_->key; }
bool mutex::held() const noexcept { return state_->holds > 0; }
std::int64_t mutex::fencing_token() const noexcept { return state_->holds > 0 ? state_->rev : 0; }
const response_header& mutex::header() const noexcept { return state_->header; }
compare mutex::is_owner() const { return compare::create_revision(state_->key) == state_->rev; }

}  // namespace coetcd
