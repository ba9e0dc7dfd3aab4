// coetcd::double_barrier: Go's DoubleBarrier steps (enter: put a waiter key, rank it by create
// revision, the N-th puts ready; leave: the lowest waits for the highest, the others for the lowest).
#include "recipes/held_key.hpp"
#include "recipes/queue_ops.hpp"
#include "recipes/write_outcome.hpp"

#include <boost/asio/steady_timer.hpp>

#include <coetcd/double_barrier.hpp>

namespace coetcd {
namespace detail {

struct double_barrier_state {
  std::shared_ptr<session_state> session;
  std::shared_ptr<client_impl> impl;
  std::string name;
  int count = 0;
  std::string my_key;  // our waiter key while entered
  bool busy = false;    // an enter or leave runs (one at a time); on the strand
  pending_ops pending;  // operations in flight, aborted when the object goes
};

namespace {

/// The operation that runs, for its lifetime: one at a time, as the header says.
class one_at_a_time {
 public:
  explicit one_at_a_time(double_barrier_state& s) : s_(s) { s_.busy = true; }
  ~one_at_a_time() { s_.busy = false; }
  one_at_a_time(const one_at_a_time&) = delete;
  one_at_a_time& operator=(const one_at_a_time&) = delete;

 private:
  double_barrier_state& s_;
};

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
  // Go's newUniqueEphemeralKey: `waiters/<now in ns>` under the lease, another ns if taken. The
  // key is ours from before the put leaves, and the put is sent again until answered: a delete of
  // it (a cancelled enter) could otherwise overtake a late copy and leave the key behind.
  error_code out;
  std::int64_t rev = 0;
  put_options po;
  po.lease = s.session->lease;
  while (rev == 0 && !out) {
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    s.my_key = waiters(s) + "/" + std::to_string(ns);
    bool unanswered = false, taken = false;
    for (int attempt = 0; rev == 0 && !out && !taken; ++attempt) {
      auto put = txn().when(compare::version(s.my_key) == 0).then(txn_op::put(s.my_key, "", po)).otherwise(txn_op::get(s.my_key));
      auto [ec, r] = co_await txn_on(s.impl, std::move(put));
      if (!ec && r.succeeded) {
        rev = r.header.revision;
      } else if (!ec) {
        const auto& kvs = r.responses.front().get().kvs;
        if (!kvs.empty() && kvs.front().lease == po.lease) rev = kvs.front().create_revision;  // an earlier copy made it
        else taken = true;  // another participant's at the same nanosecond
      } else if (ec == error::lease_not_found) {
        out = error::session_lost;
      } else if (surely_not_applied(ec) && ec != error::endpoints_unreachable && !unanswered) {
        out = ec;
      } else {
        unanswered = unanswered || !surely_not_applied(ec);
        asio::steady_timer pause(s.impl->strand_, retry_pause(std::min(attempt, 4)));
        co_await pause.async_wait(use_awaitable);
      }
    }
  }
  if (out) co_return out;
  // Ranked by create revision, as Go's since etcd's commit 62167d1f1: counting the keys (3.4.23)
  // let two that put theirs at once both count N + 1 and give up, leaving the others shut in. The
  // first N are in, the N-th opens; later keys are refused. One read: the first N keys and `ready`.
  get_options first_n;
  first_n.prefix = true;
  first_n.limit = s.count;
  first_n.order = sort_order::ascend;
  first_n.target = sort_target::create_revision;
  first_n.keys_only = true;
  auto read = txn().then(txn_op::get(waiters(s) + "/", first_n)).then(txn_op::get(ready(s)));
  auto [gec, g] = co_await txn_on(s.impl, std::move(read));
  if (gec) co_return gec;
  const auto& first = g.responses.at(0).get().kvs;
  const auto& ready_kvs = g.responses.at(1).get().kvs;
  // `ready` older than our key, and a key older than `ready` still here: a round opened before we
  // came and is not over. Its participants that left took their keys, so the ranking alone could
  // let us in with those still leaving. A `ready` with no older key left is from a finished round.
  if (!ready_kvs.empty()) {
    const auto opened = ready_kvs.front().mod_revision;
    if (opened < rev && !first.empty() && first.front().create_revision < opened) co_return error::too_many_clients;
  }
  std::int64_t before_us = 0;
  for (const auto& kv : first) before_us += kv.create_revision < rev;
  if (before_us >= s.count) co_return error::too_many_clients;
  if (before_us == s.count - 1) {
    auto ready_put = txn().then(txn_op::put(ready(s), ""));
    auto [pec, p] = co_await txn_on(s.impl, std::move(ready_put));
    co_return pec;
  }
  const auto ready_key = ready(s);
  co_return co_await wait_key_event(s.impl, ready_key, rev, watch_event::kind::put);
}

asio::awaitable<error_code> enter(std::shared_ptr<double_barrier_state> s) {
  // Checked on the strand, before anything: a second operation must not take our key out.
  if (s->busy) co_return make_error_code(asio::error::already_started);
  const one_at_a_time running(*s);
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

// One pass of Go's Leave: the last one out deletes `ready` (done); the lowest waits for the
// highest to go; the others go and wait for the lowest. Each wait ends with the key's delete or
// its lease's end.
asio::awaitable<error_code> leave_step(double_barrier_state& s, const std::string& prefix, bool& done) {
  get_options all;
  all.prefix = true;
  auto [ec, r] = co_await get_on(s.impl, prefix, all);
  if (ec || r.kvs.empty()) {
    done = true;
    co_return ec;
  }
  auto lowest = r.kvs.front(), highest = r.kvs.front();
  for (auto& kv : r.kvs) {
    if (kv.mod_revision < lowest.mod_revision) lowest = kv;
    if (kv.mod_revision > highest.mod_revision) highest = kv;
  }
  if (r.kvs.size() == 1 && lowest.key == s.my_key) {
    done = true;
    auto last = txn().then(txn_op::del(ready(s))).then(txn_op::del(s.my_key));
    auto [dec, d] = co_await txn_on(s.impl, std::move(last));
    if (!dec) s.my_key.clear();
    co_return dec;
  }
  if (lowest.key == s.my_key) co_return co_await wait_key_event(s.impl, highest.key, highest.mod_revision, watch_event::kind::del);
  if (!s.my_key.empty()) {
    auto mine = txn().then(txn_op::del(s.my_key));
    auto [dec, d] = co_await txn_on(s.impl, std::move(mine));
    if (dec) co_return dec;
    s.my_key.clear();
  }
  co_return co_await wait_key_event(s.impl, lowest.key, lowest.mod_revision, watch_event::kind::del);
}

asio::awaitable<error_code> leave(std::shared_ptr<double_barrier_state> s) {
  if (s->busy) co_return make_error_code(asio::error::already_started);
  const one_at_a_time running(*s);
  error_code out;
  bool done = false;
  const auto prefix = waiters(*s) + "/";
  while (!done && !out) out = co_await leave_step(*s, prefix, done);
  co_return out;
}

}  // namespace

void start_double_enter(const std::shared_ptr<double_barrier_state>& s, handler<> h) {
  if (!s) return fail_empty(std::move(h));
  spawn_owned_op(s->impl, enter(s), std::move(h), std::shared_ptr<pending_ops>(s, &s->pending));
}
void start_double_leave(const std::shared_ptr<double_barrier_state>& s, handler<> h) {
  if (!s) return fail_empty(std::move(h));
  spawn_owned_op(s->impl, leave(s), std::move(h), std::shared_ptr<pending_ops>(s, &s->pending));
}

namespace {
void close_double_barrier(std::shared_ptr<double_barrier_state> s) noexcept {
  if (!s) return;  // moved from
  auto& strand = s->impl->strand_;
  asio::dispatch(strand, [s = std::move(s)] { s->pending.abort_all(); });
}
}  // namespace

}  // namespace detail

double_barrier::~double_barrier() { detail::close_double_barrier(std::move(state_)); }

double_barrier& double_barrier::operator=(double_barrier&& other) noexcept {
  if (this != &other) {
    detail::close_double_barrier(std::move(state_));
    state_ = std::move(other.state_);
  }
  return *this;
}

double_barrier::executor_type double_barrier::get_executor() const noexcept {
  return state_ ? state_->impl->io_ex_ : executor_type();
}

double_barrier::double_barrier(session& s, std::string_view name, int count) {
  auto fail = [](error e) { throw boost::system::system_error(make_error_code(e), "coetcd::double_barrier"); };
  if (name.empty()) fail(error::empty_key);
  if (!detail::access::state(s)) fail(error::session_lost);
  if (count < 1) fail(error::invalid_argument);
  state_ = std::make_shared<detail::double_barrier_state>();
  state_->session = detail::access::state(s);
  state_->impl = detail::access::state(s)->impl;
  state_->name = std::string(name);
  state_->count = count;
}

}  // namespace coetcd
