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
  watcher() = default;
  watcher(watcher&&) noexcept = default;
  watcher& operator=(watcher&& other) noexcept;
  ~watcher();

  /// Waits for the next batch of events.
  ///
  /// Handler signature: void(error_code, watch_batch). Batches that arrived before the call are
  /// delivered without waiting (but never inline). Errors: error::compacted (the start revision
  /// is gone; batch.compact_revision says from where to resume; the watch is over),
  /// error::watch_canceled (cancel() or the server cancelled it), error::client_closed,
  /// error::permission_denied. Only one async_next may be pending at a time.
  ///
  /// Cancellation: terminal, partial and total. Cancelling abandons only this wait
  /// (asio::error::operation_aborted); the watch stays active and keeps queueing events.
  template <class CompletionToken = detail::default_token>
  auto async_next(CompletionToken&& token = {}) {
    return detail::initiate<void(error_code, watch_batch)>(
        std::forward<CompletionToken>(token), [s = state_](detail::handler<watch_batch> h) { start_next(s, std::move(h)); });
  }

  /// Stops the watch on the server. A pending async_next completes with error::watch_canceled.
  void cancel();

  /// The client-assigned watch id (stable across reconnects), 0 for an empty watcher.
  /// The client's executor, on which handlers run by default (empty for an empty object).
  using executor_type = asio::any_io_executor;
  executor_type get_executor() const noexcept;
  std::int64_t id() const noexcept;
  explicit operator bool() const noexcept { return state_ != nullptr; }

  /// Internal: used by client::async_watch.
  explicit watcher(std::shared_ptr<detail::watcher_state> s) noexcept : state_(std::move(s)) {}

 private:
  static void start_next(const std::shared_ptr<detail::watcher_state>&, detail::handler<watch_batch>);
  std::shared_ptr<detail::watcher_state> state_;
};

}  // namespace coetcd
