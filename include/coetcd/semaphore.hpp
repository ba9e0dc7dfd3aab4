// coetcd::semaphore: a distributed counting semaphore whose permits are held under a lease.
#pragma once

#include <coetcd/session.hpp>
#include <coetcd/loss_reason.hpp>
#include <coetcd/txn.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace coetcd {

namespace detail {
struct semaphore_state;
struct permit_state;
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
/// Any number of operations may be pending on one object. Each acquisition hands its caller a
/// semaphore::hold, which gives its permits back when released or destroyed. The session must
/// outlive the object and its holds. Threads: as coetcd::mutex.
class semaphore {
 public:
  /// The permits one acquisition took: move-only, given back in the background when destroyed
  /// while held (a failed delete is retried while the session lives). Holders of a semaphore are
  /// not ordered, so a hold has no fencing token; its fence() proves only that its permits still
  /// count. It does not point at its semaphore object: destroying or moving the object leaves
  /// it alone.
  class [[nodiscard]] hold {
   public:
    /// The type of get_executor().
    using executor_type = asio::any_io_executor;
    /// Empty: holds nothing; its operations complete with asio::error::bad_descriptor.
    hold() noexcept = default;
    /// @cond INTERNAL
    explicit hold(std::shared_ptr<detail::permit_state> s) noexcept : state_(std::move(s)) {}
    /// @endcond
    /// Takes over `other`'s hold; `other` is left empty.
    hold(hold&&) noexcept = default;
    /// Gives this hold's permits back as the destructor does, then takes over `other`'s.
    hold& operator=(hold&& other) noexcept;
    hold(const hold&) = delete;
    hold& operator=(const hold&) = delete;
    /// If still held: the permits are given back in the background.
    ~hold();

    /// Held now: not empty, not released, and the session not counted as lost (session::lost()).
    explicit operator bool() const noexcept;
    /// The permits this acquisition took (its `n`; 0 when empty).
    std::int64_t permits() const noexcept;
    /// Its key: name + "/" + hex(lease) + "_" + hex(sequence).
    const std::string& key() const noexcept;
    /// A compare that holds while this acquisition's key exists with the create revision it was
    /// granted under: its permits still count. Never holds once the hold is over. Empty: throws
    /// boost::system::system_error (asio::error::bad_descriptor).
    compare fence();
    /// The client's executor, on which handlers run by default (empty when empty).
    executor_type get_executor() const noexcept;

    /// Gives the permits back: deletes the key.
    ///
    /// @par Handler signature
    /// `void(error_code)`
    /// @par Errors
    /// error::not_locked (released already), error::session_lost (the permits were gone
    /// already: the session ended), the @ref request_errors "request errors" of the delete (which
    /// is then retried in the background while the session lives; the permits are no longer ours
    /// either way); asio::error::bad_descriptor for an empty hold.
    /// @par Cancellation
    /// None: the release always runs to its outcome.
    /// @par Executor
    /// The handler's associated executor (default: the client's); never inside this call.
    /// @par Lifetimes
    /// The hold may be destroyed meanwhile; the release goes on.
    template <class CompletionToken = detail::default_token>
    auto async_release(CompletionToken&& token = {}) {
      return detail::initiate<void(error_code)>(
          std::forward<CompletionToken>(token),
          [s = state_](asio::any_completion_handler<void(error_code)> h) { start_release(s, std::move(h)); });
    }
    /// Completes with success when the hold is lost (its session lost, closed, orphaned or
    /// destroyed): from then on the permits cannot be trusted. Any number may be pending.
    ///
    /// @par Handler signature
    /// `void(error_code, loss_reason)`
    /// @par Errors
    /// asio::error::operation_aborted when cancelled, or when the hold is released or destroyed
    /// first; asio::error::bad_descriptor for an empty hold.
    /// @par Cancellation
    /// Terminal, partial, total abandon the wait (asio::error::operation_aborted).
    /// @par Executor
    /// The handler's associated executor (default: the client's); never inside this call.
    template <class CompletionToken = detail::default_token>
    auto async_wait_lost(CompletionToken&& token = {}) {
      return detail::initiate<void(error_code, loss_reason)>(
          std::forward<CompletionToken>(token),
          [s = state_](asio::any_completion_handler<void(error_code, loss_reason)> h) { start_wait_lost(s, std::move(h)); });
    }

