// The queue of one lock or election name as seen by one client: one watch on the name's prefix
// (created "from now", so etcd keeps it in its synced group) plus one Range to seed it, then kept
// current from events; keys of longer names under the prefix are left out (is_own_key). Local
// waiters are told when their key is the oldest: a hand-off costs the previous owner's Delete and
// one watch notification, with no Range and no unsynced-watch tick. Listeners (election
// observers) are told after every change.
#pragma once

#include "coro.hpp"

#include <chrono>
#include <functional>
#include <map>
#include <set>
#include <string_view>
#include <tuple>
#include <vector>

namespace coetcd::detail {

/// Whether `key` is one of the keys of the name whose prefix is `prefix` (name + "/"): one segment
/// below it (a mutex's or election's `name/<lease hex>`, a semaphore's `name/<lease>_<seq>`), or
/// rw_mutex's `name/read/<segment>` and `name/write/<segment>`. A deeper key belongs to a longer
/// name (`name/x/<lease>` is lock `name/x`'s, `name//<lease>` lock `name/`'s): the recipes of
/// `name` neither wait for it nor yield to it, and the view leaves it out. Go's recipes queue
/// every key under the prefix; every key Go lays out for `name` is one of these, so coetcd and
/// Go still exclude each other (coetcd waits for a subset of the keys Go waits for, and that
/// subset holds every key of the name's own holders).
bool is_own_key(std::string_view prefix, std::string_view key);

/// Who goes before a waiter's key in the queue of a name. The default, every older key, is the
/// mutex's and the election's rule (and an rw_mutex writer's).
struct turn_rule {
  /// Only the older keys under this prefix go first (the read side of an rw_mutex:
  /// "name/write"); the waiter's turn comes when none is left.
  std::string blockers;
  /// A semaphore of this many permits (0: not one). Every key under the name is an acquisition
  /// whose value is "<n>/<permits>" (see permit_count); keys in create-revision order take
  /// permits in turn, and a key's turn comes when its n and every older key's fit in `permits`.
  std::int64_t permits = 0;
};

/// The semaphore rule (turn_rule::permits) walked along a queue: add() each key under the name in
/// create-revision order from the oldest; after adding a waiter's own key, turn() says whether
/// it holds, or why it never will. Shared by the acquiring txn's read and the view.
class permit_tally {
 public:
  explicit permit_tally(const std::string& prefix) : prefix_(prefix) {}
  void add(const key_value& kv);
  /// {} with `holds` set when the keys so far fit in `permits`; error::foreign_key when one of
  /// them is not a semaphore key; error::permits_mismatch when one counts other than `permits`.
  error_code turn(std::int64_t permits, bool& holds) const;
  /// The permits the keys so far take, saturated at the largest int64.
  std::int64_t used() const { return used_; }
  /// The permits the keys added so far agree on (0 before the first).
  std::int64_t permits() const { return agreed_; }

 private:
  const std::string& prefix_;
  std::int64_t used_ = 0;
  std::int64_t agreed_ = 0;  // the permits every key so far counts
  bool foreign_ = false;
  bool mismatch_ = false;
};

class lock_view_core : public std::enable_shared_from_this<lock_view_core> {
 public:
  struct waiter {
    std::string key;
    std::int64_t rev = 0;
    std::function<void(error_code)> done;  // {} = our turn; session_lost = key gone; semaphore errors
    turn_rule rule;
    /// Its holder gives the key up through release(), so an enqueue may park to ride on that.
    /// Not an election's: its resign is a txn of its own, and it may lead for hours.
    bool releases_here = true;
  };

  lock_view_core(std::shared_ptr<client_impl> c, std::string prefix) : client_(std::move(c)), prefix_(std::move(prefix)) {}

  const strand_type& strand() const noexcept { return client_->strand_; }

  // All on the strand.
  void start();
  void stop();
  std::uint64_t add(waiter w);
  void remove(std::uint64_t id);
  /// `fn({})` after every change of the view (at once if it is ready), `fn(ec)` when it ends.
  std::uint64_t listen(std::function<void(error_code)> fn);
  void unlisten(std::uint64_t id) { listeners_.erase(id); }
  /// The key with the oldest create revision, if any.
  const key_value* oldest() const;
  /// Whether the view has caught up with revision `rev` and has no `key` created at `rev`: the
  /// key made then is gone (expired, revoked, deleted by hand).
  bool shows_gone(const std::string& key, std::int64_t rev) const {
    if (!ready_ || view_rev_ < rev) return false;
    auto it = keys_.find(key);
    return it == keys_.end() || it->second.create_revision != rev;
  }
  /// Whether the view is current and shows a key under the prefix other than `key`.
  bool has_other_keys(const std::string& key) const {
    return ready_ && order_.size() > keys_.count(key);
  }
  /// Every change up to this revision is applied (0 before the seeding Range).
  std::int64_t revision() const { return view_rev_; }
  /// Whether the view is current and shows a key under `sub` created after revision `rev`.
  bool has_keys_under_after(const std::string& sub, std::int64_t rev) const {
    if (!ready_) return false;
    for (auto it = keys_.lower_bound(sub); it != keys_.end() && it->first.starts_with(sub); ++it)
      if (it->second.create_revision > rev) return true;
    return false;
  }
  /// Whether a key under `sub` may exist: true while the view is not current.
  bool may_have_keys_under(const std::string& sub) const;

