// coetcd::session: a lease kept alive in the background; locks and leaderships are held under it.
#pragma once

#include <coetcd/client.hpp>
#include <coetcd/loss_reason.hpp>

#include <boost/asio/cancellation_signal.hpp>

#include <chrono>
#include <cstdint>
#include <memory>

namespace coetcd {

/// Options of session::async_create.
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
/// Threads: initiating functions (async_*), the destructor and the accessors (lost(), lease(),
/// ttl()) may be called from any thread; the work goes to the client's strand, and lost() reads
/// an atomic it writes.
class session {
 public:
  /// Grants a lease (or adopts options.lease) and starts keeping it alive. As with Go's
  /// sessions, a lease adopted by another client or process is the same holder as far as etcd
  /// can tell: locks of one name under it do not exclude each other.
  ///
  /// @par Handler signature
  /// `void(error_code, session)`
  /// @par Errors
  /// error::invalid_argument (ttl <= 0 or above etcd's 9e9 s), error::lease_not_found (adopted
  /// lease does not exist), error::lease_in_use (a live session of this client keeps that
  /// lease: its locks queue their callers locally behind one key per name, so a second session
  /// on the lease would queue apart and hold beside it); the
  /// @ref request_errors "request errors" of the LeaseGrant (or LeaseTimeToLive) it sends.
  /// @par Cancellation
  /// Terminal only (partial and total are ignored): the request in flight is cancelled and the
  /// handler gets asio::error::operation_aborted. A lease granted all the same expires after
  /// its TTL.
  /// @par Executor
  /// The handler's associated executor (default: the client's); never inside this call.
  /// @par Lifetimes
  /// `c` must be alive when the operation is initiated (with a deferred token: when it is
  /// launched); after that the operation holds the client's state, and a client closed or
  /// destroyed meanwhile gives error::client_closed.
  template <class CompletionToken = detail::default_token>
  static auto async_create(client& c, session_options options = {}, CompletionToken&& token = {}) {
    return detail::initiate<void(error_code, session)>(
        std::forward<CompletionToken>(token), [&c](asio::any_completion_handler<void(error_code, session)> h, session_options o) {
          start_create(c, o, std::move(h));
        }, options);
  }
  /// async_create(c, session_options{}, token).
  template <asio::completion_token_for<void(error_code, session)> CompletionToken>
  static auto async_create(client& c, CompletionToken&& token) {
    return async_create(c, session_options{}, std::forward<CompletionToken>(token));
  }

  /// An empty session: lost() is true, lease() 0; the constructors of mutex, rw_mutex, semaphore
  /// and election throw error::session_lost for it.
  session() = default;
  /// Takes over the other session; `other` is left empty.
  session(session&&) noexcept = default;
  /// Ends this session as the destructor does, then takes over `other`'s.
  session& operator=(session&&) noexcept;
  /// Unless closed or orphaned: ends the session (pending async_wait_lost complete with
  /// asio::error::operation_aborted, locks waiting under it with error::session_lost) and
  /// revokes its lease in the background.
  ~session();

  /// The type of get_executor().
  using executor_type = asio::any_io_executor;
  /// The client's executor, on which handlers run by default (empty for an empty object).
  executor_type get_executor() const noexcept;
  /// The lease's ID (0 for an empty session).
  std::int64_t lease() const noexcept;
  /// The TTL the lease was granted with (0 for an empty session).
  std::chrono::seconds ttl() const noexcept;
  /// The client the session was made from (after a move of the client, the new object). Throws
  /// boost::system::system_error: asio::error::bad_descriptor for an empty session,
  /// error::client_closed once the client object is destroyed.
  client& get_client() const;
  /// True once the lease is known to be gone (revoked, expired, not renewed in time, closed),
  /// or its local deadline has passed: no renewal sent since one TTL ago has been answered, so
  /// etcd may have expired it. That is read from the clock, so it can be true a moment before
  /// async_wait_lost completes (whose timer a busy event loop may run late).
  bool lost() const noexcept;

