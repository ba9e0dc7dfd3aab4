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

  /// Throws boost::system::system_error(error::invalid_argument) for an empty list or two parts
  /// of one name.
  explicit multi_lock(std::vector<part> parts);
  multi_lock(multi_lock&&) noexcept = default;
  /// Releases the parts in the background if the multi_lock still holds them.
  ~multi_lock();

  /// Waits until every part is held. Handler: void(error_code). Errors: the first error of a
  /// part's async_lock (error::session_lost, transport errors); the parts already taken are
  /// released first. Cancellation: terminal, partial, total; the parts taken are released before
  /// the handler runs with operation_aborted.
  template <class CompletionToken = detail::default_token>
  auto async_lock(CompletionToken&& token = {}) {
    return start(std::forward<CompletionToken>(token), op::lock);
  }
  /// Takes every part if each is free, without waiting. Handler: void(error_code):
  /// error::locked when one is not (the ones taken are released first, no key is left).
  template <class CompletionToken = detail::default_token>
  auto async_try_lock(CompletionToken&& token = {}) {
    return start(std::forward<CompletionToken>(token), op::try_lock);
  }
  /// Releases every part, in reverse order. Handler: void(error_code): error::not_locked when the
  /// multi_lock does not hold them, else the first error of a part's unlock (every part is
  /// released anyway).
  template <class CompletionToken = detail::default_token>
  auto async_unlock(CompletionToken&& token = {}) {
    return start(std::forward<CompletionToken>(token), op::unlock);
  }

  /// Completes when the session of any part is lost: from then on the multi_lock's hold cannot
  /// be trusted, as with mutex::async_wait_lost. Handler: void(error_code why), the first loss's
  /// reason as session::async_wait_lost gives it (the keepalive's error, e.g.
  /// error::lease_not_found for a revoked lease; operation_aborted when a part's session was
  /// closed by its owner). Cancellation: terminal, partial, total (operation_aborted). Parts that
  /// share a session are waited on once; parts may belong to several clients.
  template <class CompletionToken = detail::default_token>
  auto async_wait_lost(CompletionToken&& token = {}) {
    return start(std::forward<CompletionToken>(token), op::wait_lost);
  }

  using executor_type = asio::any_io_executor;
  executor_type get_executor() const noexcept;
  /// The parts' names in the order they are taken.
  std::vector<std::string> names() const;
  /// Between a successful lock and unlock.
  bool held() const noexcept;

 private:
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
