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
}

/// Several locks taken as one: all or none. Each part is a coetcd::mutex or one side of a
/// coetcd::rw_mutex (of any sessions and clients), held through that object as if it had been
/// locked by itself, so their keys, fencing tokens and is_owner() compares are the parts' own.
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
/// The part objects must outlive the multi_lock and must not be locked or unlocked by
/// themselves while the multi_lock holds them. Operations may be called from any thread.
class multi_lock {
 public:
  /// One lock of the set.
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

  /// Throws boost::system::system_error(error::invalid_argument) for an empty list, two parts
  /// of one name, or a part of a moved-from lock.
  explicit multi_lock(std::vector<part> parts);
  /// Takes over the other object; `other` is left empty: its accessors return empty values and
  /// its operations complete with asio::error::bad_descriptor.
  multi_lock(multi_lock&&) noexcept = default;
  /// Gives up what this object holds and aborts its pending operations, as the destructor does,
  /// then takes over `other`, which is left empty.
  multi_lock& operator=(multi_lock&& other) noexcept;
  /// Releases the parts in the background if the multi_lock still holds them. A lock still
  /// pending completes with asio::error::operation_aborted, as a destroyed Asio object's
  /// operations do, and the parts it took are released first (one that succeeds meanwhile is
  /// released too). A pending async_wait_lost goes on: it waits on the parts' sessions.
  ~multi_lock();

  /// Waits until every part is held.
  ///
  /// @par Handler signature
  /// `void(error_code)`
  /// @par Errors
  /// error::invalid_argument when this multi_lock holds them already (it would wait for itself);
  /// the first error of a part's lock (error::session_lost, error::client_closed, the
  /// @ref request_errors "request errors", ...); the parts already taken are released first.
  /// @par Cancellation
  /// Terminal, partial, total; the parts taken are released before the handler runs with
  /// asio::error::operation_aborted. A cancellation that meets the success before the handler
  /// runs releases every part in the background.
  /// @par Executor
  /// The handler's associated executor (default: get_executor()); never inside this call.
  /// @par Lifetimes
  /// The part objects (and their sessions) must outlive the multi_lock. On destruction of the
  /// multi_lock, see ~multi_lock().
  template <class CompletionToken = detail::default_token>
  auto async_lock(CompletionToken&& token = {}) {
    return start(std::forward<CompletionToken>(token), op::lock);
  }
  /// Takes every part if each is free, without waiting.
  ///
  /// @par Handler signature
  /// `void(error_code)`
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
    return start(std::forward<CompletionToken>(token), op::try_lock);
  }
  /// Releases every part, in reverse order.
  ///
  /// @par Handler signature
  /// `void(error_code)`
  /// @par Errors
  /// error::not_locked when the multi_lock does not hold them, else the first error of a part's
  /// unlock (every part is released anyway, unless cancelled).
  /// @par Cancellation
  /// Terminal only (partial and total are ignored), with asio::error::operation_aborted. Before
  /// the release has started on the client's strand, nothing is released. While parts are
  /// being released, it stops after the current part: the parts not yet released stay held
  /// through their own objects, and held() is false.
  /// @par Executor
  /// The handler's associated executor (default: get_executor()); never inside this call.
  /// @par Lifetimes
  /// The multi_lock may be destroyed meanwhile; the release goes on.
  template <class CompletionToken = detail::default_token>
  auto async_unlock(CompletionToken&& token = {}) {
    return start(std::forward<CompletionToken>(token), op::unlock);
  }

  /// Completes when the session of any part is lost: from then on the multi_lock's hold cannot
  /// be trusted, as with mutex::async_wait_lost. Parts that share a session are waited on once;
  /// parts may belong to several clients.
  ///
  /// @par Handler signature
  /// `void(error_code why)`
  /// @par Errors
  /// The first loss's reason as session::async_wait_lost gives it (the keepalive's error, such
  /// as error::lease_not_found for a revoked lease; asio::error::operation_aborted when a part's
  /// session was closed by its owner).
  /// @par Cancellation
  /// Terminal, partial, total abandon the wait (asio::error::operation_aborted).
  /// @par Executor
  /// The handler's associated executor (default: get_executor()); never inside this call.
  /// @par Lifetimes
  /// The multi_lock may be destroyed meanwhile; the wait goes on.
  template <class CompletionToken = detail::default_token>
  auto async_wait_lost(CompletionToken&& token = {}) {
    return start(std::forward<CompletionToken>(token), op::wait_lost);
  }

  /// The type of get_executor().
  using executor_type = asio::any_io_executor;
  /// The executor of the client of the first part in name order, on which handlers run by
  /// default (empty for an empty object).
  executor_type get_executor() const noexcept;
  /// The parts' names in the order they are taken.
  std::vector<std::string> names() const;
  /// Between a successful lock and unlock: false once a part's session counts as lost, its
  /// lease's local deadline included (see session::lost()), even before the loss is delivered.
  /// The hold still ends with async_unlock(), as mutex::held() says.
  bool held() const noexcept;

 private:
  void abandon() noexcept;  // the destructor's work, also done by move assignment
  enum class op { lock, try_lock, unlock, wait_lost };
  template <class CompletionToken>
  auto start(CompletionToken&& token, op o) {
    return detail::initiate<void(error_code)>(
        std::forward<CompletionToken>(token), [s = state_, o](asio::any_completion_handler<void(error_code)> h) { run(s, o, std::move(h)); });
  }
  static void run(const std::shared_ptr<detail::multi_lock_state>&, op, asio::any_completion_handler<void(error_code)>);
  std::shared_ptr<detail::multi_lock_state> state_;
};

}  // namespace coetcd
