#pragma once

#include <coetcd/client.hpp>

#include <boost/asio/cancellation_signal.hpp>

#include <chrono>
#include <cstdint>
#include <memory>

namespace coetcd {

struct session_options {
  std::chrono::seconds ttl{60};  ///< lease TTL; etcd raises anything below 2 s to 2 s
  std::int64_t lease = 0;        ///< adopt this existing lease instead of granting a new one
};

namespace detail {
struct session_state;
}  // namespace detail

/// A lease kept alive in the background on the client's shared keepalive stream: the liveness
/// that locks and leadership are held under (etcd's concurrency.Session).
///
/// Move-only. Destroying a session that was neither closed nor orphaned revokes its lease in the
/// background, so keys held under it (lock keys, election proposals) vanish at once instead of
/// after the TTL. The client must outlive its sessions.
///
/// Threads: initiating functions (async_*) and the destructor may be called from any thread;
/// they hand their work to the client's strand. The accessors (lost(), lease(), …) read what the strand
/// last wrote: call them where the object's completions run (the coroutine that awaits them),
/// not from another thread while the io_context runs on several.
class session {
 public:
  /// Grants a lease (or adopts options.lease) and starts keeping it alive.
  /// Handler: void(error_code, session). Errors: error::invalid_argument (ttl <= 0 or above etcd's 9e9 s),
  /// error::lease_not_found (adopted lease does not exist), error::lease_in_use (a live session of
  /// this client keeps that lease: its locks queue their callers locally behind one key per
  /// name, so a second session on the lease would queue apart and hold beside it), transport
  /// errors. As with Go's sessions, a lease adopted by another client or process is the same
  /// holder as far as etcd can tell: locks of one name under it do not exclude each other.
  template <class CompletionToken = detail::default_token>
  static auto async_create(client& c, session_options options = {}, CompletionToken&& token = {}) {
    return detail::initiate<void(error_code, session)>(
        std::forward<CompletionToken>(token), [&c](asio::any_completion_handler<void(error_code, session)> h, session_options o) {
          start_create(c, o, std::move(h));
        }, options);
  }
  template <asio::completion_token_for<void(error_code, session)> CompletionToken>
  static auto async_create(client& c, CompletionToken&& token) {
    return async_create(c, session_options{}, std::forward<CompletionToken>(token));
  }

  session() = default;
  session(session&&) noexcept = default;
  session& operator=(session&&) noexcept;
  ~session();

  /// The client's executor, on which handlers run by default (empty for an empty object).
  using executor_type = asio::any_io_executor;
  executor_type get_executor() const noexcept;
  std::int64_t lease() const noexcept;
  std::chrono::seconds ttl() const noexcept;
  client& get_client() const noexcept;
  /// True once the lease is known to be gone (revoked, expired, not renewed in time, closed).
  bool lost() const noexcept;

  /// Completes when the session is lost. Handler: void(error_code why): error::lease_not_found
  /// (revoked or expired on the server), error::lease_expired (not renewed before its deadline),
  /// error::client_closed; asio::error::operation_aborted after close()/orphan(). Completes at
  /// once (posted) when already lost. Any number may be pending. Cancellation: terminal, partial,
  /// total abandon the wait.
  template <class CompletionToken = detail::default_token>
  auto async_wait_lost(CompletionToken&& token = {}) {
    return detail::initiate<void(error_code)>(
        std::forward<CompletionToken>(token), [s = state_](asio::any_completion_handler<void(error_code)> h) { start_wait_lost(s, std::move(h)); });
  }

  /// Stops the keepalive and revokes the lease (its keys are deleted).
  /// Handler: void(error_code). A lease that was already gone is not an error. Errors: transport
  /// errors (the lease then expires after its TTL).
  template <class CompletionToken = detail::default_token>
  auto async_close(CompletionToken&& token = {}) {
    return detail::initiate<void(error_code)>(
        std::forward<CompletionToken>(token), [s = state_](asio::any_completion_handler<void(error_code)> h) { start_close(s, std::move(h)); });
  }

  /// Stops the keepalive without revoking: the lease and its keys live until the TTL runs out.
  void orphan();

  /// A cancellation slot that emits terminal cancellation when the session is lost (or closed or
  /// orphaned): bind an operation to it to stop that operation with the session, e.g.
  /// `sock.async_read_some(buf, asio::bind_cancellation_slot(s.loss_slot(), use_awaitable))`.
  /// Like any Asio slot it holds one handler: binding another operation replaces the first. For
  /// several operations, race them against async_wait_lost() (`||`) or use with_lock. Use it from
  /// the client's executor; the session must outlive the bound operation.
  asio::cancellation_slot loss_slot() const noexcept;

  /// Internal.
  const std::shared_ptr<detail::session_state>& state() const noexcept { return state_; }
  explicit session(std::shared_ptr<detail::session_state> s) noexcept : state_(std::move(s)) {}

 private:
  static void start_create(client&, session_options, asio::any_completion_handler<void(error_code, session)>);
  static void start_wait_lost(const std::shared_ptr<detail::session_state>&,
                              asio::any_completion_handler<void(error_code)>);
  static void start_close(const std::shared_ptr<detail::session_state>&, asio::any_completion_handler<void(error_code)>);
  std::shared_ptr<detail::session_state> state_;
};

}  // namespace coetcd
