// coetcd::rw_mutex: a distributed read-write lock laid out as Go's recipe.RWMutex.
#pragma once

#include <coetcd/mutex.hpp>

namespace coetcd {

/// A distributed read-write lock: one writer (async_lock) or any number of readers
/// (async_lock_shared) at a time, across coroutines, mutex objects, sessions and processes.
///
/// On etcd it is laid out as Go's recipe.RWMutex (etcd's contrib/recipes), so a Go service using
/// that recipe and a coetcd service on the same name exclude each other: a reader's key is
/// `name + "/read/" + lease id in hex`, a writer's `name + "/write/" + lease id in hex`, both
/// under the session's lease. A writer waits until no key under `name + "/"` is older than its
/// own; a reader waits until no key under `name + "/write"` is older. Keys of longer names under
/// the prefix (`name/x/<lease>`, `name/writer/<lease>`) count for neither, as for coetcd::mutex. So the queue is FIFO by
/// create revision: a writer is never starved by readers that come after it, and readers that
/// queued together hold together. (Go names its keys by UnixNano; it only compares revisions.)
///
/// Within a session, callers share keys: the readers of one session hold on one read key (a
/// reader arriving while the key is held joins it at once, with no RPC, unless a writer waits
/// behind the key: then it queues behind that writer, as a reader of another process would);
/// its writers queue locally behind one write key and hand it over as coetcd::mutex does (see
/// mutex_options for when they yield to waiting readers and writers of other sessions).
///
/// Not upgradable or downgradable: a caller holding it shared that asks for it exclusively
/// (or the reverse) waits for ever, as with Go's recipe and std::shared_mutex.
///
/// Like coetcd::mutex: any number of operations may be pending on one object; the session
/// must outlive it; initiating functions, the destructor and the accessors may be called from
/// any thread. An object may hold the lock shared several times
/// (each async_lock_shared needs its async_unlock_shared).
class rw_mutex {
 public:
  /// An rw_mutex named `name` under session `s`. Throws boost::system::system_error:
  /// error::empty_key for an empty name, error::session_lost for an empty session.
  rw_mutex(session& s, std::string_view name, mutex_options options = {});
  /// Takes over the other object; `other` is left empty: its accessors return empty values and
  /// its operations complete with asio::error::bad_descriptor (is_owner() throws it).
  rw_mutex(rw_mutex&&) noexcept = default;
  /// Gives up what this object holds and aborts its pending operations, as the destructor does,
  /// then takes over `other`, which is left empty.
  rw_mutex& operator=(rw_mutex&& other) noexcept;
  /// Releases the holds of this object (exclusive and shared) in the background. Pending locks
  /// complete at once with asio::error::operation_aborted, as for ~mutex().
  ~rw_mutex();

  /// Waits until this caller holds the lock exclusively.
  ///
  /// @par Handler signature
  /// `void(error_code)`
  /// @par Errors
  /// As mutex::async_lock.
  /// @par Cancellation
  /// Terminal, partial, total, as mutex::async_lock.
  /// @par Executor
  /// The handler's associated executor (default: the client's); never inside this call.
  /// @par Lifetimes
  /// The session must outlive the rw_mutex. On destruction of the rw_mutex, see ~rw_mutex().
  template <class CompletionToken = detail::default_token>
  auto async_lock(CompletionToken&& token = {}) {
    return start(std::forward<CompletionToken>(token), write_, op::lock);
  }
  /// Takes the lock exclusively if nobody holds or waits for it, without waiting.
  ///
  /// @par Handler signature
  /// `void(error_code)`
  /// @par Errors
  /// error::locked otherwise; a key the try made is deleted again, as for mutex::async_try_lock
  /// (the handler waits for that delete when the try was the session's only caller on its key).
  /// Other errors as mutex::async_lock.
  /// @par Cancellation
  /// Terminal, partial, total, as mutex::async_lock.
  /// @par Executor
  /// The handler's associated executor (default: the client's); never inside this call.
  /// @par Lifetimes
  /// As async_lock.
  template <class CompletionToken = detail::default_token>
  auto async_try_lock(CompletionToken&& token = {}) {
    return start(std::forward<CompletionToken>(token), write_, op::try_lock);
  }
  /// Releases an exclusive hold.
  ///
  /// @par Handler signature
  /// `void(error_code)`
  /// @par Errors
  /// As mutex::async_unlock.
  /// @par Cancellation
  /// None: the release always runs to its outcome.
  /// @par Executor
  /// The handler's associated executor (default: the client's); never inside this call.
  /// @par Lifetimes
  /// The rw_mutex may be destroyed meanwhile; the release goes on.
  template <class CompletionToken = detail::default_token>
  auto async_unlock(CompletionToken&& token = {}) {
    return start(std::forward<CompletionToken>(token), write_, op::unlock);
  }

