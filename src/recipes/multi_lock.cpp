// multi_lock drives its parts through the same local queues as their own objects do (start_lock,
// start_unlock), one after another in name order: a total order on names makes a cycle of waits
// between two holders impossible, whatever order each was given its names in.
#include "mutex_queue.hpp"

#include <coetcd/multi_lock.hpp>

#include <algorithm>
#include <optional>

namespace coetcd::detail {

struct multi_lock_state {
  std::vector<std::shared_ptr<mutex_state>> parts;  // in the order taken
  std::shared_ptr<client_impl> impl;                // of the first part: where the operations run
  std::atomic<bool> held{false};  // read by held() from any thread
  bool orphaned = false;  // the object is gone: parts taken now are released at once
  pending_ops pending;    // locks in flight, aborted when the object goes
};

namespace {

asio::awaitable<error_code> lock_part(const std::shared_ptr<mutex_state>& m, bool try_only) {
  // Named first: g++ 12 destroys a by-value capture written inside a co_await expression twice.
  auto initiation = [m, try_only](asio::any_completion_handler<void(error_code)> h) {
    start_lock(m, try_only, std::move(h));
  };
  auto [ec] = co_await asio::async_initiate<decltype(as_result), void(error_code)>(initiation, as_result);
  co_return ec;
}

asio::awaitable<error_code> unlock_part(const std::shared_ptr<mutex_state>& m) {
  auto initiation = [m](asio::any_completion_handler<void(error_code)> h) { start_unlock(m, std::move(h)); };
  auto [ec] = co_await asio::async_initiate<decltype(as_result), void(error_code)>(initiation, as_result);
  co_return ec;
}

/// Unlocks the first `n` parts in reverse order; the first error, every part released anyway.
asio::awaitable<error_code> unlock_first(std::shared_ptr<multi_lock_state> ms, std::size_t n) {
  // Releases run to their end even when the operation that asks for them was cancelled, or is
  // cancelled meanwhile (a terminal cancel must not make the next co_await throw).
  co_await asio::this_coro::reset_cancellation_state(asio::disable_cancellation());
  co_await asio::this_coro::throw_if_cancelled(false);
  error_code first;
  while (n > 0) {
    auto ec = co_await unlock_part(ms->parts[--n]);
    if (ec && !first) first = ec;
  }
  co_return first;
}

asio::awaitable<error_code> lock_all(std::shared_ptr<multi_lock_state> ms, bool try_only) {
  co_await handle_cancellation_manually();
  if (ms->held) co_return error::invalid_argument;  // not reentrant: it would wait for itself
  std::size_t taken = 0;
  error_code ec;
  for (const auto& m : ms->parts) {
    // The caller's cancellation reaches the part's lock through this frame's slot.
    ec = co_await lock_part(m, try_only);
    if (ec) break;
    ++taken;
    if (co_await cancellation_requested()) {
      ec = asio::error::operation_aborted;
      break;
    }
  }
  if (!ec && ms->orphaned) ec = asio::error::operation_aborted;  // nobody is left to unlock it
  // A part taken first may have lost its session (or passed its lease's deadline) while a later
  // part waited: etcd may have passed that part on. Read from this strand: the parts' sessions
  // may belong to other clients, whose strands own the rest of their state.
  for (std::size_t i = 0; !ec && i < ms->parts.size(); ++i)
    if (ms->parts[i]->session->counts_as_lost()) ec = error::session_lost;
  if (ec) {
    co_await unlock_first(ms, taken);
    co_return ec;
  }
  ms->held = true;
  co_return error_code{};
}

asio::awaitable<error_code> unlock_all(std::shared_ptr<multi_lock_state> ms) {
  if (!ms->held) co_return error::not_locked;
  ms->held = false;
  co_return co_await unlock_first(ms, ms->parts.size());
}

// The first loss among the parts' sessions. Fanned out by hand rather than with a parallel
// group: each wait's cancellation slot is cleared by its session's client on that client's
// strand when it completes, so it is emitted there too, never from the strand that learned of
// another loss (the parts may belong to several clients). Every result comes to the multi_lock's
// strand; the operation completes when all the waits have.
struct first_loss {
  // Constructed with the handler: any_completion_handler's move assignment recurses (Asio 1.26).
  first_loss(std::shared_ptr<client_impl> i, asio::any_completion_handler<void(error_code)> h)
      : impl(std::move(i)), done(std::move(h)) {}
  std::shared_ptr<client_impl> impl;
  asio::any_completion_handler<void(error_code)> done;
  std::vector<std::pair<std::shared_ptr<session_state>, std::shared_ptr<asio::cancellation_signal>>> waits;
  std::size_t pending = 0;
  std::optional<error_code> first;

