// ONE LeaseKeepAlive stream per client renewing every kept-alive lease, each on its own schedule
// (a third of its TTL after each reply) and with a local deadline (send time of the last answered
// renewal + TTL), so a lease is reported lost even while the stream is down.
#pragma once

#include <coetcd/loss_reason.hpp>

#include "bidi_stream.hpp"

#include <atomic>
#include <map>

namespace coetcd::detail {

class keepalive_manager;
struct kept_lease;
using steady_time = std::chrono::steady_clock::time_point;

/// client::keep_alive for code that holds the client's state rather than the user's object.
lease_keepalive keep_alive_on(const std::shared_ptr<client_impl>& impl, std::int64_t id, std::chrono::seconds ttl_hint);
/// Starts keeping lease `id` alive. `since`: a time at or before etcd last started the lease's
/// `ttl_hint` (a session passes the moment it sent its grant): the local deadline counts from it,
/// so the lease never counts as alive here after etcd may have expired it.
std::shared_ptr<kept_lease> start_keepalive(const std::shared_ptr<client_impl>& impl, std::int64_t id,
                                            std::chrono::seconds ttl_hint, steady_time since);

struct kept_lease {
  std::shared_ptr<client_impl> client;          // set at creation: public calls dispatch to its strand
  std::shared_ptr<keepalive_manager> manager;   // set on the strand when renewal starts
  std::int64_t id = 0;
  steady_time since{};  // see start_keepalive
  steady_time deadline{};
  /// `deadline`, readable from any thread (session::lost() compares the clock with it).
  std::atomic<steady_time::rep> published_deadline{steady_time::max().time_since_epoch().count()};
  void set_deadline(steady_time d) {
    deadline = d;
    published_deadline.store(d.time_since_epoch().count(), std::memory_order_relaxed);
  }
  steady_time next_send{};
  steady_time sent_at{};
  steady_time::duration ttl{};  // the last granted TTL: decides when a renewal is late
  bool in_flight = false;
  bool late_told = false;  // keepalive_late reported since the last renewal
  bool done = false;
  error_code lost;
  struct waiter {
    asio::any_completion_handler<void(error_code, loss_reason)> handler;
    asio::any_io_executor work;
  };
  std::map<std::uint64_t, waiter> waiters;  // node-based: erasing one never moves the others
  std::uint64_t next_waiter = 0;
};

class keepalive_manager final : public std::enable_shared_from_this<keepalive_manager> {
 public:
  explicit keepalive_manager(std::shared_ptr<client_impl> c);

  // All on the strand.
  void add(const std::shared_ptr<kept_lease>& l, std::chrono::seconds ttl_hint);
  void wait(const std::shared_ptr<kept_lease>& l, handler<loss_reason> h,
            std::shared_ptr<early_cancel> cancel);
  void stop(const std::shared_ptr<kept_lease>& l);
  void close();
  /// Loses every lease past its local deadline now, as the timer would a moment later (a busy
  /// loop runs it late): their waits complete with error::lease_expired, renewals stop.
  void expire_due() { tick(); }

  client_impl& client() noexcept { return *client_; }

 private:
  using stream_type = bidi_stream<pb::LeaseKeepAliveRequest, pb::LeaseKeepAliveResponse>;

  void tick();
  void arm_timer();
  void send(kept_lease& l, steady_time now);
  void lose(const std::shared_ptr<kept_lease>& l, error_code why);
  void open();
  void on_message(const pb::LeaseKeepAliveResponse& r);
  void on_closed(error_code ec);
  void on_ready();
  void count_leases() { client_->telemetry_.leases.store(static_cast<std::int64_t>(leases_.size()), std::memory_order_relaxed); }
  /// Under 40 % of its TTL left without an answer: a renewal was due at two thirds.
  static steady_time late_point(const kept_lease& l) { return l.deadline - l.ttl * 2 / 5; }
  /// When the stream counts as stuck for this in-flight renewal (see tick()): nothing answered
  /// for a sixth of its TTL (1 s at least) since it was sent, which leaves most of the TTL for a
  /// new stream. Any answer counts, so a slow stream working through a queue is not stuck.
  steady_time stall_point(const kept_lease& l) const {
    return std::max(l.sent_at, last_answer_) + std::max<steady_time::duration>(l.ttl / 6, std::chrono::seconds(1));
  }

  std::shared_ptr<client_impl> client_;
  std::multimap<std::int64_t, std::shared_ptr<kept_lease>> leases_;
  std::shared_ptr<stream_type> stream_;
  asio::steady_timer timer_;
  asio::steady_timer reopen_timer_;
  reopen_backoff backoff_;
  bool opening_ = false;
  bool reopen_scheduled_ = false;
  bool closed_ = false;
  bool resetting_ = false;  // a stuck stream was cancelled; its end has not been reported yet
  steady_time last_answer_{};  // of any renewal on any stream
  std::optional<error_code> ended_by_;  // why the last stream ended, until the next one is up
};

}  // namespace coetcd::detail