  /// Waits until this caller holds the lock shared: no writer holds it or queued before it.
  ///
  /// @par Handler signature
  /// `void(error_code)`
  /// @par Errors
  /// As mutex::async_lock.
  /// @par Cancellation
  /// Terminal, partial, total, as mutex::async_lock.
  /// @par Executor
  /// The handler's associated executor (default: the client's); never inside this call.
  /// @par Lifetimes
  /// As async_lock.
  template <class CompletionToken = detail::default_token>
  auto async_lock_shared(CompletionToken&& token = {}) {
    return start(std::forward<CompletionToken>(token), read_, op::lock);
  }
  /// Takes the lock shared if no writer holds it or waits for it, without waiting.
  ///
  /// @par Handler signature
  /// `void(error_code)`
  /// @par Errors
  /// error::locked otherwise; a key the try made is deleted again, as for async_try_lock.
  /// Other errors as mutex::async_lock.
  /// @par Cancellation
  /// Terminal, partial, total, as mutex::async_lock.
  /// @par Executor
  /// The handler's associated executor (default: the client's); never inside this call.
  /// @par Lifetimes
  /// As async_lock.
  template <class CompletionToken = detail::default_token>
  auto async_try_lock_shared(CompletionToken&& token = {}) {
    return start(std::forward<CompletionToken>(token), read_, op::try_lock);
  }
  /// Releases one shared hold of this object. When it was the session's last reader, the read
  /// key is deleted and the handler runs after the delete's outcome.
  ///
  /// @par Handler signature
  /// `void(error_code)`
  /// @par Errors
  /// error::not_locked (this object holds it shared no more), error::session_lost,
  /// error::client_closed, the @ref request_errors "request errors" of the delete (which is
  /// then retried in the background, as mutex::async_unlock's).
  /// @par Cancellation
  /// None: the release always runs to its outcome.
  /// @par Executor
  /// The handler's associated executor (default: the client's); never inside this call.
  /// @par Lifetimes
  /// The rw_mutex may be destroyed meanwhile; the release goes on.
  template <class CompletionToken = detail::default_token>
  auto async_unlock_shared(CompletionToken&& token = {}) {
    return start(std::forward<CompletionToken>(token), read_, op::unlock);
  }

  /// Completes when the session is lost (or closed): holds cannot be trusted from then on.
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
  /// The rw_mutex may be destroyed meanwhile; the wait goes on, as session::async_wait_lost's.
  template <class CompletionToken = detail::default_token>
  auto async_wait_lost(CompletionToken&& token = {}) {
    return start(std::forward<CompletionToken>(token), write_, op::wait_lost);
  }

  /// The type of get_executor().
  using executor_type = asio::any_io_executor;
  /// The client's executor, on which handlers run by default (empty for an empty object).
  executor_type get_executor() const noexcept;
  /// The lock's name ("config", say).
  const std::string& name() const noexcept;
  /// Our write key: name + "/write/" + hex(lease).
  const std::string& write_key() const noexcept;
  /// Our read key: name + "/read/" + hex(lease).
  const std::string& read_key() const noexcept;
  /// Held exclusively through this object: false once the session counts as lost, its lease's
  /// local deadline included (see session::lost()), even before the loss is delivered. The hold
  /// still ends with async_unlock(), as mutex::held() says.
  bool held() const noexcept;
  /// Shared holds of this object not yet unlocked.
  int shared_holds() const noexcept;
  /// While held (exclusively, else shared): the etcd revision at which the hold began, as
  /// mutex::fencing_token(); else 0. Strictly increasing across writers that read it or build
  /// is_owner(), so storage can reject writes with an older token. Readers holding together
  /// share theirs.
  std::int64_t fencing_token() const noexcept;
  /// A compare that holds only while our key (the write key when held exclusively, else the read
  /// key) is still the one that gave us the lock; never holds when not held. A writer that reads
  /// its token or builds this compare hands the write lock to the next writer of its session
  /// through etcd: its key is deleted and made again (Go's recipe orders writers by mod revision,
  /// so the key cannot be put again in place), so the compare fails under the next writer. A
  /// reader's compare holds while any reader of the session holds the read key: it proves that
  /// no writer holds, which is all a shared hold promises.
  compare is_owner() const;

 private:
  friend class multi_lock;
  enum class op { lock, try_lock, unlock, wait_lost };
  template <class CompletionToken>
  auto start(CompletionToken&& token, const std::shared_ptr<detail::mutex_state>& side, op o) {
    return detail::initiate<void(error_code)>(
        std::forward<CompletionToken>(token), [side, o](asio::any_completion_handler<void(error_code)> h) { run(side, o, std::move(h)); });
  }
  static void run(const std::shared_ptr<detail::mutex_state>&, op, asio::any_completion_handler<void(error_code)>);
  std::shared_ptr<detail::mutex_state> write_, read_;
};

}  // namespace coetcd