  void stop_waits() {
    for (auto& w : waits)  // (clang 14 cannot capture a structured binding)
      asio::dispatch(w.first->impl->strand_, [stop = w.second] { stop->emit(asio::cancellation_type::terminal); });
  }
};

void wait_any_lost(const std::shared_ptr<multi_lock_state>& ms, asio::any_completion_handler<void(error_code)> h) {
  auto cancel = early_cancel::take(asio::get_associated_cancellation_slot(h), ms->impl->strand_);
  auto st = std::make_shared<first_loss>(ms->impl, std::move(h));
  for (const auto& m : ms->parts)
    if (std::none_of(st->waits.begin(), st->waits.end(), [&](const auto& w) { return w.first == m->session; }))
      st->waits.emplace_back(m->session, std::make_shared<asio::cancellation_signal>());
  asio::dispatch(st->impl->strand_, [st, cancel] {
    auto& strand = st->impl->strand_;
    if (cancel->registered([st] {
          if (!st->first) st->first = asio::error::operation_aborted;
          st->stop_waits();
        }))
      return st->impl->complete(std::move(st->done), asio::error::operation_aborted);
    st->pending = st->waits.size();
    for (auto& [s, stop] : st->waits)
      wait_session_lost(s, asio::bind_cancellation_slot(stop->slot(), asio::bind_executor(strand, [st](error_code ec) {
                          if (!st->first) {
                            st->first = ec;
                            st->stop_waits();
                          }
                          if (--st->pending == 0) st->impl->complete(std::move(st->done), *st->first);
                        })));
  });
}

asio::awaitable<void> release_in_background(std::shared_ptr<multi_lock_state> ms) {
  co_await unlock_all(std::move(ms));
}

}  // namespace
}  // namespace coetcd::detail

namespace coetcd {

multi_lock::part::part(mutex& m) : state_(m.state_) {}

multi_lock::part multi_lock::part::exclusive(rw_mutex& m) {
  part p;
  p.state_ = m.write_;
  return p;
}

multi_lock::part multi_lock::part::shared(rw_mutex& m) {
  part p;
  p.state_ = m.read_;
  return p;
}

multi_lock::multi_lock(std::vector<part> parts) : state_(std::make_shared<detail::multi_lock_state>()) {
  for (auto& p : parts) {
    if (!p.state_)
      throw boost::system::system_error(make_error_code(error::invalid_argument), "coetcd: multi_lock of a moved-from lock");
    state_->parts.push_back(std::move(p.state_));
  }
  if (state_->parts.empty())
    throw boost::system::system_error(make_error_code(error::invalid_argument), "coetcd: multi_lock of no locks");
  auto& v = state_->parts;
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a->name < b->name; });
  for (std::size_t i = 1; i < v.size(); ++i)
    if (v[i]->name == v[i - 1]->name)
      throw boost::system::system_error(make_error_code(error::invalid_argument),
                                        "coetcd: multi_lock lists '" + v[i]->name + "' twice");
  state_->impl = v.front()->session->impl;
}

multi_lock::~multi_lock() { abandon(); }

multi_lock& multi_lock::operator=(multi_lock&& other) noexcept {
  if (this != &other) {
    abandon();
    state_ = std::move(other.state_);
  }
  return *this;
}

void multi_lock::abandon() noexcept {
  if (!state_) return;
  auto impl = state_->impl;
  state_->pending.mark_gone();
  asio::dispatch(impl->strand_, [impl, s = std::move(state_)]() mutable {
    s->orphaned = true;
    s->pending.abort_all();
    if (s->held) asio::co_spawn(impl->strand_, detail::release_in_background(std::move(s)), asio::detached);
  });
}

void multi_lock::run(const std::shared_ptr<detail::multi_lock_state>& s, op o,
                     asio::any_completion_handler<void(error_code)> h) {
  if (!s) return detail::fail_empty(std::move(h));
  switch (o) {
    case op::lock:
    case op::try_lock: {
      // Every part granted to a caller that has moved on is released, or nobody ever would.
      auto give_back = [s] {
        if (s->held) asio::co_spawn(s->impl->strand_, detail::release_in_background(s), asio::detached);
      };
      return detail::spawn_grant_op(s->impl, detail::lock_all(s, o == op::try_lock), std::move(h), std::move(give_back),
                                    std::shared_ptr<detail::pending_ops>(s, &s->pending));
    }
    case op::unlock: return detail::spawn_op(s->impl, detail::unlock_all(s), std::move(h));
    case op::wait_lost: return detail::wait_any_lost(s, std::move(h));
  }
}

multi_lock::executor_type multi_lock::get_executor() const noexcept {
  return state_ ? state_->impl->io_ex_ : executor_type();
}

std::vector<std::string> multi_lock::names() const {
  std::vector<std::string> out;
  if (!state_) return out;
  for (const auto& m : state_->parts) out.push_back(m->name);
  return out;
}

bool multi_lock::held() const noexcept {
  if (!state_ || !state_->held) return false;
  // As mutex::held(): a part whose session counts as lost may have another holder already.
  return std::none_of(state_->parts.begin(), state_->parts.end(),
                      [](const auto& p) { return p->session->counts_as_lost(); });
}

}  // namespace coetcd
