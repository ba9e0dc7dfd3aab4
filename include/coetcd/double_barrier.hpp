// coetcd::double_barrier: N participants enter together and leave together, as etcd's Go recipe.DoubleBarrier.
#pragma once

#include <coetcd/session.hpp>

#include <memory>
#include <string>
#include <string_view>

namespace coetcd {

namespace detail {
struct double_barrier_state;
void start_double_enter(const std::shared_ptr<double_barrier_state>&, handler<>);
void start_double_leave(const std::shared_ptr<double_barrier_state>&, handler<>);
}  // namespace detail

/// A double barrier in the layout of etcd's Go `contrib/recipes` DoubleBarrier: each participant
/// puts `name + "/waiters/" + <nanoseconds>` under its session's lease. Keys rank by create
/// revision, as in Go's recipe since etcd's commit 62167d1f1 (3.4.23's counted them): the first
/// `count` are in, the count-th puts `name + "/ready"`, which lets them all in, and later ones are
/// refused. Leaving waits until every participant has left. Go participants and coetcd's share
/// one. A participant that dies is taken out with its lease, so the others can leave after its TTL.
///
/// One participant per object; one operation at a time: an enter or leave started while another
/// is pending completes with asio::error::already_started. Destroying the object completes a
/// pending operation with asio::error::operation_aborted, as cancelling it does. A moved-from
/// object is empty: its operations complete with asio::error::bad_descriptor. The session must
/// outlive the object. Threads: initiating functions and the destructor may be called from any
/// thread.
class double_barrier {
 public:
  /// A participant of the double barrier `name` for `count` participants. Throws
  /// boost::system::system_error: error::empty_key, error::session_lost (an empty session),
  /// error::invalid_argument (count below 1).
  double_barrier(session& s, std::string_view name, int count);
  /// Takes over the other object; `other` is left empty (bad_descriptor).
  double_barrier(double_barrier&&) noexcept = default;
  /// Aborts this object's pending operation, as the destructor does, then takes over the other
  /// object, which is left empty.
  double_barrier& operator=(double_barrier&& other) noexcept;
  /// A pending operation completes with asio::error::operation_aborted (an enter takes its key
  /// out again, as a cancelled one). An entered participant's key stays: it goes with the
  /// session.
  ~double_barrier();

  /// Enters: completes once `count` participants have entered.
  ///
  /// @par Handler signature
  /// `void(error_code)`
  /// @par Errors
  /// error::too_many_clients (`count` keys are older than ours, or a round that opened before we
  /// came has a participant that has not left yet: our key is taken out again),
  /// error::session_lost, asio::error::already_started (another operation of this object is
  /// pending), the @ref request_errors "request errors".
  /// @par Cancellation
  /// Terminal: operation_aborted; our key is taken out again.
  /// @par Executor
  /// The handler's associated executor (default: the client's); never inside this call.
  template <class CompletionToken = detail::default_token>
  auto async_enter(CompletionToken&& token = {}) {
    return detail::initiate<void(error_code)>(
        std::forward<CompletionToken>(token), [s = state_](detail::handler<> h) { detail::start_double_enter(s, std::move(h)); });
  }

  /// Leaves: completes once every participant has left (or its lease is gone).
  ///
  /// @par Handler signature
  /// `void(error_code)`
  /// @par Errors
  /// asio::error::already_started (another operation of this object is pending), the
  /// @ref request_errors "request errors".
  /// @par Cancellation
  /// Terminal: operation_aborted (our key may already be gone: the others may leave).
  /// @par Executor
  /// The handler's associated executor (default: the client's); never inside this call.
  template <class CompletionToken = detail::default_token>
  auto async_leave(CompletionToken&& token = {}) {
    return detail::initiate<void(error_code)>(
        std::forward<CompletionToken>(token), [s = state_](detail::handler<> h) { detail::start_double_leave(s, std::move(h)); });
  }

  /// The type of get_executor().
  using executor_type = asio::any_io_executor;
  /// The client's executor, on which handlers run by default (empty for an empty object).
  executor_type get_executor() const noexcept;

 private:
  std::shared_ptr<detail::double_barrier_state> state_;
};

}  // namespace coetcd
