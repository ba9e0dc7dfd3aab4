// coetcd::multi_lock: several mutexes or rw_mutex sides taken as one, all or none.
#pragma once

#include <coetcd/mutex.hpp>
#include <coetcd/rw_mutex.hpp>

#include <memory>
#include <string>
#include <vector>

namespace coetcd {

namespace detail {
struct multi_lock_state;
struct multi_hold_state;
}

/// Several locks taken as one: all or none. Each part is a coetcd::mutex or one side of a
/// coetcd::rw_mutex (of any sessions and clients), taken through that object's queue as if it
/// had been locked by itself, so the keys, fencing tokens and fences are the parts' own. A lock
/// hands its caller a multi_lock::hold, which owns the parts' holds.
///
/// No deadlock between processes that list the same names in different orders: the parts are
/// always taken in one canonical order, by name compared byte by byte (std::string's <), and
/// released in the reverse order. Two parts of one name are refused (error::invalid_argument):
/// the second would wait for the first for ever.
///
/// A lock that fails or is cancelled part-way releases the parts it took before it completes,
/// so a caller never holds some of them. Like Curator's InterProcessMultiLock and Redisson's
/// RMultiLock; unlike those, waiting for a part costs no thread.
///
/// Any number of locks may be pending on one object: a second caller waits at the first part,
/// as a second caller of a mutex does. The part objects must outlive the multi_lock's pending
/// operations (not its holds). Operations may be called from any thread.
class multi_lock {
 public:
  /// One of the locks a multi_lock takes.
  class part {
   public:
    /// A coetcd::mutex.
    part(mutex& m);  // NOLINT: a mutex converts, so {a, b} lists mutexes
    /// The writer's (exclusive) side of an rw_mutex.
    static part exclusive(rw_mutex& m);
    /// The readers' (shared) side of an rw_mutex.
    static part shared(rw_mutex& m);

   private:
    friend class multi_lock;
    part() = default;
    std::shared_ptr<detail::mutex_state> state_;
  };

  /// Every part's hold, taken together: move-only, released (every part, in reverse name order)
  /// in the background when destroyed while held.
  class [[nodiscard]] hold {
   public:
    /// The type of get_executor().
    using executor_type = asio::any_io_executor;
    /// Empty: holds nothing; its operations complete with asio::error::bad_descriptor.
    hold() noexcept = default;
    /// @cond INTERNAL
    explicit hold(std::shared_ptr<detail::multi_hold_state> s) noexcept : state_(std::move(s)) {}
    /// @endcond
    /// Takes over `other`'s hold; `other` is left empty.
    hold(hold&&) noexcept = default;
    /// Releases this hold as the destructor does, then takes over `other`'s.
    hold& operator=(hold&& other) noexcept;
    hold(const hold&) = delete;
    hold& operator=(const hold&) = delete;
    /// If still held: every part released in the background, in reverse order.
    ~hold();

    /// Held now: every part's hold is (see mutex::hold's operator bool).
    explicit operator bool() const noexcept;
    /// The parts' fencing tokens, in name order (see mutex::hold::fencing_token(); a shared
    /// part's is its readers'). Empty for an empty hold.
    std::vector<std::int64_t> fencing_tokens() noexcept;
    /// The parts' fences, in name order: put them in a txn (txn::when takes the vector) so its
    /// writes fail once any part's hold is over. Empty hold: throws boost::system::system_error
    /// (asio::error::bad_descriptor).
    std::vector<compare> fence();
    /// The parts' names, in the order they were taken.
    std::vector<std::string> names() const;
    /// The first part's client's executor, on which handlers run by default (empty when empty).
    executor_type get_executor() const noexcept;

    /// Releases every part, in reverse order.
    ///
    /// @par Handler signature
    /// `void(error_code)`
    /// @par Errors
    /// error::not_locked when released already, else the first error of a part's release
    /// (every part is released anyway); asio::error::bad_descriptor for an empty hold.
    /// @par Cancellation
    /// None: the release always runs to its outcome.
    /// @par Executor
    /// The handler's associated executor (default: get_executor()); never inside this call.
    /// @par Lifetimes
    /// The hold may be destroyed meanwhile; the release goes on.
    template <class CompletionToken = detail::default_token>
    auto async_release(CompletionToken&& token = {}) {
      return detail::initiate<void(error_code)>(
          std::forward<CompletionToken>(token),
          [s = state_](asio::any_completion_handler<void(error_code)> h) { start_release(s, std::move(h)); });
    }
    /// Completes with success when any part's hold is lost (its session lost, closed, orphaned or
    /// destroyed): from then on the multi_lock's hold cannot be trusted. Parts may belong to
    /// several clients.
    ///
    /// @par Handler signature
    /// `void(error_code, loss_reason)`: the first loss.
    /// @par Errors
    /// asio::error::operation_aborted when cancelled, or when the hold is released or destroyed
    /// first; asio::error::bad_descriptor for an empty hold.
    /// @par Cancellation
    /// Terminal, partial, total abandon the wait (asio::error::operation_aborted).
    /// @par Executor
    /// The handler's associated executor (default: get_executor()); never inside this call.
    template <class CompletionToken = detail::default_token>
    auto async_wait_lost(CompletionToken&& token = {}) {
      return detail::initiate<void(error_code, loss_reason)>(
          std::forward<CompletionToken>(token),
          [s = state_](asio::any_completion_handler<void(error_code, loss_reason)> h) { start_wait_lost(s, std::move(h)); });
    }

