// What a session holds on the client's strand: its lease, keepalive, waiters and the locks using it.
#pragma once

#include "coro.hpp"
#include "published.hpp"

#include <coetcd/loss_reason.hpp>
#include <coetcd/session.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <set>
#include <utility>

namespace coetcd::detail {

struct kept_lease;

struct mutex_queue;

/// Where a session's semaphore key numbers start (see session_state::last_permit_key).
std::uint64_t random_permit_start();

struct session_state : std::enable_shared_from_this<session_state> {
  std::shared_ptr<client_impl> impl;
  std::int64_t lease = 0;
  std::chrono::seconds ttl{0};
  lease_keepalive keep;
  std::shared_ptr<kept_lease> kept;  // keep's state: its local deadline
  std::atomic<bool> lost{false};  // the lease is gone (or closed/orphaned); read by lost() anywhere
  bool ended = false;  // closed or orphaned by the user
  error_code why;
  std::map<std::uint64_t, handler<loss_reason>> waiters;  // session::async_wait_lost
  std::map<std::uint64_t, std::function<void()>> listeners;  // told once when the session ends
  asio::cancellation_signal loss_signal;                      // session::loss_slot()
  std::uint64_t next_id = 0;
  /// Locks of this session per key (holders and waiters): the key is ours to delete at zero.
  std::map<std::string, int> key_users;
  /// Election keys of this session with a campaign pending or leading: one candidate per name.
  std::set<std::string> candidates;
  /// The last sequence number given to a semaphore key of this session. Keys must be unique per
  /// lease, and a lease can be adopted (a restarted process, another client): counting from 1 in
  /// each session made the adopting session's first acquisition adopt the other holder's key, so
  /// two holders shared one key and its permits (and one release deleted both). Each session
  /// starts at a random point of a 60-bit range instead.
  std::uint64_t last_permit_key = random_permit_start();
  /// The local queue of each lock key in use, by {prefix, key} (see recipes/mutex_queue.hpp; only
  /// its name is known here); expired entries are replaced.
  std::map<std::pair<std::string, std::string>, std::weak_ptr<mutex_queue>> mutex_queues;
  /// Keys whose delete is on the wire, one entry per delete; each timer is cancelled when its
  /// delete completes. A multimap: two clean-ups of one key may overlap (a driver that failed,
  /// then the next one cancelled before its txn), and a key read by the one still running must
  /// not be put again by a new lock because the other one finished first.
  std::multimap<std::string, std::shared_ptr<asio::steady_timer>> deleting;

  /// Waits while `key` is being deleted: a put-if-absent applied before that delete would adopt
  /// the old key, which the delete then removes under its new user. Returns early if cancelled.
  asio::awaitable<void> wait_deleted(const std::string& key);

  /// The lease's local deadline has passed (no renewal sent since TTL ago has been answered):
  /// etcd may have expired it, even if the keepalive's timer has not fired yet (a busy loop runs
  /// it late). Any thread.
  bool past_deadline(std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now()) const noexcept;
  /// What session::lost() says: lost, or past the deadline. Any thread.
  bool counts_as_lost() const noexcept { return lost || past_deadline(); }
  /// On the strand, before a lock, a hand-off or a leadership is granted: a lease past its
  /// deadline is lost now (as the keepalive's timer would tell a moment later), so that nothing
  /// is granted under a lease etcd may have given away. Returns whether the session is lost.
  bool lost_by_now(std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now());

  /// Why the session ended, once lost: its owner ended it (closed, orphaned, destroyed), or `why`.
  loss_reason loss() const noexcept {
    if (ended) return {loss_reason::kind::session_ended, make_error_code(asio::error::operation_aborted)};
    return {loss_kind_of(why), why};
  }

  // All on the strand.
  void finish(error_code reason);
  std::uint64_t listen(std::function<void()> fn);
  void unlisten(std::uint64_t id) { listeners.erase(id); }
};

/// Marks a key of the session as being deleted for its lifetime (see wait_deleted).
class delete_in_flight {
 public:
  delete_in_flight(session_state& s, std::string key);
  ~delete_in_flight();
  delete_in_flight(const delete_in_flight&) = delete;
  delete_in_flight& operator=(const delete_in_flight&) = delete;

 private:
  session_state& s_;
  std::string key_;
  std::shared_ptr<asio::steady_timer> done_;
};

/// session::async_create's body, for work that holds the client's state rather than the user's
/// client object (which may be moved or destroyed meanwhile: then error::client_closed).
void start_session_create(const std::shared_ptr<client_impl>& c, session_options o,
                          asio::any_completion_handler<void(error_code, session)> h);

/// session::async_wait_lost's body.
void wait_session_lost(const std::shared_ptr<session_state>& s, handler<loss_reason> h);

}  // namespace coetcd::detail
