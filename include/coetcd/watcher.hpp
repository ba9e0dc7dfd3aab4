// coetcd::watcher: one watch of a key, prefix or range, made by client::async_watch.
#pragma once

#include <coetcd/detail/config.hpp>
#include <coetcd/watch.hpp>

#include <memory>

namespace coetcd {

/// One watch on a key, prefix or range, multiplexed with every other watcher of its client on one
/// gRPC Watch stream. Obtained from client::async_watch. Move-only; destroying it cancels the watch.
///
/// When the stream breaks (member restart, failover) the client re-creates the watch from the
/// revision after the last one delivered: no event is lost or repeated across reconnects.
///
/// Threads: initiating functions (async_*) and the destructor may be called from any thread;
/// they hand their work to the client's strand.
class watcher {
 public:
  /// An empty watcher: watches nothing.
  watcher() = default;
  /// Takes over the other object's watch; `other` is left empty.
  watcher(watcher&&) noexcept = default;
  /// Cancels this object's watch (see close()), then takes over `other`'s.
  watcher& operator=(watcher&& other) noexcept;
  /// Cancels the watch (see close()).
  ~watcher();

  /// Waits for the next batch of events. Batches that arrived before the call are delivered
  /// without waiting (but never inline), also after the watch has ended: its error comes after
  /// them. Only one async_next may be pending at a time.
  ///
  /// @par Handler signature
  /// `void(error_code, watch_batch)`
  /// @par Errors
  /// error::compacted (the start revision is gone; batch.compact_revision says from where to
  /// resume; the watch is over), error::watch_canceled (close(), destruction, or the server
  /// cancelled it; also for an empty watcher), error::client_closed, the stream's refusals
  /// (error::permission_denied, error::auth_failed, error::auth_required,
  /// error::auth_not_enabled, error::invalid_auth_token); asio::error::already_started when
  /// another async_next is pending.
  /// @par Cancellation
  /// Terminal, partial and total. Cancelling abandons only this wait
  /// (asio::error::operation_aborted); the watch stays active and keeps queueing events.
  /// @par Executor
  /// The handler's associated executor (default: the client's; for an empty watcher, which has
  /// none, the handler's own, or asio::system_executor); never inside this call.
  /// @par Lifetimes
  /// The watcher may be destroyed or assigned to meanwhile: the watch is cancelled and the wait
  /// completes with error::watch_canceled. So may the client: error::client_closed.
  template <class CompletionToken = detail::default_token>
  auto async_next(CompletionToken&& token = {}) {
    return detail::initiate<void(error_code, watch_batch)>(
        std::forward<CompletionToken>(token), [s = state_](detail::handler<watch_batch> h) { start_next(s, std::move(h)); });
  }

  /// Ends the watch: stops it on the server; a pending async_next completes with
  /// error::watch_canceled. (Asio's cancel() aborts operations and leaves the object working; this
  /// ends the object, as Asio's close() does.)
  void close();
  /// The name close() had before: it ended the watch, not only its operations.
  [[deprecated("use close()")]] void cancel() { close(); }

  /// The type of get_executor().
  using executor_type = asio::any_io_executor;
  /// The client's executor, on which handlers run by default (empty for an empty object).
  executor_type get_executor() const noexcept;
  /// The client-assigned watch id (stable across reconnects), 0 for an empty watcher.
  std::int64_t id() const noexcept;
  /// Whether the object has a watch (is not empty); says nothing of the watch's state.
  explicit operator bool() const noexcept { return state_ != nullptr; }

  /// @cond INTERNAL
  /// Internal: used by client::async_watch.
  explicit watcher(std::shared_ptr<detail::watcher_state> s) noexcept : state_(std::move(s)) {}
  /// @endcond

 private:
  static void start_next(const std::shared_ptr<detail::watcher_state>&, detail::handler<watch_batch>);
  std::shared_ptr<detail::watcher_state> state_;
};

}  // namespace coetcd