  /// Completes with success when the session is lost, and says why; at once (posted) when it is
  /// already. Any number may be pending.
  ///
  /// @par Handler signature
  /// `void(error_code, loss_reason)`
  /// @par Reasons
  /// loss_reason::kind::lease_gone (error::lease_not_found: revoked or expired on the server),
  /// lease_deadline (error::lease_expired: not renewed before its deadline), client_closed,
  /// refused (the keepalive stream's refusals: error::auth_failed, error::auth_required,
  /// error::auth_not_enabled, error::permission_denied).
  /// @par Errors
  /// asio::error::operation_aborted when cancelled, or when the session is ended by its owner
  /// (async_close(), orphan(), the destructor); asio::error::bad_descriptor for an empty session.
  /// @par Cancellation
  /// Terminal, partial, total abandon the wait (asio::error::operation_aborted).
  /// @par Executor
  /// The handler's associated executor (default: the client's; for an empty session, which has
  /// none, the handler's own, or asio::system_executor); never inside this call.
  /// @par Lifetimes
  /// The session may be destroyed meanwhile: the wait completes with
  /// asio::error::operation_aborted.
  template <class CompletionToken = detail::default_token>
  auto async_wait_lost(CompletionToken&& token = {}) {
    return detail::initiate<void(error_code, loss_reason)>(
        std::forward<CompletionToken>(token),
        [s = state_](asio::any_completion_handler<void(error_code, loss_reason)> h) { start_wait_lost(s, std::move(h)); });
  }

  /// Stops the keepalive and revokes the lease (its keys are deleted). A lease that was already
  /// gone is not an error.
  ///
  /// @par Handler signature
  /// `void(error_code)`
  /// @par Errors
  /// The @ref request_errors "request errors" of the LeaseRevoke (the lease then expires after
  /// its TTL). An empty session: asio::error::bad_descriptor.
  /// @par Cancellation
  /// Terminal only (partial and total are ignored), with asio::error::operation_aborted. Before
  /// the close has started on the client's strand, nothing is done; after, the session is ended
  /// and the revoke request is cancelled (the lease then expires after its TTL), unless its
  /// reply was in already.
  /// @par Executor
  /// The handler's associated executor (default: the client's; for an empty session, which has
  /// none, the handler's own, or asio::system_executor); never inside this call.
  /// @par Lifetimes
  /// The session may be destroyed meanwhile; the close goes on.
  template <class CompletionToken = detail::default_token>
  auto async_close(CompletionToken&& token = {}) {
    return detail::initiate<void(error_code)>(
        std::forward<CompletionToken>(token), [s = state_](asio::any_completion_handler<void(error_code)> h) { start_close(s, std::move(h)); });
  }

  /// Stops the keepalive without revoking: the lease and its keys live until the TTL runs out.
  void orphan();

  /// A cancellation slot that emits terminal cancellation when the session is lost (or closed or
  /// orphaned): bind an operation to it to stop that operation with the session, for example
  /// `sock.async_read_some(buf, asio::bind_cancellation_slot(s.loss_slot(), use_awaitable))`.
  /// Like any Asio slot it holds one handler: binding another operation replaces the first. For
  /// several operations, race them against async_wait_lost() (`||`) or use with_lock. Use it from
  /// the client's executor; the session must outlive the bound operation.
  asio::cancellation_slot loss_slot() const noexcept;

  /// @cond INTERNAL
  friend struct detail::access;
  explicit session(std::shared_ptr<detail::session_state> s) noexcept : state_(std::move(s)) {}
  /// @endcond

 private:
  static void start_create(client&, session_options, asio::any_completion_handler<void(error_code, session)>);
  static void start_wait_lost(const std::shared_ptr<detail::session_state>&,
                              asio::any_completion_handler<void(error_code, loss_reason)>);
  static void start_close(const std::shared_ptr<detail::session_state>&, asio::any_completion_handler<void(error_code)>);
  std::shared_ptr<detail::session_state> state_;
};

}  // namespace coetcd
