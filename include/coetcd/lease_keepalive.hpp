// coetcd::lease_keepalive: one lease kept alive on the client's shared LeaseKeepAlive stream.
#pragma once

#include <coetcd/detail/config.hpp>
#include <coetcd/loss_reason.hpp>

#include <chrono>
#include <cstdint>
#include <memory>

namespace coetcd {

/// Keeps one lease alive through the client's shared LeaseKeepAlive stream (one stream per
/// client, whatever the number of leases). Obtained from client::keep_alive. Move-only;
/// destroying it stops renewing the lease (it is not revoked: it expires after its TTL).
///
/// The lease is renewed a third of its TTL after each reply. It has a local deadline: the send
/// time of the last answered renewal plus the TTL the server reported. Reaching the deadline
/// without an answer, a reply saying the lease is gone, or the client closing ends the
/// keepalive and completes async_wait_lost.
///
/// Threads: initiating functions (async_*) and the destructor may be called from any thread;
/// they hand their work to the client's strand.
class lease_keepalive {
 public:
  /// An empty object: keeps no lease.
  lease_keepalive() = default;
  /// Takes over the other object's lease; `other` is left empty.
  lease_keepalive(lease_keepalive&&) noexcept = default;
  /// Stops renewing this object's lease (see close()), then takes over `other`'s.
  lease_keepalive& operator=(lease_keepalive&& other) noexcept;
  /// Stops renewing (see close()).
  ~lease_keepalive();

  /// Completes with success when the lease is lost, and says why; at once (posted) if it is
  /// already. Any number of waits may be pending.
  ///
  /// @par Handler signature
  /// `void(error_code, loss_reason)`
  /// @par Reasons
  /// loss_reason::kind::lease_gone (error::lease_not_found: revoked or expired on the server),
  /// lease_deadline (error::lease_expired: could not be renewed in time), client_closed, refused
  /// (the stream's refusals: error::auth_failed, error::auth_required, error::auth_not_enabled,
  /// error::permission_denied).
  /// @par Errors
  /// asio::error::operation_aborted when cancelled, or once close() was called (also for waits
  /// started after it); asio::error::bad_descriptor for an empty object.
  /// @par Cancellation
  /// Terminal, partial, total abandon the wait (asio::error::operation_aborted); the keepalive
  /// goes on.
  /// @par Executor
  /// The handler's associated executor (default: the client's; for an empty object, which has
  /// none, the handler's own, or asio::system_executor); never inside this call.
  /// @par Lifetimes
  /// The object may be destroyed meanwhile: that stops the keepalive, and the wait completes
  /// with asio::error::operation_aborted.
  template <class CompletionToken = detail::default_token>
  auto async_wait_lost(CompletionToken&& token = {}) {
    return detail::initiate<void(error_code, loss_reason)>(
        std::forward<CompletionToken>(token),
        [s = state_](asio::any_completion_handler<void(error_code, loss_reason)> h) { start_wait(s, std::move(h)); });
  }

  /// Stops renewing; pending waits complete with asio::error::operation_aborted. The lease is
  /// not revoked: it expires after its TTL.
  void close();
  /// The name close() had before.
  [[deprecated("use close()")]] void stop() { close(); }

  /// The lease's ID (0 for an empty object).
  std::int64_t id() const noexcept { return id_; }
  /// Whether the object keeps a lease (is not empty); says nothing of the lease's state.
  explicit operator bool() const noexcept { return state_ != nullptr; }

  /// @cond INTERNAL
  /// Internal: used by client::keep_alive.
  lease_keepalive(std::shared_ptr<detail::kept_lease> s, std::int64_t id) noexcept
      : state_(std::move(s)), id_(id) {}
  /// @endcond

  /// The type of get_executor().
  using executor_type = asio::any_io_executor;
  /// The client's executor, on which handlers run by default (empty for an empty object).
  executor_type get_executor() const noexcept;

 private:
  static void start_wait(const std::shared_ptr<detail::kept_lease>&, asio::any_completion_handler<void(error_code, loss_reason)>);
  std::shared_ptr<detail::kept_lease> state_;
  std::int64_t id_ = 0;
};

}  // namespace coetcd
