// multi_lock drives its parts through the same local queues as their own objects do (start_lock),
// one after another in name order: a total order on names makes a cycle of waits between two
// holders impossible, whatever order each was given its names in. Its hold owns the parts' holds.
#include "mutex_queue.hpp"

#include <coetcd/multi_lock.hpp>

#include <algorithm>
#include <optional>

namespace coetcd::detail {

struct multi_lock_state {
  std::vector<std::shared_ptr<mutex_state>> parts;  // in the order taken
  std::shared_ptr<client_impl> impl;                // of the first part: where the operations run
  pending_ops pending;                              // locks in flight, aborted when the object goes
};

struct multi_hold_state {
  std::vector<lock_hold> parts;  // in the order taken; on impl's strand after the grant
  std::vector<std::string> names;
  std::shared_ptr<client_impl> impl;
  bool released = false;  // on the strand: the parts' release has begun
};

namespace {

asio::awaitable<std::tuple<error_code, lock_hold>> lock_part(const std::shared_ptr<mutex_state>& m, bool try_only) {
  // Named first: g++ 12 destroys a by-value capture written inside a co_await expression twice.
  auto initiation = [m, try_only](lock_handler h) { start_lock(m, try_only, std::move(h)); };
  co_return co_await asio::async_initiate<decltype(as_result), void(error_code, lock_hold)>(initiation, as_result);
}

/// Releases the parts held in reverse order; the first error, every part released anyway.
asio::awaitable<error_code> release_parts(std::shared_ptr<multi_hold_state> hs) {
  // Releases run to their end even when the operation that asks for them was cancelled, or is
  // cancelled meanwhile (a terminal cancel must not make the next co_await throw).
  co_await asio::this_coro::reset_cancellation_state(asio::disable_cancellation());
  co_await asio::this_coro::throw_if_cancelled(false);
  if (std::exchange(hs->released, true)) co_return error::not_locked;
  error_code first;
  for (auto n = hs->parts.size(); n > 0;) {
    auto [ec] = co_await hs->parts[--n].async_release(as_result);
    if (ec && !first) first = ec;
  }
  co_return first;
}

asio::awaitable<std::tuple<error_code, multi_lock::hold>> lock_all(std::shared_ptr<multi_lock_state> ms, bool try_only) {
  co_await handle_cancellation_manually();
  auto hs = std::make_shared<multi_hold_state>();
  hs->impl = ms->impl;
  error_code ec;
  for (const auto& m : ms->parts) {
    // The caller's cancellation reaches the part's lock through this frame's slot.
    auto [part_ec, part] = co_await lock_part(m, try_only);
    if (part_ec) {
      ec = part_ec;
      break;
    }
    hs->parts.push_back(std::move(part));
    hs->names.push_back(m->name);
    if (co_await cancellation_requested()) {
      ec = asio::error::operation_aborted;
      break;
    }
  }
  if (!ec && ms->pending.gone()) ec = asio::error::operation_aborted;  // the object is gone
  // A part taken first may have lost its session (or passed its lease's deadline) while a later
  // part waited: etcd may have passed that part on. Read from this strand: the parts' sessions
  // may belong to other clients, whose strands own the rest of their state.
  for (std::size_t i = 0; !ec && i < ms->parts.size(); ++i)
    if (ms->parts[i]->session->counts_as_lost()) ec = error::session_lost;
  if (ec) {
    co_await release_parts(hs);
    co_return std::make_tuple(ec, multi_lock::hold());
  }
  co_return std::make_tuple(error_code{}, multi_lock::hold(std::move(hs)));
}

asio::awaitable<void> release_in_background(std::shared_ptr<multi_hold_state> hs) { co_await release_parts(std::move(hs)); }

// The first loss among the parts' holds. Fanned out by hand rather than with a parallel group:
// each wait's cancellation slot is cleared by its part's client on that client's strand when it
// completes, so it is emitted there too, never from the strand that learned of another loss (the
// parts may belong to several clients). Every result comes to the hold's strand; the operation
// completes when all the waits have.
struct first_loss {
  // Constructed with the handler: any_completion_handler's move assignment recurses (Asio 1.26).
  first_loss(std::shared_ptr<client_impl> i, asio::any_completion_handler<void(error_code, loss_reason)> h)
      : impl(std::move(i)), done(std::move(h)) {}
  std::shared_ptr<client_impl> impl;
  asio::any_completion_handler<void(error_code, loss_reason)> done;
  std::vector<std::pair<std::shared_ptr<client_impl>, std::shared_ptr<asio::cancellation_signal>>> waits;
  std::size_t pending = 0;
  std::optional<std::pair<error_code, loss_reason>> first;

