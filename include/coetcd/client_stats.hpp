// client_stats: the counters and gauges that client::stats() returns.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace coetcd {

/// Unary RPCs of one kind, named as etcd's gRPC method (`Range`, `Put`, `Txn`, `LeaseGrant`, ...),
/// so they line up with the server's grpc_server_handled_total{grpc_method=...}.
struct rpc_stats {
  std::uint64_t sent = 0;     ///< calls put on the wire (each attempt of a retried call counts)
  std::uint64_t failed = 0;   ///< calls that completed with an error after their last attempt
  std::uint64_t retried = 0;  ///< attempts sent again after a transient failure
  /// Of `retried`: attempts cut after client_options::resend_after without an answer (a member
  /// holding a write for a leader that is gone) and sent again; see event_kind::request_resent.
  std::uint64_t resent_unanswered = 0;
};

/// The shared bidirectional streams of one kind (`Watch`, `LeaseKeepAlive`).
struct stream_stats {
  std::uint64_t opened = 0;    ///< streams started (the first one and every reopening)
  std::uint64_t reopened = 0;  ///< streams started after the previous one of the kind failed
};

/// Time from lock() to holding, in buckets with upper bounds `bounds` (seconds) plus one for +Inf.
struct wait_histogram {
  /// Upper bounds of the buckets, in seconds.
  static constexpr std::array<double, 10> bounds{0.0001, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30};
  std::array<std::uint64_t, bounds.size() + 1> counts{};  ///< per bucket (not cumulative)
  std::uint64_t count = 0;  ///< waits recorded
  double sum_seconds = 0;   ///< their sum, in seconds
};

/// One lock name used by this client's mutexes, rw_mutexes or semaphores (while an object of the
/// name exists).
struct lock_stats {
  std::string name;  ///< the lock's name
  std::int64_t held = 0;        ///< local holders now (0 or 1 per name in a well-used client)
  std::int64_t waiting = 0;     ///< local callers waiting now
  std::uint64_t acquired = 0;   ///< successful locks
  std::uint64_t handoffs = 0;   ///< acquisitions handed over locally, without a round trip
  /// Of those, the ones after a holder that asked for a fence (mutex::hold::fence() or
  /// fencing_token()): each put the key again first, one write.
  std::uint64_t fenced_handoffs = 0;
  std::uint64_t lost = 0;       ///< holds that ended by losing the key
  /// Keys being deleted in the background for callers that gave up (cancelled, timed out, a
  /// try_lock that found the name taken, a failed acquisition): retried through an outage while
  /// the session lives. The callers completed without waiting for it, except a refused try_lock
  /// that was its session's only caller on the name: it completes once the key is gone.
  std::int64_t cleaning = 0;
  wait_histogram wait;  ///< time from lock() to holding
};

/// A snapshot of client::stats().
struct client_stats {
  std::map<std::string, rpc_stats> rpcs;  ///< by gRPC method, only those used so far
  std::int64_t rpcs_in_flight = 0;  ///< unary RPCs on the wire now
  /// Completions (replies, stream messages) the event loop's thread took from gRPC's queue
  /// itself (completion_mode::poll and adaptive); the others came through the client's thread.
  std::uint64_t replies_polled = 0;
  std::map<std::string, stream_stats> streams;  ///< by stream (`Watch`, `LeaseKeepAlive`)
  std::int64_t watchers = 0;        ///< watchers on the shared Watch stream (a lock view's included)
  std::int64_t leases_kept = 0;     ///< leases kept alive on the shared LeaseKeepAlive stream
  std::uint64_t sessions_lost = 0;  ///< sessions whose lease ended without close()
  std::vector<lock_stats> locks;    ///< by name
};

}  // namespace coetcd
