// coetcd::mutex and mutex_options: a distributed lock laid out as etcd's Go concurrency.Mutex.
#pragma once

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
/// excludes every other one, from coroutines sharing this object, from other mutex objects of
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
/// executor, with no RPC (one write when the holder before asked for a fence: see async_unlock).
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
/// they hand their work to the client's strand. The accessors (held(), fencing_token(),
/// is_owner(), header(), …) may be called from any thread too: they read atomics the strand
/// writes, so a handler or a with_lock body on any thread of a pool sees the hold as it is now
/// (moving or assigning the object itself is not thread-safe, as for any Asio object).
class mutex {
 public:
  /// A mutex named `name` under session `s`. Throws boost::system::system_error:
  /// error::empty_key for an empty name, error::session_lost for an empty session.
  mutex(session& s, std::string_view name, mutex_options options = {});
  /// Takes over the other object; `other` is left empty: its accessors return empty values and
  /// its operations complete with asio::error::bad_descriptor (is_owner() throws it).
  mutex(mutex&&) noexcept = default;
  /// Gives up what this object holds and aborts its pending operations, as the destructor does,
  /// then takes over `other`, which is left empty.
  mutex& operator=(mutex&& other) noexcept;
  /// Releases a lock held through this object in the background. Pending locks complete at once
  /// with asio::error::operation_aborted, as an Asio object's operations do when it is destroyed;
  /// the session's waiting key is deleted at once when they could be cancelled (a handler with a
  /// cancellation slot, as a coroutine's), else when its turn comes.
  ~mutex();

  /// Waits until this caller holds the lock.
  ///
  /// @par Handler signature
  /// `void(error_code)`
  /// @par Errors
  /// error::session_lost (the session was lost before or while waiting, or our key vanished),
  /// error::client_closed, the @ref request_errors "request errors" of the acquiring txn (every
  /// caller of the session waiting for that txn gets it), the refusals of the name's watch
  /// (error::permission_denied, ...); asio::error::operation_aborted when cancelled.
  /// @par Cancellation
  /// Terminal, partial, total. A cancelled caller leaves the local queue and completes at once;
  /// when it was the session's last caller on the name, the session's key is deleted in the
  /// background (retried through an outage while the session lives; see lock_stats::cleaning
  /// and the lock_released event), and a later lock of the session waits for that delete rather
  /// than adopt the key. A cancellation that meets the grant before the handler runs gives the
  /// lock back (asio::error::operation_aborted).
  /// @par Executor
  /// The handler's associated executor (default: the client's); never inside this call.
  /// @par Lifetimes
  /// The session must outlive the mutex. On destruction of the mutex, see ~mutex().
  template <class CompletionToken = detail::default_token>
  auto async_lock(CompletionToken&& token = {}) {
    return detail::initiate<void(error_code)>(
        std::forward<CompletionToken>(token), [s = state_](asio::any_completion_handler<void(error_code)> h) { start_lock(s, false, std::move(h)); });
  }

