// The local queue of one session on one lock key, shared by coetcd::mutex and both sides of
// coetcd::rw_mutex (see mutex.cpp for how it works). Internal to the recipes.
#pragma once

#include "queue_ops.hpp"
#include "core/loss_waits.hpp"
#include "core/published.hpp"

#include <coetcd/detail/lock_hold.hpp>
#include <coetcd/mutex.hpp>

#include <atomic>
#include <list>
#include <map>
#include <optional>

namespace coetcd::detail {

struct mutex_queue;

struct mutex_state {
  std::shared_ptr<session_state> session;
  std::string name;
  std::string prefix;  // name + "/"
  std::string key;     // prefix + hex(lease); rw_mutex: prefix + "read/" or "write/" + hex(lease)
  mutex_options options;
  /// The read side of an rw_mutex: every caller waiting when the key's turn comes holds at once,
  /// and only older keys under `blockers` (name + "/write") go first.
  bool shared = false;
  std::string blockers;
  /// The write side of an rw_mutex: the read side's key of the same session, whose callers are
  /// served in the order they asked with this side's (see mutex_queue::readers_first).
  std::string readers;
  std::shared_ptr<mutex_queue> queue;  // set on the strand at first use
  /// The mutex object is gone: a grant whose handler has not run yet is given back
  /// (operation_aborted), as its pending locks are aborted. Set by the destructor on its own
  /// thread, before it hands the rest to the strand, so a grant's handler that runs after the
  /// destructor returned sees it whichever of the two the executors run first.
  std::atomic<bool> orphaned{false};
};

/// One caller's hold of a queue's key, owned by the lock_hold handed to it (mutex::hold,
/// rw_mutex::hold, rw_mutex::shared_hold). The queue names its holder by it (weakly), so only the
/// hold's owner can end it. Atomics (and a seqlock for the header): written on the strand, read by
/// the hold's accessors from any thread, e.g. a handler or a with_lock body on another thread of a
/// pool.
struct hold_state {
  /// How fence() compares: the key's mod revision (mutex: a fenced hand-off puts the key again),
  /// or its create revision (rw_mutex: the write side queues again instead; the read side's key
  /// lives while any reader of the session holds).
  enum class fence_by { mod_revision, create_revision };

  std::shared_ptr<mutex_queue> queue;  // strong: the hold keeps its session's queue and key
  mutex_options options;               // of the object it came through: for the hand-off after it
  fence_by kind = fence_by::mod_revision;
  std::atomic<bool> held{false};
  std::atomic<std::int64_t> rev{0};
  /// The key's mod revision when this hold began, moved on by the proclaims of an election of
  /// the session on the same key (key_rewritten): fence() compares it.
  std::atomic<std::int64_t> mod_rev{0};
  std::atomic<std::int64_t> fence{0};  // fencing_token()
  /// This hold read fencing_token() or built fence(): its hand-off to another local caller must
  /// move the fence first. Set by the accessors (the user's thread), read on the strand.
  std::atomic<bool> fence_asked{false};
  std::uint64_t sequence = 0;  // set before the hold reaches its owner, then read only
  published_header header;
  /// async_wait_lost callers (on the strand), made at the first.
  std::shared_ptr<loss_waits> losses;

  /// operator bool of the holds: held, and the session not past its lease's deadline, where etcd
  /// may have expired it and let another holder in before the loop runs the keepalive's timer
  /// that ends the session (session::lost() reads the deadline too).
  bool holds_now() const;

  /// For fence() and fencing_token(), on any thread: marks the hold as fenced and reads its
  /// revisions and token; false once the hold is over. The mark comes before the read of `held`,
  /// and end_hold() clears `held` before it takes the mark (both sequentially consistent): an
  /// accessor that still sees the hold has its mark seen by the release, so the next local holder
  /// never holds under a compare built now.
  struct fence_read {
    std::int64_t rev = 0, mod_rev = 0, token = 0;
  };
  bool read_fence(fence_read& out) noexcept {
    fence_asked.store(true);
    if (!held.load()) return false;
    out = {rev.load(), mod_rev.load(), fence.load()};
    return true;
  }
  /// The hold ended (released, given back, or its release found the session lost): its loss
  /// waiters complete with operation_aborted. On the strand.
  void end_waits();
};

struct mutex_queue : std::enable_shared_from_this<mutex_queue> {
  enum class key_state { none, acquiring, owned, releasing };
  using clock = std::chrono::steady_clock;
  struct waiter {
    std::uint64_t id;
    std::shared_ptr<mutex_state> by;
    bool try_only;
    bool cancellable;
    std::shared_ptr<early_cancel> cancel;  // null when nobody can cancel the caller
    lock_handler done;
    clock::time_point since = clock::now();
    /// shared: asked after a writer queued behind our read key, which is waiting for its turn:
    /// holds after that writer, with the key's next round, not with this one (FIFO).
    bool late = false;
    /// With span hooks: the caller's wait, under which the RPCs a driver started for it go.
    std::shared_ptr<const op_trace> trace;
  };

