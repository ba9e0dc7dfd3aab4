// coetcd::barrier: one key that holds others back, laid out as etcd's Go recipe.Barrier.
#pragma once

#include <coetcd/session.hpp>

#include <memory>
#include <string>
#include <string_view>

namespace coetcd {

namespace detail {
struct barrier_state;
std::shared_ptr<barrier_state> make_barrier(const std::shared_ptr<client_impl>&, std::string_view name, std::int64_t lease);
void start_barrier_hold(const std::shared_ptr<barrier_state>&, handler<>);
void start_barrier_release(const std::shared_ptr<barrier_state>&, handler<>);
void start_barrier_wait(const std::shared_ptr<barrier_state>&, handler<>);
asio::any_io_executor barrier_executor(const std::shared_ptr<barrier_state>&) noexcept;
}  // namespace detail

/// A barrier in the layout of etcd's Go `contrib/recipes` Barrier: while the key `name` exists,
/// async_wait waits; deleting it (async_release) lets every waiter through. Go's Hold, Release
/// and Wait work on the same barrier.
///
/// Made from a session, the key is held under its lease, so a holder that dies releases the
/// barrier after its TTL (Go's Barrier holds without a lease: a crashed holder keeps it shut).
/// Any number of operations may be pending at once. Destroying the object completes them with
/// asio::error::operation_aborted (a hold or release on the wire may have been applied). A
/// moved-from object is empty: its operations complete with asio::error::bad_descriptor.
///
/// Threads: initiating functions and the destructor may be called from any thread; the client
/// (and the session for a session barrier) must outlive the operations' completion.
class barrier {
 public:
  /// A barrier held without a lease (as Go's). Throws boost::system::system_error:
  /// error::empty_key for an empty name, error::client_closed for a moved-from client.
  barrier(client& c, std::string_view name) : state_(detail::make_barrier(detail::access::impl(c), name, 0)) {}
  /// A barrier held under the session's lease. Throws: error::empty_key, error::session_lost
  /// for an empty session.
  barrier(session& s, std::string_view name);
  /// Takes over the other barrier; `other` is left empty (bad_descriptor).
  barrier(barrier&&) noexcept = default;
  /// Aborts this object's pending operations, as the destructor does, then takes over the
  /// other barrier, which is left empty. The key (if held) stays held.
  barrier& operator=(barrier&& other) noexcept;
  /// Pending operations complete with asio::error::operation_aborted. Leaves the key as it is:
  /// hold and release are explicit, as in Go.
  ~barrier();

  /// Creates the key: waiters wait from now on.
  ///
  /// @par Handler signature
  /// `void(error_code)`
  /// @par Errors
  /// error::key_exists (the barrier is already held, by anyone), error::lease_not_found (the
  /// session's lease is gone), the @ref request_errors "request errors".
  /// @par Cancellation
  /// Terminal only, before the request leaves (then nothing is held): operation_aborted.
  /// @par Executor
  /// The handler's associated executor (default: the client's); never inside this call.
  template <class CompletionToken = detail::default_token>
  auto async_hold(CompletionToken&& token = {}) {
    return detail::initiate<void(error_code)>(
        std::forward<CompletionToken>(token), [s = state_](detail::handler<> h) { detail::start_barrier_hold(s, std::move(h)); });
  }

  /// Deletes the key: every waiter goes on. Not an error when the barrier is not held.
  ///
  /// @par Handler signature
  /// `void(error_code)`
  /// @par Errors
  /// The @ref request_errors "request errors".
  /// @par Cancellation, Executor
  /// As async_hold.
  template <class CompletionToken = detail::default_token>
  auto async_release(CompletionToken&& token = {}) {
    return detail::initiate<void(error_code)>(
        std::forward<CompletionToken>(token), [s = state_](detail::handler<> h) { detail::start_barrier_release(s, std::move(h)); });
  }

  /// Completes once the key is absent: at once if the barrier is not held.
  ///
  /// @par Handler signature
  /// `void(error_code)`
  /// @par Errors
  /// The @ref request_errors "request errors" of its reads (a watch that fails is followed by a
  /// read and a new watch).
  /// @par Cancellation
  /// Terminal (partial and total are ignored): operation_aborted.
  /// @par Executor
  /// The handler's associated executor (default: the client's); never inside this call.
  template <class CompletionToken = detail::default_token>
  auto async_wait(CompletionToken&& token = {}) {
    return detail::initiate<void(error_code)>(
        std::forward<CompletionToken>(token), [s = state_](detail::handler<> h) { detail::start_barrier_wait(s, std::move(h)); });
  }

  /// The type of get_executor().
  using executor_type = asio::any_io_executor;
  /// The client's executor (empty for an empty object).
  executor_type get_executor() const noexcept { return detail::barrier_executor(state_); }

 private:
  std::shared_ptr<detail::barrier_state> state_;
};

}  // namespace coetcd
