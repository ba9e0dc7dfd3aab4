// coetcd::double_barrier: Go's DoubleBarrier steps (enter: put a waiter key, count, wait for
// ready; leave: the lowest waits for the highest, the others for the lowest).
#include "recipes/held_key.hpp"

#include <coetcd/double_barrier.hpp>

namespace coetcd {
namespace detail {

struct double_barrier_state {
  std::shared_ptr<session_state> session;
  std::shared_ptr<client_impl> impl;
  std::string name;
  int count = 0;
  std::string my_key;  // our waiter key while entered
};

namespace {

std::string waiters(const double_barrier_state& s) { return s.name + "/waiters"; }
std::string ready(const double_barrier_state& s) { return s.name + "/ready"; }

// Deletes our waiter key (a cancelled or refused enter); the caller makes it run to its end.
asio::awaitable<void> take_out(double_barrier_state& s) {
  if (s.my_key.empty()) co_return;
  auto t = txn().then(txn_op::del(s.my_key));
  s.my_key.clear();
  auto [ec, r] = co_await txn_on(s.impl, std::move(t));
  (void)ec;
}

asio::awaitable<error_code> enter_steps(double_barrier_state& s) {
  if (s.session->lost) co_return error::session_lost;
  // Go's newUniqueEphemeralKey: `waiters/<now in ns>` under the lease, another ns if taken.
  std::int64_t rev = 0;
  put_options po;
  po.lease = s.session->lease;
  while (rev == 0) {
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    auto key = waiters(s) + "/" + std::to_string(ns);
    auto [ec, r] = co_await txn_on(s.impl, txn().when(compare::version(key) == 0).then(txn_op::put(key, "", po)));
    if (ec) co_return ec == error::lease_not_found ? make_error_code(error::session_lost) : ec;
    if (r.succeeded) {
      rev = r.header.revision;
      s.my_key = key;
    }
  }
  get_options all;
  all.prefix = true;
  all.count_only = true;
  auto [gec, g] = co_await get_on(s.impl, waiters(s) + "/", all);
  if (gec) co_return gec;
  if (g.count > s.count) co_return error::too_many_clients;
  if (g.count == s.count) {
    auto [pec, p] = co_await txn_on(s.impl, txn().then(txn_op::put(ready(s), "")));
    co_return pec;
  }
  co_return co_await wait_key_event(s.impl, ready(s), rev, watch_event::kind::put);
}

asio::awaitable<error_code> enter(std::shared_ptr<double_barrier_state> s) {
  error_code ec;
  std::exception_ptr cancelled;
  try {
    ec = co_await enter_steps(*s);
  } catch (...) {
    cancelled = std::current_exception();
  }
  if (cancelled || ec) {
    co_await asio::this_coro::reset_cancellation_state();
    co_await asio::this_coro::throw_if_cancelled(false);
    co_await take_out(*s);
    co_await asio::this_coro::throw_if_cancelled(true);
  }
  if (cancelled) std::rethrow_exception(cancelled);
  co_return ec;
}

asio::awaitable<error_code> leave(std::shared_ptr<double_barrier_state> s) {
  for (;;) {
    get_options all;
    all.prefix = true;
    auto [ec, r] = co_await get_on(s->impl, waiters(*s) + "/", all);
    if (ec) co_return ec;
    if (r.kvs.empty()) break;
    auto lowest = r.kvs.front(), highest = r.kvs.front();
    for (auto& kv : r.kvs) {
      if (kv.mod_revision < lowest.mod_revision) lowest = kv;
      if (kv.mod_revision > highest.mod_revision) highest = kv;
    }
    if (r.kvs.size() == 1 && lowest.key == s->my_key) {
      // The last one out closes the barrier for the next round.
      auto t = txn().then(txn_op::del(ready(*s))).then(txn_op::del(s->my_key));
      auto [dec, d] = co_await txn_on(s->impl, std::move(t));
      if (dec) co_return dec;
      s->my_key.clear();
      break;
    }
    if (lowest.key == s->my_key) {
      auto wec = co_await wait_key_event(s->impl, highest.key, highest.mod_revision, watch_event::kind::del);
      if (wec) co_return wec;
      continue;
    }
    if (!s->my_key.empty()) {
      auto [dec, d] = co_await txn_on(s->impl, txn().then(txn_op::del(s->my_key)));
      if (dec) co_return dec;
      s->my_key.clear();
    }
    auto wec = co_await wait_key_event(s->impl, lowest.key, lowest.mod_revision, watch_event::kind::del);
    if (wec) co_return wec;
  }
  co_return error_code{};
}

}  // namespace

void start_double_enter(const std::shared_ptr<double_barrier_state>& s, handler<> h) {
  if (!s) return fail_empty(std::move(h));
  spawn_op(s->impl, enter(s), std::move(h));
}
void start_double_leave(const std::shared_ptr<double_barrier_state>& s, handler<> h) {
  if (!s) return fail_empty(std::move(h));
  spawn_op(s->impl, leave(s), std::move(h));
}

}  // namespace detail

double_barrier::double_barrier(session& s, std::string_view name, int count) {
  auto fail = [](error e) { throw boost::system::system_error(make_error_code(e), "coetcd::double_barrier"); };
  if (name.empty()) fail(error::empty_key);
  if (!s.state()) fail(error::session_lost);
  if (count < 1) fail(error::invalid_argument);
  state_ = std::make_shared<detail::double_barrier_state>();
  state_->session = s.state();
  state_->impl = s.state()->impl;
  state_->name = std::string(name);
  state_->count = count;
}

}  // namespace coetcd
