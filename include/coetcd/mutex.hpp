#pragma once

#include <coetcd/session.hpp>
#include <coetcd/txn.hpp>

#include <memory>
#include <string>
#include <string_view>

namespace coetcd {

namespace detail {
struct mutex_state;
}

/// A distributed lock, laid out exactly like etcd's Go concurrency.Mutex and `etcdctl lock`:
/// the key is `name + "/" + lease id in lowercase hex`, created under the session's lease; the
/// owner is the key with the oldest create revision under `name + "/"`; waiters are served in
/// create-revision (FIFO) order. A coetcd mutex and `etcdctl lock NAME` exclude each other.
///
/// Exclusion is between sessions. Locking a name the same session already holds or waits for
/// succeeds together with it (as in Go) and is counted: the key is deleted when the last of those
/// locks is released. Coroutines of one process that must exclude each other use separate
/// sessions.
///
/// Waiting costs no thread and no stream: waiters of one name in one client share one watch on
/// the shared Watch stream and a local view of the queue, so a hand-off is one Delete commit plus
/// one notification.
///
/// The session must outlive the mutex. One operation at a time per mutex object.
class mutex {
 public:
  /// Throws boost::system::system_error(error::empty_key) for an empty name.
  mutex(session& s, std::string_view name);
  mutex(mutex&&) noexcept = default;
  ~mutex();

  /// Waits until this session owns the lock. Handler: void(error_code).
  /// Errors: error::session_lost (the session was lost before or while waiting, or our key vanished),
  /// transport errors of the acquiring txn.
  /// Cancellation: terminal, partial, total. The waiter key is deleted from etcd before the handler
  /// runs with asio::error::operation_aborted (unless another lock of the same session uses it).
  template <class CompletionToken = asio::deferred_t>
  auto async_lock(CompletionToken&& token = {}) {
    return detail::initiate<void(error_code)>(
        token, [s = state_](asio::any_completion_handler<void(error_code)> h) { start_lock(s, false, std::move(h)); });
  }

  /// Takes the lock if it is free, without waiting. Handler: void(error_code): error::locked when
  /// another session holds it (no key is left behind).
  template <class CompletionToken = asio::deferred_t>
  auto async_try_lock(CompletionToken&& token = {}) {
    return detail::initiate<void(error_code)>(
        token, [s = state_](asio::any_completion_handler<void(error_code)> h) { start_lock(s, true, std::move(h)); });
  }

  /// Releases the lock: deletes our key with a plain delete, as Go's Unlock does, once no other
  /// mutex of this session uses it (they share the key and count its users, so a stale unlock
  /// never releases a newer lock of the session). Only this session creates that key, unless
  /// another process adopts the same lease. Handler: void(error_code). Not cancellable: the
  /// delete always runs to its outcome (about one commit), so a cancelled unlock never leaves the
  /// key behind. Deletes and lock txns of the client's sessions that meet on the wire go to etcd
  /// together in one txn (see README, "Performance").
  /// Errors: error::not_locked (this object does not hold it), error::session_lost (the key was
  /// already gone: the lock had been lost), transport errors.
  template <class CompletionToken = asio::deferred_t>
  auto async_unlock(CompletionToken&& token = {}) {
    return detail::initiate<void(error_code)>(
        token, [s = state_](asio::any_completion_handler<void(error_code)> h) { start_unlock(s, std::move(h)); });
  }

  /// Completes when the session the lock is held under is lost (or closed/orphaned): from then on
  /// the lock cannot be trusted. Handler: void(error_code why), as session::async_wait_lost.
  template <class CompletionToken = asio::deferred_t>
  auto async_wait_lost(CompletionToken&& token = {}) {
    return detail::initiate<void(error_code)>(
        token, [s = state_](asio::any_completion_handler<void(error_code)> h) { start_wait_lost(s, std::move(h)); });
  }

  /// The lock's name, e.g. "jobs/build".
  const std::string& name() const noexcept;
  /// Our key: name + "/" + hex(lease).
  const std::string& key() const noexcept;
  /// True between a successful lock and unlock (as far as this process knows).
  bool held() const noexcept;
  /// Our key's create revision while held: strictly increasing across successive holders, so a
  /// storage system can reject writes carrying an older token.
  std::int64_t fencing_token() const noexcept;
  /// Header of the response that made us owner.
  const response_header& header() const noexcept;
  /// A compare that holds only while we still own the lock; put it in a txn's when() so the
  /// txn's writes fail once the lock was lost.
  compare is_owner() const;

 private:
  static void start_lock(const std::shared_ptr<detail::mutex_state>&, bool try_only,
                         asio::any_completion_handler<void(error_code)>);
  static void start_unlock(const std::shared_ptr<detail::mutex_state>&, asio::any_completion_handler<void(error_code)>);
  static void start_wait_lost(const std::shared_ptr<detail::mutex_state>&,
                              asio::any_completion_handler<void(error_code)>);
  std::shared_ptr<detail::mutex_state> state_;
};

}  // namespace coetcd