  /// The txn's outcome, and whether it went more than once (a late copy may still arrive).
  using txn_outcome = std::tuple<error_code, txn_result, bool>;
  /// Sends a txn that queues a local waiter. While another local waiter or holder of this name
  /// is about to release, it waits up to `park_limit` to ride on that release's txn: etcd
  /// fsyncs a proposal that arrives alone by itself, so a re-queue sent on its own next to the
  /// hand-off's delete makes every hand-off cost two commits instead of one.
  /// `shared`: the txn puts a read key of an rw_mutex (see write_queue); it does not park, as
  /// readers leave and come back in groups and one rider per release would queue them up.
  asio::awaitable<txn_outcome> enqueue(txn t, bool shared = false);
  /// Deletes a local holder's `key`, in one txn with a parked enqueue if there is one.
  /// Completes with whether the key was there to delete; `resent` as for batched_txn.
  asio::awaitable<std::tuple<error_code, bool>> release(const std::string& key, std::int64_t rev, std::shared_ptr<bool> resent);
  /// A local holder is done with `key` without releasing it through release() (an election of
  /// its session keeps the key, or the hold was refused after its turn came): no release of it
  /// is coming for a parked enqueue to ride on.
  void hold_ended(const std::string& key) { holding_.erase(key); }
  static constexpr std::chrono::milliseconds park_limit{3};

 private:
  asio::awaitable<void> run();
  void apply(const watch_batch& b);
  // Tells the waiters whose turn came or whose key vanished, then the listeners. After a
  // reseed every waiter is checked; otherwise only those the last batch can concern, so a
  // hand-off costs O(log waiters), not O(waiters).
  void changed(bool check_all = false);
  void forget(std::map<std::uint64_t, waiter>::iterator it);
  // The semaphore waiters whose turn came or whose queue is malformed, into `out`.
  void weigh(std::vector<std::pair<std::uint64_t, error_code>>& out) const;
  void fail_all(error_code ec);

  struct parked_txn {
    txn t;
    asio::steady_timer wake;
    bool taken = false;  // nested in a release now in flight
    bool done = false;
    bool resent = false;
    error_code ec;
    txn_result result;
  };

  std::shared_ptr<client_impl> client_;  // not the user's object: the view may outlive it
  std::string prefix_;
  watcher watcher_;
  bool ready_ = false;
  bool stopped_ = false;
  std::map<std::string, key_value> keys_;
  std::set<std::pair<std::int64_t, std::string>> order_;   // by create revision
  std::int64_t base_rev_ = 0;  // revision of the seeding Range
  std::int64_t view_rev_ = 0;  // every change up to here is applied
  std::map<std::uint64_t, waiter> waiters_;
  std::multimap<std::int64_t, std::uint64_t> by_rev_;          // waiters by their key's create revision
  std::set<std::pair<std::int64_t, std::uint64_t>> shared_;    // the waiters with blockers, by revision
  std::multiset<std::int64_t> weighted_;                         // the permits of each semaphore waiter
  std::set<std::pair<std::int64_t, std::uint64_t>> unconfirmed_;  // rev beyond the view when added
  std::vector<std::int64_t> gone_revs_;                         // create revisions deleted by the last batch
  std::map<std::uint64_t, std::function<void(error_code)>> listeners_;
  // Keys of local waiters told they own the name (releases_here), not yet released: an exclusive
  // enqueue parks while there is one. Cleared by release(), hold_ended() and the key's delete.
  std::set<std::string> holding_;
  std::vector<std::shared_ptr<parked_txn>> parked_;
  std::uint64_t next_id_ = 0;
};

/// What mutex objects hold; the last one gone stops the view.
class lock_view {
 public:
  explicit lock_view(std::shared_ptr<lock_view_core> core) : core_(std::move(core)) {}
  ~lock_view();
  lock_view_core& core() { return *core_; }

 private:
  std::shared_ptr<lock_view_core> core_;
};

/// The client's view of `prefix`, created on first use. On strand.
std::shared_ptr<lock_view> lock_view_for(const std::shared_ptr<client_impl>& c, const std::string& prefix);
/// The client's view of `prefix` if one is running, else null. On strand.
std::shared_ptr<lock_view> existing_lock_view(const std::shared_ptr<client_impl>& c, const std::string& prefix);

}  // namespace coetcd::detail
