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
/// admit by the larger one) or error::foreign_key (a key under `name + "/"` that is not a
/// holder's: another lock whose name starts with this one's plus "/"). A name of a semaphore
/// should not be the name of a mutex, election or another semaphore, or a prefix of one.
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
  /// Throws boost::system::system_error: error::empty_key for an empty name,
  /// error::invalid_argument for `permits` < 1.
  semaphore(session& s, std::string_view name, std::int64_t permits);
  semaphore(semaphore&&) noexcept = default;
  ~semaphore();

  /// Waits until this caller holds `n` permits. Handler: void(error_code).
  /// Errors: error::invalid_argument (n < 1 or n > permits(); no key is made),
  /// error::permits_mismatch, error::foreign_key (see the class; our key is removed),
  /// error::session_lost, transport errors of the acquiring txn.
  /// Cancellation: terminal, partial, total; a cancelled acquisition leaves no key (a txn still on
  /// the wire is cleaned up when it completes) and never holds permits.
  template <class CompletionToken = detail::default_token>
  auto async_acquire(std::int64_t n = 1, CompletionToken&& token = {}) {
    return start(std::forward<CompletionToken>(token), op::acquire, n);
  }
  /// Takes `n` permits if they are free and nobody waits before us, without waiting.
  /// Handler: void(error_code): error::locked otherwise (no key is left behind); other errors
  /// as async_acquire.
  template <class CompletionToken = detail::default_token>
  auto async_try_acquire(std::int64_t n = 1, CompletionToken&& token = {}) {
    return start(std::forward<CompletionToken>(token), op::try_acquire, n);
  }
  /// Gives back `n` permits taken by one acquisition of `n` through this object (the oldest
  /// such). Handler: void(error_code). Errors: error::not_locked (this object holds no
  /// acquisition of `n`), error::session_lost (the permits were gone already: the session
  /// ended), transport errors (the delete is then retried in the background while the session
  /// lives; the permits are no longer ours either way).
  template <class CompletionToken = detail::default_token>
  auto async_release(std::int64_t n = 1, CompletionToken&& token = {}) {
    return start(std::forward<CompletionToken>(token), op::release, n);
  }
  /// Completes when the session is lost (or closed): held permits cannot be trusted from then
  /// on. Handler: void(error_code why).
  template <class CompletionToken = detail::default_token>
  auto async_wait_lost(CompletionToken&& token = {}) {
    return start(std::forward<CompletionToken>(token), op::wait_lost, 0);
  }

  using executor_type = asio::any_io_executor;
  executor_type get_executor() const noexcept;
  const std::string& name() const noexcept;
  std::int64_t permits() const noexcept;
  /// Permits held through this object (the sum over its acquisitions not yet released).
  std::int64_t held() const noexcept;

 private:
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
