// coetcd::mutex and mutex_options: a distributed lock laid out as etcd's Go concurrency.Mutex.
#pragma once

#include <coetcd/detail/lock_hold.hpp>
#include <coetcd/session.hpp>
#include <coetcd/txn.hpp>

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace coetcd {

namespace detail {
struct mutex_state;
}

/// How a session shares a busy name with other sessions, and whether it keeps an idle key.
struct mutex_options {
  /// Once the name's queue shows a waiter of another session behind our key, the session passes
  /// the lock to its own callers at most this many more times, or for at most `fair_hold`
  /// (whichever ends first), then releases its key and queues its remaining callers behind that
  /// waiter. A hold in progress is never cut short: the bound is checked at each unlock.
  std::size_t fair_handoffs = 1000;
  /// The time bound of the rule above (see fair_handoffs).
  std::chrono::milliseconds fair_hold{50};
  /// After the last local unlock, keep the key this long while no other session waits, so a
  /// lock of the same name soon after costs no RPC (one put if the last holder asked for a
  /// fence). Zero (the default): release at once.
  /// A waiter of another session ends the linger at once (one delete). The cost: a process that
  /// crashes while lingering blocks the name until its session's TTL runs out, as a crash while
  /// holding does.
  std::chrono::milliseconds linger{0};
};

/// A distributed lock that excludes every caller: each successful async_lock / async_try_lock
/// hands its caller a mutex::hold, and a hold excludes every other one, from coroutines sharing this object, from other mutex objects of
/// this process (same session or not), and from other processes (coetcd, Go's
/// concurrency.Mutex, `etcdctl lock`). Not reentrant, like std::mutex: locking it again from
/// the holder waits for ever.
///
/// On etcd it is laid out exactly like Go's concurrency.Mutex and `etcdctl lock`: the key is
/// `name + "/" + lease id in lowercase hex`, created under the session's lease; the owner is the
/// key with the oldest create revision among the name's own keys under `name + "/"`; sessions
/// are served in create-revision (FIFO) order.
///
/// Names that prefix one another with a "/" between are different locks: the keys of `jobs/x`
/// (`jobs/x/<lease>`) sit under `jobs/`, but only the keys one segment below `jobs/` (and
/// rw_mutex's `jobs/read/<lease>`, `jobs/write/<lease>`) are `jobs`'s own, so a lock of `jobs`
/// neither waits for a holder of `jobs/x` nor yields its turn to it, and holding `jobs/x` while
/// locking `jobs` does not wait for itself. Go's Mutex and `etcdctl lock` count every key under
/// the prefix: their lockers of `jobs` still wait for a coetcd holder of `jobs/x` (so a process
/// that holds `jobs/x` and waits for `jobs` behind such a locker waits for ever, as in Go), and
/// since every key they lay out for `jobs` is one of `jobs`'s own, coetcd and Go still exclude
/// each other on `jobs`. A name ending in "/" is accepted as Go accepts it: `jobs/` has the keys
/// `jobs//<lease>`, and is a lock of its own, not `jobs`. A name `NAME/read` or `NAME/write` has
/// the keys of rw_mutex `NAME`'s sides, and shares its queue (see docs/lock-family.md). A session keeps one key per name while any of its callers holds or waits; its
/// callers queue locally (FIFO) behind it, so a hand-off between two of them is a resume on the
/// executor, with no RPC (one write when the holder before asked for a fence: see
/// hold::async_release).
/// Sessions take turns fairly: see mutex_options.
///
/// Waiting costs no thread and no stream: the sessions of one client that wait on a name share
/// one watch on the shared Watch stream and a local view of the queue, so a hand-off between
/// sessions is one Delete commit plus one notification.
///
/// Any number of operations may be pending on one object (share it between coroutines as a
/// std::mutex is shared between threads). The session must outlive the mutex.
///
/// Threads: initiating functions (async_*) and the destructor may be called from any thread;
/// they hand their work to the client's strand. A hold's accessors (operator bool,
/// fencing_token(), fence(), header(), …) may be called from any thread too: they read atomics
/// the strand writes, so a handler or a with_lock body on any thread of a pool sees the hold as it
/// is now (moving or assigning an object or a hold is not thread-safe, as for any Asio object).
class mutex {
 public:
  /// One caller's hold of the lock, handed to it by async_lock or async_try_lock. Move-only: one
  /// owner per hold, so nobody else can release it, fence with it or read its token. Released in
  /// the background when destroyed while held (a failed delete is retried while the session
  /// lives), as std::unique_lock unlocks in its destructor; so a handler that drops its hold
  /// (a lock that lost an `||` race, say) lets go at once.
  ///
  /// A hold does not point at its mutex object: destroying or moving the object leaves it alone.
  /// The session must outlive it.
  class [[nodiscard]] hold : public detail::lock_hold {
   public:
    /// Empty: holds nothing; its operations complete with asio::error::bad_descriptor.
    hold() noexcept = default;
    /// @cond INTERNAL
    explicit hold(detail::lock_hold&& h) noexcept : detail::lock_hold(std::move(h)) {}
    /// @endcond
    /// Takes over `other`'s hold; `other` is left empty.
    hold(hold&&) noexcept = default;
    /// Releases this hold as the destructor does, then takes over `other`'s; `other` is left empty.
    hold& operator=(hold&&) noexcept = default;

#ifdef COETCD_DOXYGEN
    /// Held now: not empty, not released, and the session not counted as lost
    /// (session::lost(), the lease's local deadline included), even before the session's loss is
    /// delivered. False is not a sign that the hold is over here: async_release() (or destroying
    /// the hold) still ends it, and fencing_token() and fence() answer for it until then (etcd
    /// checks them).
    explicit operator bool() const noexcept;
    /// While held, the etcd revision at which this hold began, else 0: the revision of the txn
    /// that found our key the oldest, of the view that saw our turn come, or of the put of a
    /// fenced local hand-off. Strictly increasing across every holder that reads it (or builds
    /// fence()), local holders of one session included, so a storage system can reject writes
    /// carrying an older token: reading it makes the next local hand-off of the session put the
    /// key again first (one write; docs/fencing-local-holders.md). Holders that read neither share
    /// the token of the hold before them and cost no write. Comparable with other coetcd holders'
    /// tokens; Go's and etcdctl's (the key's create revision) are lower bounds of theirs, not
    /// ordered against ours.
    std::int64_t fencing_token() noexcept;
    /// A compare that holds only while this hold lasts: the key's mod revision as this hold began.
    /// Put it in a txn's when() so the txn's writes fail once the lock was lost or passed on, to
    /// another session or to the next caller of this one (building it makes the hand-off after
    /// this hold put the key again first). Once the hold is over it never holds. An election of
    /// this session on the same name shares the key; its proclaims move the fence with them (a
    /// compare built before one then fails, never the other way round). Empty: throws
    /// boost::system::system_error (asio::error::bad_descriptor).
    compare fence();
    /// Gives the hold up. When another caller of this session waits, it gets the lock at once (no
    /// RPC), unless this hold asked for a fence (fence() or fencing_token()): then the key is
    /// first put again (one write; its create revision, and so the queue's order for Go and
    /// etcdctl, stays), so that this hold's compares fail before the next caller holds.
    /// Otherwise the session's key is deleted, by a txn guarded by its create revision (Go's
    /// Unlock is a plain delete: a resent copy of ours could otherwise remove a newer key of the
    /// session), and the handler runs after its outcome. If the delete fails, the error is
    /// reported and the delete is retried in the background until it succeeds or the session
    /// ends, so the name never stays blocked by a live session that no longer uses it.
    ///
    /// @par Handler signature
    /// `void(error_code)`
    /// @par Errors
    /// error::not_locked (released already), error::session_lost (the key was already gone: the
    /// lock had been lost), error::client_closed, the @ref request_errors "request errors" of the
    /// delete; asio::error::bad_descriptor for an empty hold.
    /// @par Cancellation
    /// None: the slot is not used, and the release always runs to its outcome.
    /// @par Executor
    /// The handler's associated executor (default: the client's); never inside this call.
    /// @par Lifetimes
    /// The hold may be destroyed meanwhile; the release goes on.
    template <class CompletionToken = detail::default_token>
    auto async_release(CompletionToken&& token = {});
    /// Completes with success when the hold is lost: its session is lost, closed, orphaned or
    /// destroyed, and from then on the lock cannot be trusted. Any number may be pending.
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
    auto async_wait_lost(CompletionToken&& token = {});
    /// The client's executor, on which handlers run by default (empty for an empty hold).
    executor_type get_executor() const noexcept;
    /// Our key: name + "/" + hex(lease).
    const std::string& key() const noexcept;
    /// The number of holds of this name by this session so far (1, 2, ...) when this one began:
    /// strictly increasing across the session's local holders. 0 when empty.
    std::uint64_t local_sequence() const noexcept;
    /// Header of the response that made us owner (a copy: safe to read from any thread).
    response_header header() const noexcept;
#endif
  };

  /// A mutex named `name` under session `s`. Throws boost::system::system_error:
  /// error::empty_key for an empty name, error::session_lost for an empty session.
  mutex(session& s, std::string_view name, mutex_options options = {});
  /// Takes over the other object; `other` is left empty: its accessors return empty values and
  /// its operations complete with asio::error::bad_descriptor. Holds are not affected.
  mutex(mutex&&) noexcept = default;
  /// Aborts this object's pending operations, as the destructor does, then takes over `other`,
  /// which is left empty.
  mutex& operator=(mutex&& other) noexcept;
  /// Pending locks complete at once with asio::error::operation_aborted, as an Asio object's
  /// operations do when it is destroyed; the session's waiting key is deleted at once when they
  /// could be cancelled (a handler with a cancellation slot, as a coroutine's), else when its turn
  /// comes. Holds taken through the object are not affected: each ends when it is released or
  /// destroyed.
  ~mutex();

  /// Waits until this caller holds the lock, and hands it the hold.
  ///
  /// @par Handler signature
  /// `void(error_code, mutex::hold)`: the hold is empty on error.
  /// @par Errors
  /// error::session_lost (the session was lost before or while waiting, or our key vanished),
  /// error::client_closed, the @ref request_errors "request errors" of the acquiring txn (every
  /// caller of the session waiting for that txn gets it), the refusals of the name's watch
  /// (error::permission_denied, ...); asio::error::operation_aborted when cancelled or when the
  /// mutex is destroyed first.
  /// @par Cancellation
  /// Terminal, partial, total. A cancelled caller leaves the local queue and completes at once;
  /// when it was the session's last caller on the name, the session's key is deleted in the
  /// background (retried through an outage while the session lives; see lock_stats::cleaning
  /// and the lock_released event), and a later lock of the session waits for that delete rather
  /// than adopt the key. A cancellation that meets the grant before the handler runs gives the
  /// lock back (asio::error::operation_aborted, an empty hold).
  /// @par Executor
  /// The handler's associated executor (default: the client's); never inside this call.
  /// @par Lifetimes
  /// The session must outlive the mutex and its holds. On destruction of the mutex, see ~mutex().
  template <class CompletionToken = detail::default_token>
  auto async_lock(CompletionToken&& token = {}) {
    return detail::initiate_hold<hold>(std::forward<CompletionToken>(token),
                                       [s = state_](detail::lock_handler h) { start_lock(s, false, std::move(h)); });
  }

  /// Takes the lock if it is free, without waiting. Costs no RPC when this session's key is
  /// already the owner (lingering), but one put when the hold before it asked for a fence.
  ///
  /// @par Handler signature
  /// `void(error_code, mutex::hold)`: the hold is empty on error.
  /// @par Errors
  /// error::locked when the lock is held or waited for. Seen locally (callers of this session)
  /// that costs no RPC; else the try's txn made a key, which is deleted again: when the try was
  /// the session's only caller on the name, the handler runs once that delete is done (retried
  /// through an outage while the session lives), else the delete runs in the background. Other
  /// errors as async_lock.
  /// @par Cancellation
  /// Terminal, partial, total, as async_lock; also while a refused try waits for its key's delete
  /// (operation_aborted at once, the delete goes on in the background), and so does destroying
  /// the mutex then.
  /// @par Executor
  /// The handler's associated executor (default: the client's); never inside this call.
  /// @par Lifetimes
  /// As async_lock.
  template <class CompletionToken = detail::default_token>
  auto async_try_lock(CompletionToken&& token = {}) {
    return detail::initiate_hold<hold>(std::forward<CompletionToken>(token),
                                       [s = state_](detail::lock_handler h) { start_lock(s, true, std::move(h)); });
  }

  /// The type of get_executor().
  using executor_type = asio::any_io_executor;
  /// The client's executor, on which handlers run by default (empty for an empty object).
  executor_type get_executor() const noexcept;
  /// The lock's name ("jobs/build", say).
  const std::string& name() const noexcept;
  /// The session's key for the name: name + "/" + hex(lease).
  const std::string& key() const noexcept;

 private:
  friend class multi_lock;
  static void start_lock(const std::shared_ptr<detail::mutex_state>&, bool try_only, detail::lock_handler);
  std::shared_ptr<detail::mutex_state> state_;
};

}  // namespace coetcd