  /// Takes the lock if it is free, without waiting. Costs no RPC when this session's key is
  /// already the owner (lingering), but one put when the hold before it asked for a fence.
  ///
  /// @par Handler signature
  /// `void(error_code)`
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
    return detail::initiate<void(error_code)>(
        std::forward<CompletionToken>(token), [s = state_](asio::any_completion_handler<void(error_code)> h) { start_lock(s, true, std::move(h)); });
  }

  /// Releases the lock held through this object. When another caller of this session waits, it
  /// gets the lock at once (no RPC), unless this hold asked for a fence (is_owner() or
  /// fencing_token()): then the key is first put again (one write; its create revision, and so
  /// the queue's order for Go and etcdctl, stays), so that this hold's compares fail before the
  /// next caller holds. Otherwise the session's key is deleted, by a txn guarded by its create
  /// revision (Go's Unlock is a plain delete: a resent copy of ours could otherwise remove a
  /// newer key of the session), and the handler runs after its outcome. If the delete fails,
  /// the error is reported and the delete is retried in the background until it succeeds or the
  /// session ends, so the name never stays blocked by a live session that no longer uses it.
  /// Deletes and lock txns of the client's sessions that meet on the wire go to etcd together in
  /// one txn (see docs/how-it-works.md, "Many sessions, one client").
  ///
  /// @par Handler signature
  /// `void(error_code)`
  /// @par Errors
  /// error::not_locked (this object does not hold it), error::session_lost (the key was
  /// already gone: the lock had been lost), error::client_closed, the
  /// @ref request_errors "request errors" of the delete.
  /// @par Cancellation
  /// None: the slot is not used, and the release always runs to its outcome.
  /// @par Executor
  /// The handler's associated executor (default: the client's); never inside this call.
  /// @par Lifetimes
  /// The mutex may be destroyed meanwhile; the release goes on.
  template <class CompletionToken = detail::default_token>
  auto async_unlock(CompletionToken&& token = {}) {
    return detail::initiate<void(error_code)>(
        std::forward<CompletionToken>(token), [s = state_](asio::any_completion_handler<void(error_code)> h) { start_unlock(s, std::move(h)); });
  }

  /// Completes when the session the lock is held under is lost (or closed/orphaned): from then on
  /// the lock cannot be trusted.
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
  /// The mutex may be destroyed meanwhile; the wait goes on, as session::async_wait_lost's.
  template <class CompletionToken = detail::default_token>
  auto async_wait_lost(CompletionToken&& token = {}) {
    return detail::initiate<void(error_code)>(
        std::forward<CompletionToken>(token), [s = state_](asio::any_completion_handler<void(error_code)> h) { start_wait_lost(s, std::move(h)); });
  }

  /// The type of get_executor().
  using executor_type = asio::any_io_executor;
  /// The client's executor, on which handlers run by default (empty for an empty object).
  executor_type get_executor() const noexcept;
  /// The lock's name ("jobs/build", say).
  const std::string& name() const noexcept;
  /// Our key: name + "/" + hex(lease).
  const std::string& key() const noexcept;
  /// True between a successful lock and unlock through this object (as far as this process
  /// knows): false once the session counts as lost, its lease's local deadline included (see
  /// session::lost()), even before the session's loss is delivered. Not a sign that the hold is
  /// over here: async_unlock() (or destroying the object) still ends it, and fencing_token() and
  /// is_owner() answer for it until then (etcd checks them).
  bool held() const noexcept;
  /// While held, the etcd revision at which this hold began, else 0: the revision of the txn
  /// that found our key the oldest, of the view that saw our turn come, or of the put of a fenced
  /// local hand-off. Strictly increasing across every holder that reads it (or builds
  /// is_owner()), local holders of one session included, so a storage system can reject writes
  /// carrying an older token: reading it makes the next local hand-off put the key again first
  /// (one write). Holders that read neither share the token of the hold before them and cost no
  /// write. Comparable with other coetcd holders' tokens; Go's and etcdctl's (the key's create
  /// revision) are lower bounds of theirs, not ordered against ours.
  std::int64_t fencing_token() const noexcept;
  /// While held: the number of holds of this name by this session so far (1, 2, ...): strictly
  /// increasing across the session's local holders. 0 when not held.
  std::uint64_t local_sequence() const noexcept;
  /// Header of the response that made us owner (a copy: safe to read from any thread).
  response_header header() const noexcept;
  /// A compare that holds only while this hold lasts: the key's mod revision as this hold began.
  /// Put it in a txn's when() so the txn's writes fail once the lock was lost or passed on, to
  /// another session or to the next caller of this one (building it makes the hand-off after this
  /// hold put the key again first). From an object that does not hold the lock it never holds.
  /// An election of this session on the same name shares the key; its proclaims move the fence
  /// with them (a compare built before one then fails, never the other way round).
  compare is_owner() const;

 private:
  friend class multi_lock;
  static void start_lock(const std::shared_ptr<detail::mutex_state>&, bool try_only,
                         asio::any_completion_handler<void(error_code)>);
  static void start_unlock(const std::shared_ptr<detail::mutex_state>&, asio::any_completion_handler<void(error_code)>);
  static void start_wait_lost(const std::shared_ptr<detail::mutex_state>&,
                              asio::any_completion_handler<void(error_code)>);
  std::shared_ptr<detail::mutex_state> state_;
};

}  // namespace coetcd