  mutex_queue(std::shared_ptr<session_state> s, const mutex_state& m)
      : session(std::move(s)), name(m.name), prefix(m.prefix), key(m.key), shared(m.shared), blockers(m.blockers),
        readers(m.readers),
        counters(session->impl->telemetry_.lock(name)) {}
  ~mutex_queue();

  // All on the strand.
  void lock(std::shared_ptr<mutex_state> by, bool try_only, bool cancellable,
            std::shared_ptr<early_cancel> cancel, lock_handler h);
  /// Ends the hold `by` (async_release, or its owner dropped it): error::not_locked when it was over.
  void unlock(const std::shared_ptr<hold_state>& by, asio::any_completion_handler<void(error_code)> h);
  void start_driver();
  void spawn_driver();
  asio::awaitable<void> drive();
  void await_turn(std::int64_t rev, std::int64_t mod_rev, response_header h, turn_rule rule);
  void turn_ended(error_code ec);
  void after_turn();
  void acquired(std::int64_t rev, std::int64_t mod_rev, response_header h);
  /// The driver is done without the key: the callers that left complete, and callers that came
  /// since get a new driver.
  void acquire_failed();
  /// The driver's acquisition failed (`ec`) or was given up (operation_aborted): the callers
  /// that left complete now, and the others get `ec`, before any clean-up runs.
  void give_up(error_code ec);
  /// give_up(ec), clean_up(rev, refused), acquire_failed(): a driver done without the key.
  void fail_acquisition(error_code ec, std::int64_t rev, lock_handler refused = {},
                        std::shared_ptr<early_cancel> refused_cancel = nullptr, const mutex_state* refused_by = nullptr);
  /// Removes what the driver's txn made (`rev`, 0 when unknown), in the background as far as
  /// callers go: counted in client::stats() (`cleaning`) and told as a lock_released event.
  /// `refused`, a try_lock that found the name taken, gets error::locked once the key is gone, or
  /// operation_aborted as soon as `refused_cancel` (its cancellation) comes or its mutex
  /// (`refused_by`) is destroyed.
  void clean_up(std::int64_t rev, lock_handler refused = {},
                std::shared_ptr<early_cancel> refused_cancel = nullptr, const mutex_state* refused_by = nullptr);
  /// Gives the lock to the first waiter; `unlocked`: the unlock that passed it on, if any;
  /// `local`: the key was ours already (a hand-off without a round trip).
  void grant(asio::any_completion_handler<void(error_code)> unlocked = {}, bool local = false);
  /// shared: every waiter holds at once.
  void grant_all(asio::any_completion_handler<void(error_code)> unlocked = {}, bool local = false);
  /// shared: whether a reader arriving now may hold on our key at once. Only while no writer
  /// waits (anywhere, as the view shows, or locally on its way to etcd): a stream of readers
  /// joining a held read key would starve the writer queued behind it.
  bool may_join() const;
  /// shared: readers held back by a writer look again when the view changes (that writer may
  /// have gone) or a writer of this session stops queueing. Registered once, with the view.
  void watch_writers();
  /// shared: a writer of this session queues after our read key (created at `rev`), or its put
  /// is still on the wire.
  bool own_writer_after(std::int64_t rev) const;
  void recheck_readers();
  /// The write side's queue stopped queueing or holding: the session's readers look again.
  void poke_readers();
  bool busy() const { return shared ? holds > 0 : held(); }
  /// exclusive: whether a caller holds the lock through this queue.
  bool held() const { return !holder.expired(); }
  bool held_by(const std::shared_ptr<hold_state>& by) const {
    return held() && !holder.owner_before(by) && !by.owner_before(holder);
  }
  /// The hold `by` ends (release or give-back): true when it was a hold.
  bool end_hold(const std::shared_ptr<hold_state>& by);
  /// A new hold for the next caller, with the queue's revisions, token and header.
  std::shared_ptr<hold_state> new_hold(const mutex_state& by);
  void deliver(waiter w, lock_hold hold, asio::any_completion_handler<void(error_code)> unlocked);
  /// A grant whose caller can no longer unlock it (cancelled, or its mutex destroyed, before the
  /// handler ran) goes back: the lock passes on. On the strand.
  void give_back(const std::shared_ptr<hold_state>& by);
  /// The lock is free locally: the next caller, a linger, or a release of the key. `was_held`:
  /// a hold has just ended (a vanished key is then reported as a lost hold).
  void pass_on(asio::any_completion_handler<void(error_code)> h, const mutex_options& options,
               bool was_held = false);
  /// A local hand-off after a holder that asked for a fence: puts the key again (same value,
  /// lease and create revision, so Go's and etcdctl's queue order is unchanged: their waiters
  /// watch for deletes only), then grants the next caller with the put's revision as its mod
  /// revision and fencing token. A compare built by the holder before now fails. rw_mutex's
  /// write side cannot do this (Go's recipe.RWMutex orders its queue by mod revision): it
  /// releases its key and queues again instead.
  void start_refence(asio::any_completion_handler<void(error_code)> h, mutex_options options);
  asio::awaitable<void> refence(asio::any_completion_handler<void(error_code)> h, mutex_options options);
  /// Our key is gone (expired, revoked, deleted by hand): no local hand-off on it; the callers
  /// still waiting queue again with a new key. `h`, the unlock that found it, gets session_lost.
  void key_vanished(asio::any_completion_handler<void(error_code)> h);
  /// Gives the key up. The state changes now: co_spawn starts the coroutine later, and a lock
  /// in between must not be granted a key on its way out.
  void start_release(asio::any_completion_handler<void(error_code)> h) {
    stop_linger();
    state = key_state::releasing;
    asio::co_spawn(session->impl->strand_, release(std::move(h)), asio::detached);
  }
  asio::awaitable<void> release(asio::any_completion_handler<void(error_code)> h);
  bool foreign_waiting() const { return view && view->core().has_other_keys(key); }
  /// Whether another session's turn has come: one has waited behind our key for
  /// options.fair_hold or fair_handoffs local hand-offs (starts that clock when one is first
  /// seen), or, on rw_mutex's write side, a reader of this session asked first (readers_first).
  bool yield_due(const mutex_options& options);
  /// rw_mutex's write side: a reader of this session asked before the next writer here (or no
  /// writer waits). Local hand-offs between writers would otherwise keep the write key for up to
  /// fair_hold while the process's own readers, who asked first, wait behind it.
  bool readers_first() const;
  void start_linger(std::chrono::milliseconds d);
  void stop_linger();
  void end_linger();
  void cancel_waiter(std::uint64_t id);
  /// The mutex object `m` is gone: its pending locks complete with operation_aborted, each as
  /// a cancelled caller would.
  void abort_waiters_of(const mutex_state& m);
  void fail_all(error_code ec);
  void complete_parting();
  void ensure_view() {
    if (!view) view = lock_view_for(session->impl, prefix);
  }
  // client::stats() gauges, brought in line after each change of the queue or the holder.
  void count_waiting() {
    const auto n = static_cast<std::int64_t>(waiters.size());
    if (n != counted_waiting) bump(counters->waiting, n - std::exchange(counted_waiting, n));
  }
  void count_held() {
    const std::int64_t h = shared ? static_cast<std::int64_t>(holds) : held();
    if (h != counted_held) bump(counters->held, h - std::exchange(counted_held, h));
  }
  /// The holder's hold ended because its key is gone.
  void lost_hold(error_code why, const char* detail) {
    bump(counters->lost);
    auto& impl = *session->impl;
    if (impl.wants_events())
      impl.emit({.kind = event_kind::lock_lost, .name = name, .key = key, .detail = detail, .error = why,
                 .lease = session->lease, .revision = rev});
  }