   private:
    static void start_release(const std::shared_ptr<detail::multi_hold_state>&, asio::any_completion_handler<void(error_code)>);
    static void start_wait_lost(const std::shared_ptr<detail::multi_hold_state>&,
                                asio::any_completion_handler<void(error_code, loss_reason)>);
    std::shared_ptr<detail::multi_hold_state> state_;
  };

  /// Throws boost::system::system_error(error::invalid_argument) for an empty list, two parts
  /// of one name, or a part of a moved-from lock.
  explicit multi_lock(std::vector<part> parts);
  /// Takes over the other object; `other` is left empty: its accessors return empty values and
  /// its operations complete with asio::error::bad_descriptor. Holds are not affected.
  multi_lock(multi_lock&&) noexcept = default;
  /// Aborts this object's pending operations, as the destructor does, then takes over `other`,
  /// which is left empty.
  multi_lock& operator=(multi_lock&& other) noexcept;
  /// Pending locks complete at once with asio::error::operation_aborted, their parts taken so far
  /// released; a lock whose success meets the destruction before its handler runs releases every
  /// part and completes with asio::error::operation_aborted. Holds are not affected.
  ~multi_lock();

  /// Waits until every part is held, and hands the caller the hold.
  ///
  /// @par Handler signature
  /// `void(error_code, multi_lock::hold)`: the hold is empty on error.
  /// @par Errors
  /// The first error of a part's lock (error::session_lost, error::client_closed, the
  /// @ref request_errors "request errors", ...); the parts already taken are released first.
  /// @par Cancellation
  /// Terminal, partial, total; the parts taken are released before the handler runs with
  /// asio::error::operation_aborted. A cancellation that meets the success before the handler
  /// runs releases every part in the background.
  /// @par Executor
  /// The handler's associated executor (default: get_executor()); never inside this call.
  /// @par Lifetimes
  /// The part objects (and their sessions) must outlive the operation; the sessions, the hold.
  /// On destruction of the multi_lock, see ~multi_lock().
  template <class CompletionToken = detail::default_token>
  auto async_lock(CompletionToken&& token = {}) {
    return start(std::forward<CompletionToken>(token), false);
  }
  /// Takes every part if each is free, without waiting.
  ///
  /// @par Handler signature
  /// `void(error_code, multi_lock::hold)`: the hold is empty on error.
  /// @par Errors
  /// error::locked when one is not (the ones taken are released first, no key is left); other
  /// errors as async_lock.
  /// @par Cancellation
  /// Terminal, partial, total, as async_lock.
  /// @par Executor
  /// The handler's associated executor (default: get_executor()); never inside this call.
  /// @par Lifetimes
  /// As async_lock.
  template <class CompletionToken = detail::default_token>
  auto async_try_lock(CompletionToken&& token = {}) {
    return start(std::forward<CompletionToken>(token), true);
  }

  /// The type of get_executor().
  using executor_type = asio::any_io_executor;
  /// The first part's client's executor, on which handlers run by default (empty for an empty
  /// object).
  executor_type get_executor() const noexcept;
  /// The parts' names, in the order they are taken.
  std::vector<std::string> names() const;

 private:
  void abandon() noexcept;  // the destructor's work, also done by move assignment
  template <class CompletionToken>
  auto start(CompletionToken&& token, bool try_only) {
    return detail::initiate<void(error_code, hold)>(
        std::forward<CompletionToken>(token),
        [s = state_, try_only](asio::any_completion_handler<void(error_code, hold)> h) { run(s, try_only, std::move(h)); });
  }
  static void run(const std::shared_ptr<detail::multi_lock_state>&, bool try_only,
                  asio::any_completion_handler<void(error_code, hold)>);
  std::shared_ptr<detail::multi_lock_state> state_;
};

}  // namespace coetcd