  void stop_waits() {
    for (auto& w : waits)  // (clang 14 cannot capture a structured binding)
      asio::dispatch(w.first->strand_, [stop = w.second] { stop->emit(asio::cancellation_type::terminal); });
  }
};

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
  asio::dispatch(impl->strand_, [s = std::move(state_)] { s->pending.abort_all(); });
}

void multi_lock::run(const std::shared_ptr<detail::multi_lock_state>& s, bool try_only,
                     asio::any_completion_handler<void(error_code, hold)> h) {
  if (!s) return detail::fail_empty(std::move(h));
  detail::spawn_hold_op<hold>(s->impl, detail::lock_all(s, try_only), std::move(h),
                              std::shared_ptr<detail::pending_ops>(s, &s->pending));
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

multi_lock::hold& multi_lock::hold::operator=(hold&& other) noexcept {
  if (this != &other) {
    hold dying(std::move(*this));
    state_ = std::move(other.state_);
  }
  return *this;
}

multi_lock::hold::~hold() {
  if (!state_) return;
  // On the strand, where the parts live after the grant; a release in flight makes it a no-op.
  auto& strand = state_->impl->strand_;
  asio::dispatch(strand, [s = std::move(state_)]() mutable {
    if (s->released) return;
    auto& strand = s->impl->strand_;  // before the move: arguments have no order
    asio::co_spawn(strand, detail::release_in_background(std::move(s)), asio::detached);
  });
}

multi_lock::hold::operator bool() const noexcept {
  // The parts are not changed after the grant (a release ends each hold in place).
  return state_ && std::all_of(state_->parts.begin(), state_->parts.end(), [](const auto& p) { return bool(p); });
}

std::vector<std::int64_t> multi_lock::hold::fencing_tokens() noexcept {
  std::vector<std::int64_t> out;
  if (state_)
    for (auto& p : state_->parts) out.push_back(p.fencing_token());
  return out;
}

std::vector<compare> multi_lock::hold::fence() {
  if (!state_) detail::throw_empty("coetcd: fence() of an empty multi_lock hold");
  std::vector<compare> out;
  for (auto& p : state_->parts) out.push_back(p.fence());
  return out;
}

std::vector<std::string> multi_lock::hold::names() const { return state_ ? state_->names : std::vector<std::string>{}; }

multi_lock::hold::executor_type multi_lock::hold::get_executor() const noexcept {
  return state_ ? state_->impl->io_ex_ : executor_type();
}

void multi_lock::hold::start_release(const std::shared_ptr<detail::multi_hold_state>& s,
                                     asio::any_completion_handler<void(error_code)> h) {
  if (!s) return detail::fail_empty(std::move(h));
  detail::spawn_op(s->impl, detail::release_parts(s), std::move(h));
}

void multi_lock::hold::start_wait_lost(const std::shared_ptr<detail::multi_hold_state>& s,
                                       asio::any_completion_handler<void(error_code, loss_reason)> h) {
  if (!s) return detail::fail_empty(std::move(h));
  auto cancel = detail::early_cancel::take(asio::get_associated_cancellation_slot(h), s->impl->strand_);
  auto st = std::make_shared<detail::first_loss>(s->impl, std::move(h));
  asio::dispatch(s->impl->strand_, [s, st, cancel] {
    auto& strand = st->impl->strand_;
    if (cancel->registered([st] {
          if (!st->first) st->first.emplace(asio::error::operation_aborted, loss_reason{});
          st->stop_waits();
        }))
      return st->impl->complete(std::move(st->done), make_error_code(asio::error::operation_aborted), loss_reason{});
    st->pending = s->parts.size();
    for (auto& p : s->parts) {
      auto stop = std::make_shared<asio::cancellation_signal>();
      st->waits.emplace_back(detail::access::state(p)->queue->session->impl, stop);
      p.async_wait_lost(asio::bind_cancellation_slot(
          stop->slot(), asio::bind_executor(strand, [st](error_code ec, loss_reason why) {
            if (!st->first) {
              st->first.emplace(ec, why);
              st->stop_waits();
            }
            if (--st->pending == 0) st->impl->complete(std::move(st->done), st->first->first, st->first->second);
          })));
    }
  });
}

}  // namespace coetcd