  std::shared_ptr<session_state> session;
  std::string name, prefix, key;
  key_state state = key_state::none;
  std::int64_t rev = 0;
  std::int64_t mod_rev = 0;  // the key's mod revision as we last wrote or read it
  std::int64_t fence = 0;    // the fencing token of the current (or next local) hold
  /// A holder since the key's last put asked for a fence: the next local grant puts it first.
  bool fence_due = false;
  bool refencing = false;  // that put is on the wire: nobody holds, no grant until it is back
  bool fence_moved = false;  // the put is back: the grant it was for counts a fenced hand-off
  /// The driver's txn found the key there already, not used by another lock or campaign of this
  /// session: the hold before ours (same lease, another session) may have a fence on it.
  bool adopted = false;
  response_header header;
  std::shared_ptr<lock_view> view;
  const bool shared;
  const std::string blockers;
  const std::string readers;
  // exclusive. Not an owner: the hold owns this queue, and a queue owning its holder would keep
  // both (and the client) alive when the hold's release never runs, as when the event loop is
  // stopped and destroyed with the lock held. Whoever owns the hold (its caller, a grant on its
  // way, a release or drop on the strand) keeps it alive while it matters.
  std::weak_ptr<hold_state> holder;
  std::size_t holds = 0;                // shared: holds not yet unlocked
  std::uint64_t sequence = 0;
  std::list<waiter> waiters;  // a list: any_completion_handler must never be move-assigned
  // The last callers that gave up (cancelled) while the driver was after the key: they complete
  // when the driver sees the cancellation, before its clean-up (see give_up).
  std::list<std::pair<lock_handler, error_code>> parting;
  std::uint64_t next_id = 0;
  /// Refused tries waiting for their key's delete, by the mutex they came through (compared, never
  /// followed): abort_waiters_of completes them when that mutex goes. The clean-up owns each handler.
  std::vector<std::pair<const mutex_state*, std::weak_ptr<lock_handler>>> refusing;
  std::optional<clock::time_point> foreign_since;
  std::size_t handoffs_since_foreign = 0;
  asio::cancellation_signal driver_cancel;
  bool driver_cancellable = false;
  std::shared_ptr<lock_counters> counters;
  std::int64_t counted_waiting = 0;
  std::int64_t counted_held = 0;
  clock::time_point held_since{};
  std::unique_ptr<asio::steady_timer> linger_timer;  // made at the first linger: most queues never linger
  bool lingering = false;
  std::optional<std::uint64_t> linger_listener;
  std::optional<std::uint64_t> writers_listener;  // shared: see watch_writers
  /// The key's create revision while it waits for its turn, else 0.
  std::int64_t queued_rev() const { return turn ? turn->rev : 0; }
  // The driver's wait for its turn, kept here rather than in a coroutine frame: a waiting key
  // costs a few words instead of the frames, the spawn and a timer (about 2.7 KB; benchmarks/memory).
  struct turn_wait {
    std::int64_t rev = 0;
    std::int64_t mod_rev = 0;
    response_header header;
    std::shared_ptr<const op_trace> trace;   // with span hooks: the wait the driver is for
    std::uint64_t in_view = 0;               // the view's id for our key
    std::optional<std::uint64_t> listener;   // the session's id for the wait's loss listener
    bool told = false;                       // the first word came: the rest is under way
    bool cancelled = false;                  // the last caller left: never report ownership
    error_code ec;
  };
  std::optional<turn_wait> turn;
  std::optional<std::uint64_t> loss_listener;
};

/// The session's queue for `m`'s key, created on first use. On strand.
std::shared_ptr<mutex_queue> queue_of(const std::shared_ptr<mutex_state>& m);

// The bodies of the initiating functions of mutex and rw_mutex; any thread.
void start_lock(const std::shared_ptr<mutex_state>& m, bool try_only, lock_handler h);
/// The object `m` is gone: its pending locks complete with operation_aborted, and so do grants on
/// their way to its callers. Its holds are their owners'.
void orphan(std::shared_ptr<mutex_state> m);
/// A lock's failure for its waiter: the error and an empty hold.
inline void fail_lock(client_impl& impl, lock_handler h, error_code ec) { impl.complete(std::move(h), ec, lock_hold{}); }

}  // namespace coetcd::detail
