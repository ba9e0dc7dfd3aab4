// coetcd::semaphore: a distributed counting semaphore whose permits are held under a lease.
#pragma once

#include <coetcd/session.hpp>
#include <coetcd/txn.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace coetcd {

namespace detail {
struct semaphore_state;
}

/// A distributed counting semaphore with `permits` permits: callers across coroutines, sessions
/// and processes hold at most that many at once. Permits are held under the session's lease,
/// so a crashed process gives its permits back when its session's TTL runs out (as Curator's
/// InterProcessSemaphoreV2 and Redisson's RPermitExpirableSemaphore; not before).
///
/// On etcd, each acquisition is one key under the session's lease:
/// `name + "/" + lease id in hex + "_" + sequence in hex`, whose value is `"<n>/<permits>"`
/// (n: the permits it takes). The rule, the same for every process:
///
///   keys in create-revision order take permits in turn; a key holds once its n plus the n of
///   every older key fit in `permits`.
///
/// So admission is FIFO: a request for many permits is never overtaken by later requests for
/// few, even when they would fit (no starvation; the price is that a permit may stay idle
/// while the queue's head waits for more). Keys of one txn share a create revision and are
/// ordered by key.
///
/// Every key before ours must carry the same `permits` and a value of that form: otherwise the
/// acquisition fails with error::permits_mismatch (processes disagree on the count: rather than
/// admit by the larger one) or error::foreign_key (a key of the name that is not a holder's: a
/// mutex, election or rw_mutex of the same name). Keys of longer names under the prefix
/// (`name/x/...`, as for coetcd::mutex) take no permits and are no foreign keys. A name of a
/// semaphore should not be the name of a mutex, election or another semaphore.
///
/// Waiting costs no thread: the sessions of one client share one watch on the name and a local
/// view of its queue; a release that admits a waiter of this client costs one Delete and one
/// notification.
///
/// Any number of operations may be pending on one object. The session must outlive the object;
/// permits the object still holds when it is destroyed are released in the background.
/// Threads: as coetcd::mutex.
class semaphore {
 public:
  /// A semaphore named `name` with `permits` permits, under session `s`. Throws
  /// boost::system::system_error: error::empty_key for an empty name,
  /// error::invalid_argument for `permits` < 1, error::session_lost for an empty session.
  semaphore(session& s, std::string_view name, std::int64_t permits);
  /// Takes over the other object; `other` is left empty: its accessors return empty values and
  /// its operations complete with asio::error::bad_descriptor.
  semaphore(semaphore&&) noexcept = default;
  /// Gives up what this object holds and aborts its pending operations, as the destructor does,
  /// then takes over `other`, which is left empty.
  semaphore& operator=(semaphore&& other) noexcept;
  /// Gives the permits held through this object back in the background. Pending acquisitions
  /// complete at once with asio::error::operation_aborted, as a cancelled one does (its key is
  /// removed).
  ~semaphore();