   private:
    static void start_release(const std::shared_ptr<detail::permit_state>&, asio::any_completion_handler<void(error_code)>);
    static void start_wait_lost(const std::shared_ptr<detail::permit_state>&,
                                asio::any_completion_handler<void(error_code, loss_reason)>);
    static void drop(std::shared_ptr<detail::permit_state>) noexcept;
    std::shared_ptr<detail::permit_state> state_;
  };

  /// A semaphore named `name` with `permits` permits, under session `s`. Throws
  /// boost::system::system_error: error::empty_key for an empty name,
  /// error::invalid_argument for `permits` < 1, error::session_lost for an empty session.
  semaphore(session& s, std::string_view name, std::int64_t permits);
  /// Takes over the other object; `other` is left empty: its accessors return empty values and
  /// its operations complete with asio::error::bad_descriptor. Holds are not affected.
  semaphore(semaphore&&) noexcept = default;
  /// Aborts this object's pending operations, as the destructor does, then takes over `other`,
  /// which is left empty.
  semaphore& operator=(semaphore&& other) noexcept;
  /// Pending acquisitions complete at once with asio::error::operation_aborted, as a cancelled
  /// one does (its key is removed). Holds are not affected.
  ~semaphore();

  /// Waits until this caller holds `n` permits, and hands it the hold.
  ///
  /// @par Handler signature
  /// `void(error_code, semaphore::hold)`: the hold is empty on error.
  /// @par Errors
  /// error::invalid_argument (n < 1 or n > permits(); no key is made),
  /// error::permits_mismatch, error::foreign_key (see the class; our key is removed),
  /// error::session_lost, error::client_closed, the @ref request_errors "request errors" of the
  /// acquiring txn, the refusals of the name's watch; asio::error::operation_aborted when
  /// cancelled or when the semaphore is destroyed first.
  /// @par Cancellation
  /// Terminal, partial, total; a cancelled acquisition leaves no key (a txn still on the wire is
  /// cleaned up when it completes) and never holds permits: permits that the cancellation meets
  /// before the handler runs are given back.
  /// @par Executor
  /// The handler's associated executor (default: the client's); never inside this call.
  /// @par Lifetimes
  /// The session must outlive the semaphore and its holds. On destruction of the semaphore, see
  /// ~semaphore().
  template <class CompletionToken = detail::default_token>
  auto async_acquire(std::int64_t n = 1, CompletionToken&& token = {}) {
    return start(std::forward<CompletionToken>(token), false, n);
  }
  /// async_acquire(1, token).
  template <asio::completion_token_for<void(error_code, hold)> CompletionToken>
  auto async_acquire(CompletionToken&& token) {
    return async_acquire(1, std::forward<CompletionToken>(token));
  }
  /// Takes `n` permits if they are free and nobody waits before us, without waiting.
  ///
  /// @par Handler signature
  /// `void(error_code, semaphore::hold)`: the hold is empty on error.
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
    return start(std::forward<CompletionToken>(token), true, n);
  }
  /// async_try_acquire(1, token).
  template <asio::completion_token_for<void(error_code, hold)> CompletionToken>
  auto async_try_acquire(CompletionToken&& token) {
    return async_try_acquire(1, std::forward<CompletionToken>(token));
  }

  /// The type of get_executor().
  using executor_type = asio::any_io_executor;
  /// The client's executor, on which handlers run by default (empty for an empty object).
  executor_type get_executor() const noexcept;
  /// The semaphore's name.
  const std::string& name() const noexcept;
  /// The number of permits (0 for an empty object).
  std::int64_t permits() const noexcept;

 private:
  void abandon() noexcept;  // the destructor's work, also done by move assignment
  template <class CompletionToken>
  auto start(CompletionToken&& token, bool try_only, std::int64_t n) {
    return detail::initiate<void(error_code, hold)>(
        std::forward<CompletionToken>(token),
        [s = state_, try_only, n](asio::any_completion_handler<void(error_code, hold)> h) { run(s, try_only, n, std::move(h)); });
  }
  static void run(const std::shared_ptr<detail::semaphore_state>&, bool try_only, std::int64_t,
                  asio::any_completion_handler<void(error_code, hold)>);
  std::shared_ptr<detail::semaphore_state> state_;
};

}  // namespace coetcd
