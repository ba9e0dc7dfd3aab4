#pragma once

#include <coetcd/detail/config.hpp>

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
  lease_keepalive() = default;
  lease_keepalive(lease_keepalive&&) noexcept = default;
  lease_keepalive& operator=(lease_keepalive&& other) noexcept;
  ~lease_keepalive();

  /// Completes when the lease is lost. Handler signature: void(error_code why) with
  /// error::lease_not_found (revoked or expired on the server), error::lease_expired (could not
  /// be renewed in time), error::client_closed. If it is already lost, completes at once (posted).
  /// Any number of waits may be pending. Cancellation: terminal/partial/total abandon the wait
  /// with asio::error::operation_aborted; keepalive goes on.
  template <class CompletionToken = detail::default_token>
  auto async_wait_lost(CompletionToken&& token = {}) {
    return detail::initiate<void(error_code)>(
        std::forward<CompletionToken>(token), [s = state_](asio::any_completion_handler<void(error_code)> h) { start_wait(s, std::move(h)); });
  }

  /// Stops renewing; pending waits complete with asio::error::operation_aborted.
  void stop();

  std::int64_t id() const noexcept { return id_; }
  explicit operator bool() const noexcept { return state_ != nullptr; }

  /// Internal: used by client::keep_alive.
  lease_keepalive(std::shared_ptr<detail::kept_lease> s, std::int64_t id) noexcept
      : state_(std::move(s)), id_(id) {}

  /// The client's executor, on which handlers run by default (empty for an empty object).
  using executor_type = asio::any_io_executor;
  executor_type get_executor() const noexcept;

 private:
  static void start_wait(const std::shared_ptr<detail::kept_lease>&, asio::any_completion_handler<void(error_code)>);
  std::shared_ptr<detail::kept_lease> state_;
  std::int64_t id_ = 0;
};

}  // namespace coetcd
