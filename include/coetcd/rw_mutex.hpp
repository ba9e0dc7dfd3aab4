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
/// must outlive it and its holds; initiating functions, the destructor and the holds' accessors
/// may be called from any thread. Each acquisition hands its caller a hold of its own: a
/// rw_mutex::hold (exclusive) or a rw_mutex::shared_hold.
class rw_mutex {
 public:
  /// An exclusive hold, handed over by async_lock and async_try_lock: as mutex::hold, except for
  /// its fence. fence() holds while our write key is still the one that gave us the lock (its
  /// create revision). A writer that reads its token or builds its fence hands the write lock to
  /// the next writer of its session through etcd: its key is deleted and made again (Go's recipe
  /// orders writers by mod revision, so the key cannot be put again in place), so the compare
  /// fails under the next writer.
  class [[nodiscard]] hold : public detail::lock_hold {
   public:
    /// Empty: holds nothing; its operations complete with asio::error::bad_descriptor.
    hold() noexcept = default;
    /// @cond INTERNAL
    explicit hold(detail::lock_hold&& h) noexcept : detail::lock_hold(std::move(h)) {}
    /// @endcond
    /// Takes over `other`'s hold; `other` is left empty.
    hold(hold&&) noexcept = default;
    /// Releases this hold as the destructor does, then takes over `other`'s.
    hold& operator=(hold&&) noexcept = default;
  };
  /// A shared hold, handed over by async_lock_shared and async_try_lock_shared: as mutex::hold,
  /// except that readers holding together share their fencing token, and fence() holds while any
  /// reader of the session holds the read key: it proves that no writer holds, which is all a
  /// shared hold promises. Releasing the session's last shared hold deletes the read key.
  class [[nodiscard]] shared_hold : public detail::lock_hold {
   public:
    /// Empty: holds nothing; its operations complete with asio::error::bad_descriptor.
    shared_hold() noexcept = default;
    /// @cond INTERNAL
    explicit shared_hold(detail::lock_hold&& h) noexcept : detail::lock_hold(std::move(h)) {}
    /// @endcond
    /// Takes over `other`'s hold; `other` is left empty.
    shared_hold(shared_hold&&) noexcept = default;
    /// Releases this hold as the destructor does, then takes over `other`'s.
    shared_hold& operator=(shared_hold&&) noexcept = default;
  };

  /// An rw_mutex named `name` under session `s`. Throws boost::system::system_error:
  /// error::empty_key for an empty name, error::session_lost for an empty session.
  rw_mutex(session& s, std::string_view name, mutex_options options = {});
  /// Takes over the other object; `other` is left empty: its accessors return empty values and
  /// its operations complete with asio::error::bad_descriptor. Holds are not affected.
  rw_mutex(rw_mutex&&) noexcept = default;
  /// Aborts this object's pending operations, as the destructor does, then takes over `other`,
  /// which is left empty.
  rw_mutex& operator=(rw_mutex&& other) noexcept;
  /// Pending locks complete at once with asio::error::operation_aborted, as for ~mutex(). Holds
  /// are not affected.
  ~rw_mutex();

  /// Waits until this caller holds the lock exclusively.
  ///
  /// @par Handler signature
  /// `void(error_code, rw_mutex::hold)`: the hold is empty on error.
  /// @par Errors
  /// As mutex::async_lock.
  /// @par Cancellation
  /// Terminal, partial, total, as mutex::async_lock.
  /// @par Executor
  /// The handler's associated executor (default: the client's); never inside this call.
  /// @par Lifetimes
  /// The session must outlive the rw_mutex and its holds. On destruction of the rw_mutex, see
  /// ~rw_mutex().
  template <class CompletionToken = detail::default_token>
  auto async_lock(CompletionToken&& token = {}) {
    return detail::initiate_hold<hold>(std::forward<CompletionToken>(token),
                                       [s = write_](detail::lock_handler h) { start(s, false, std::move(h)); });
  }
  /// Takes the lock exclusively if nobody holds or waits for it, without waiting.
  ///
  /// @par Handler signature
  /// `void(error_code, rw_mutex::hold)`: the hold is empty on error.
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
    return detail::initiate_hold<hold>(std::forward<CompletionToken>(token),
                                       [s = write_](detail::lock_handler h) { start(s, true, std::move(h)); });
  }

  /// Waits until this caller holds the lock shared: no writer holds it or queued before it.
  ///
  /// @par Handler signature
  /// `void(error_code, rw_mutex::shared_hold)`: the hold is empty on error.
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
    return detail::initiate_hold<shared_hold>(std::forward<CompletionToken>(token),
                                              [s = read_](detail::lock_handler h) { start(s, false, std::move(h)); });
  }
  /// Takes the lock shared if no writer holds it or waits for it, without waiting.
  ///
  /// @par Handler signature
  /// `void(error_code, rw_mutex::shared_hold)`: the hold is empty on error.
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
    return detail::initiate_hold<shared_hold>(std::forward<CompletionToken>(token),
                                              [s = read_](detail::lock_handler h) { start(s, true, std::move(h)); });
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

 private:
  friend class multi_lock;
  static void start(const std::shared_ptr<detail::mutex_state>&, bool try_only, detail::lock_handler);
  std::shared_ptr<detail::mutex_state> write_, read_;
};

}  // namespace coetcd