  /// Waits until this caller holds `n` permits.
  ///
  /// @par Handler signature
  /// `void(error_code)`
  /// @par Errors
  /// error::invalid_argument (n < 1 or n > permits(); no key is made),
  /// error::permits_mismatch, error::foreign_key (see the class; our key is removed),
  /// error::session_lost, error::client_closed, the @ref request_errors "request errors" of the
  /// acquiring txn, the refusals of the name's watch; asio::error::operation_aborted when
  /// cancelled.
  /// @par Cancellation
  /// Terminal, partial, total; a cancelled acquisition leaves no key (a txn still on the wire is
  /// cleaned up when it completes) and never holds permits: permits that the cancellation meets
  /// before the handler runs are given back.
  /// @par Executor
  /// The handler's associated executor (default: the client's); never inside this call.
  /// @par Lifetimes
  /// The session must outlive the semaphore. On destruction of the semaphore, see ~semaphore().
  template <class CompletionToken = detail::default_token>
  auto async_acquire(std::int64_t n = 1, CompletionToken&& token = {}) {
    return start(std::forward<CompletionToken>(token), op::acquire, n);
  }
  /// async_acquire(1, token).
  template <asio::completion_token_for<void(error_code)> CompletionToken>
  auto async_acquire(CompletionToken&& token) {
    return async_acquire(1, std::forward<CompletionToken>(token));
  }
  /// Takes `n` permits if they are free and nobody waits before us, without waiting.
  ///
  /// @par Handler signature
  /// `void(error_code)`
  /// @par Errors
  /// error::locked otherwise; the handler runs once the key the try made is deleted again (no
  /// key is left behind). Other errors as async_acquire.
  /// @par Cancellation
  /// Terminal, partial, total, as async_acquire.
  /// @par Executor
  /// The handler's associated executor (default: the client's); never inside this call.
  /// @par Lifetimes
  /// As async_acquire.
  template <class CompletionToken = detail::default_token>
  auto async_try_acquire(std::int64_t n = 1, CompletionToken&& token = {}) {
    return start(std::forward<CompletionToken>(token), op::try_acquire, n);
  }
  /// async_try_acquire(1, token).
  template <asio::completion_token_for<void(error_code)> CompletionToken>
  auto async_try_acquire(CompletionToken&& token) {
    return async_try_acquire(1, std::forward<CompletionToken>(token));
  }
  /// Gives back `n` permits taken by one acquisition of `n` through this object (the oldest
  /// such).
  ///
  /// @par Handler signature
  /// `void(error_code)`
  /// @par Errors
  /// error::not_locked (this object holds no acquisition of `n`), error::session_lost (the
  /// permits were gone already: the session ended), the @ref request_errors "request errors"
  /// of the delete (which is then retried in the background while the session lives; the
  /// permits are no longer ours either way).
  /// @par Cancellation
  /// Terminal only (partial and total are ignored), and only before the release has started on
  /// the client's strand: then nothing is released and the handler gets
  /// asio::error::operation_aborted. Once started, the release runs to its outcome.
  /// @par Executor
  /// The handler's associated executor (default: the client's); never inside this call.
  /// @par Lifetimes
  /// The semaphore may be destroyed meanwhile; the release goes on.
  template <class CompletionToken = detail::default_token>
  auto async_release(std::int64_t n = 1, CompletionToken&& token = {}) {
    return start(std::forward<CompletionToken>(token), op::release, n);
  }
  /// async_release(1, token).
  template <asio::completion_token_for<void(error_code)> CompletionToken>
  auto async_release(CompletionToken&& token) {
    return async_release(1, std::forward<CompletionToken>(token));
  }
  /// Completes when the session is lost (or closed): held permits cannot be trusted from then
  /// on.
  ///
  /// @par Handler signature
  /// `void(error_code why)`
  /// @par Errors
  /// As session::async_wait_lost.
  /// @par Cancellation
  /// Terminal, partial, total abandon the wait (asio::error::operation_aborted).
  /// @par Executor
  /// The handler's associated executor (default: the client's); never inside this call.
  /// @par Lifetimes
  /// The semaphore may be destroyed meanwhile; the wait goes on, as session::async_wait_lost's.
  template <class CompletionToken = detail::default_token>
  auto async_wait_lost(CompletionToken&& token = {}) {
    return start(std::forward<CompletionToken>(token), op::wait_lost, 0);
  }

  /// The type of get_executor().
  using executor_type = asio::any_io_executor;
  /// The client's executor, on which handlers run by default (empty for an empty object).
  executor_type get_executor() const noexcept;
  /// The semaphore's name.
  const std::string& name() const noexcept;
  /// The number of permits, as given to the constructor.
  std::int64_t permits() const noexcept;
  /// Permits held through this object (the sum over its acquisitions not yet released).
  std::int64_t held() const noexcept;

 private:
  void abandon() noexcept;  // the destructor's work, also done by move assignment
  enum class op { acquire, try_acquire, release, wait_lost };
  template <class CompletionToken>
  auto start(CompletionToken&& token, op o, std::int64_t n) {
    return detail::initiate<void(error_code)>(
        std::forward<CompletionToken>(token), [s = state_, o, n](asio::any_completion_handler<void(error_code)> h) { run(s, o, n, std::move(h)); });
  }
  static void run(const std::shared_ptr<detail::semaphore_state>&, op, std::int64_t,
                  asio::any_completion_handler<void(error_code)>);
  std::shared_ptr<detail::semaphore_state> state_;
};

}  // namespace coetcd
