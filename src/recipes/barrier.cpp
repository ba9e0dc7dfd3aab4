// coetcd::barrier: hold (create if absent), release (delete), wait (until absent).
#include "recipes/held_key.hpp"

#include <coetcd/barrier.hpp>

namespace coetcd {
namespace detail {

struct barrier_state {
  std::shared_ptr<client_impl> impl;
  std::shared_ptr<session_state> session;  // null: no lease
  std::string key;
  pending_ops pending;  // operations in flight, aborted when the object goes
};

std::shared_ptr<barrier_state> make_barrier(const std::shared_ptr<client_impl>& c, std::string_view name, std::int64_t) {
  if (name.empty()) throw boost::system::system_error(make_error_code(error::empty_key), "coetcd::barrier");
  if (!c) throw boost::system::system_error(make_error_code(error::client_closed), "coetcd::barrier");
  auto s = std::make_shared<barrier_state>();
  s->impl = c;
  s->key = std::string(name);
  return s;
}

namespace {

asio::awaitable<error_code> hold(std::shared_ptr<barrier_state> s) {
  put_options po;
  if (s->session) {
    if (s->session->lost) co_return error::session_lost;
    po.lease = s->session->lease;
  }
  auto t = txn().when(compare::version(s->key) == 0).then(txn_op::put(s->key, "", po));
  auto [ec, r] = co_await txn_on(s->impl, std::move(t));
  if (!ec && !r.succeeded) ec = error::key_exists;
  co_return ec;
}

asio::awaitable<error_code> release(std::shared_ptr<barrier_state> s) {
  auto del = txn().then(txn_op::del(s->key));  // named: no temporary inside a co_await (g++ 12)
  auto [ec, r] = co_await txn_on(s->impl, std::move(del));
  co_return ec;
}

asio::awaitable<error_code> wait(std::shared_ptr<barrier_state> s) {
  auto [ec, r] = co_await get_on(s->impl, s->key, get_options{});
  if (ec || r.kvs.empty()) co_return ec;
  co_return co_await wait_key_event(s->impl, s->key, r.header.revision + 1, watch_event::kind::del);
}

}  // namespace

void start_barrier_hold(const std::shared_ptr<barrier_state>& s, handler<> h) {
  if (!s) return fail_empty(std::move(h));
  spawn_owned_op(s->impl, hold(s), std::move(h), std::shared_ptr<pending_ops>(s, &s->pending));
}
void start_barrier_release(const std::shared_ptr<barrier_state>& s, handler<> h) {
  if (!s) return fail_empty(std::move(h));
  spawn_owned_op(s->impl, release(s), std::move(h), std::shared_ptr<pending_ops>(s, &s->pending));
}
void start_barrier_wait(const std::shared_ptr<barrier_state>& s, handler<> h) {
  if (!s) return fail_empty(std::move(h));
  spawn_owned_op(s->impl, wait(s), std::move(h), std::shared_ptr<pending_ops>(s, &s->pending));
}

namespace {
void close_barrier(std::shared_ptr<barrier_state> s) noexcept {
  if (!s) return;  // moved from
  auto& strand = s->impl->strand_;
  asio::dispatch(strand, [s = std::move(s)] { s->pending.abort_all(); });
}
}  // namespace

asio::any_io_executor barrier_executor(const std::shared_ptr<barrier_state>& s) noexcept {
  return s ? s->impl->io_ex_ : asio::any_io_executor();
}

}  // namespace detail

barrier::~barrier() { detail::close_barrier(std::move(state_)); }

barrier& barrier::operator=(barrier&& other) noexcept {
  if (this != &other) {
    detail::close_barrier(std::move(state_));
    state_ = std::move(other.state_);
  }
  return *this;
}

barrier::barrier(session& s, std::string_view name) {
  if (!detail::access::state(s)) throw boost::system::system_error(make_error_code(error::session_lost), "coetcd::barrier");
  state_ = detail::make_barrier(detail::access::state(s)->impl, name, s.lease());
  state_->session = detail::access::state(s);
}

}  // namespace coetcd
