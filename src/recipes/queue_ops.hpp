// The steps shared by mutex and election: both keep one key per session under `name + "/"`,
// and whoever holds the oldest create revision owns the name.
#pragma once

#include "core/lock_view.hpp"
#include "core/session_state.hpp"
#include "core/txn_batcher.hpp"

namespace coetcd::detail {

struct acquire_result {
  error_code ec;
  std::int64_t rev = 0;  // our key's create revision (0: unknown)
  std::int64_t mod_rev = 0;  // our key's mod revision as the txn left it (0: unknown)
  bool owner = false;    // our key is the oldest under the prefix
  bool abandoned = false;  // cancelled with the txn still on the wire: the `abandon` step cleans up
  /// The read could not tell; `owner` is false and the view (or, for a try, a second read:
  /// decide_by_read, the semaphore's own) decides. A semaphore's: the limit cut the group of
  /// keys sharing our create revision (etcd returns those in any order), or keys of a longer
  /// name (is_own_key) filled the read before ours. Any other: the oldest key read is a longer
  /// name's.
  bool undecided = false;
  /// The txn went more than once (resent after a failure that may have been applied): a copy
  /// may still arrive after the key's release and put it again; acquire() then sweeps for it.
  bool resent = false;
  txn_result txn;
};

/// One txn, as Go's Mutex.Lock / Election.Campaign: create our key under the session's lease
/// unless it exists, and read the oldest key under the prefix. With a running `view` of the
/// prefix the read is left out (etcd 3.4 answers a sorted prefix Range in O(keys)): `owner`
/// stays false and wait_turn decides from the view; the txn goes through view->enqueue.
/// `rule` says who goes before us (see turn_rule): with blockers (the read side of an rw_mutex
/// waits only for older writers) the txn reads the oldest key under them and `owner` means that
/// key is younger than ours or absent; a semaphore's txn reads the `permits` oldest keys and
/// `owner` means ours is among those that fit (a malformed queue fails the acquisition).
/// Everything passed by reference must outlive the returned awaitable, which starts when awaited:
/// pass named objects, never temporaries (g++ 12 ends the life of a temporary in a co_await
/// expression at the suspension, while the awaitable still reads it).
asio::awaitable<acquire_result> acquire(session_state& s, const std::string& prefix, const std::string& key,
                                        const std::string& value, lock_view* view, const turn_rule& rule);

/// For a try whose txn could not tell (acquire_result::undecided, not a semaphore's): reads the
/// keys under `read` (the prefix, or a reader's blockers) made up to ours, and decides by the
/// name's own keys alone (is_own_key): ours is the oldest, or (`shared`) no blocker is older.
/// Sets a.owner, and a.txn.header to the read's, as of which the turn is ours. By reference:
/// as acquire().
asio::awaitable<error_code> decide_by_read(session_state& s, const std::string& prefix, const std::string& read,
                                           const std::string& key, bool shared, acquire_result& a);

/// acquire() for a cancellable operation. Cancelling an RPC on the wire leaves its outcome unknown,
/// and a clean-up delete sent next may be applied before it (etcd serves each call on its own
/// goroutine), leaving our key behind under a live lease and blocking the name. So the txn is
/// never cancelled: a cancelled caller gets operation_aborted (with `abandoned`) at once, and
/// when the txn completes, release_key() gives up the caller's use of the key (counted in
/// `key_users` before the call), deleting it by its known revision. `cancellable`: the caller's
/// handler has a cancellation slot (see can_be_cancelled); without one it awaits the txn itself.
/// Waits first while a delete of `key` is on the wire (see session_state::wait_deleted).
asio::awaitable<acquire_result> acquire_or_abandon(const std::shared_ptr<session_state>& s,
                                                   const std::string& prefix, const std::string& key,
                                                   const std::string& value, const std::shared_ptr<lock_view>& view,
                                                   bool cancellable, const turn_rule& rule);

/// This lock or campaign no longer uses `key`: deletes it unless another one of the session
/// still does. `rev` guards the delete when known, so a newer key is never removed. `rev` 0
/// means the txn that may have made the key has an unknown outcome: a put of it that lands
/// after the delete is swept up later (at 1, 4 and 14 s; see sweep_late_put). The delete runs
/// as its own coroutine: cancelling the caller never cuts it short (see delete_key).
asio::awaitable<void> release_key(session_state& s, const std::string& key, std::int64_t rev);
/// release_key() for a caller that does not wait for it (a cancelled or failed acquisition: a
/// timed wait returns at its deadline even when the delete must wait out an outage). The key
/// stops counting as the caller's now, and a later lock or campaign of the session waits for
/// its delete (session_state::wait_deleted). `done(deleted)` runs at the end: `deleted` false
/// when another lock or campaign of the session still uses the key (nothing was sent). On strand.
void release_key_later(session_state& s, const std::string& key, std::int64_t rev,
                       std::function<void(bool)> done = {});

/// Waits until our key (created at `rev`) has its turn under `rule`: it is the oldest under the
/// prefix, or no key under the blockers is older, or it fits in the semaphore's permits.
/// Errors: session_lost (session ended, or our key vanished), operation_aborted (cancelled;
/// never reports ownership), the semaphore's permits_mismatch and foreign_key.
/// `releases_here`: the key, once its turn comes, is given up through the view's release()
/// (see lock_view_core::waiter); an election's is not.
asio::awaitable<error_code> wait_turn(session_state& s, std::shared_ptr<lock_view>& view, const std::string& prefix,
                                      const std::string& key, std::int64_t rev, turn_rule rule,
                                      bool releases_here = true);

/// A failure that an outage explains (unreachable, timed out, no leader), which may pass.
bool may_pass(const error_code& ec);
/// How long to wait before retry `attempt` (0, 1, ...) of a clean-up: 250 ms doubling to 4 s,
/// each drawn from 0.5x to 1.5x of that. Without the spread, clean-ups that failed together
/// retried together, and round robin gave each the same member again: through one slow member
/// a clean-up failed on every retry while its twin succeeded on every one.
std::chrono::milliseconds retry_pause(int attempt);

/// Deletes our key, guarded by its create revision when known. Runs to its end even when the
/// calling operation is cancelled before or during it (a coroutine of its own, with no
/// cancellation slot, that the caller awaits); retried through an outage while the session
/// lives. Returns the revision of the delete's txn, or 0 when it never got through.
asio::awaitable<std::int64_t> delete_key(session_state& s, const std::string& key, std::int64_t rev);

std::string lease_hex(std::int64_t id);

/// An election of the session wrote `key`, which a mutex of the session on the same name shares
/// (Go's layout gives both one key): the mutex's fence follows the key's new mod revision, so its
/// holder's fence() passes again. Defined with the mutex. On strand.
void key_rewritten(session_state& s, const std::string& prefix, const std::string& key, std::int64_t mod_rev);

}  // namespace coetcd::detail
