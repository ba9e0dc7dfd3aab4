// Internal state of a client. Everything here is touched only on the client's strand, except
// the completion-queue thread's loop (cq_loop), which only posts completions to the strand.
#pragma once

#include <coetcd/client.hpp>

#include "telemetry.hpp"

#include "etcd/etcdserver/etcdserverpb/rpc.grpc.pb.h"

#include <grpcpp/alarm.h>
#include <grpcpp/grpcpp.h>

#include <boost/asio/append.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/system_executor.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_set>
#include <vector>

#if defined(__SANITIZE_THREAD__)
#define COETCD_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define COETCD_TSAN 1
#endif
#endif
#ifdef COETCD_TSAN
#include <sanitizer/tsan_interface.h>
#endif

namespace coetcd::detail {

namespace pb = etcdserverpb;

/// A tag handed to gRPC on the strand comes back from CompletionQueue::Next on the CQ thread.
/// gRPC orders the two, but inside libraries ThreadSanitizer cannot see (Debian's gRPC is not
/// instrumented), so under TSan the edge is stated here: released when armed, acquired when
/// returned.
inline void tag_handed_to_grpc([[maybe_unused]] void* tag) {
#ifdef COETCD_TSAN
  __tsan_release(tag);
#endif
}
inline void tag_returned_by_grpc([[maybe_unused]] void* tag) {
#ifdef COETCD_TSAN
  __tsan_acquire(tag);
#endif
}
using strand_type = asio::strand<asio::any_io_executor>;
using sys_time = std::chrono::system_clock::time_point;

/// The tag of every gRPC operation: a reusable slot for the continuation that runs on the
/// client's strand when the operation completes. Arm it right before starting each operation;
/// the continuation keeps its owner alive. The CQ thread takes the continuation and posts it.
class strand_tag {
 public:
  explicit strand_tag(const strand_type&) {}
  void* arm(std::function<void(bool)> fn) {
    fn_ = std::move(fn);
    tag_handed_to_grpc(this);
    return this;
  }
  std::function<void(bool)> take() { return std::move(fn_); }

 private:
  std::function<void(bool)> fn_;
};

/// The cancellation slot of an operation that registers itself on the strand. The slot is taken
/// at once, in the initiating function: a cancellation emitted before the registration has run
/// on the strand (the `||` of awaitable operators does this when another branch finishes first)
/// would otherwise find no handler, be lost, and leave the operation waiting for ever.
class early_cancel {
 public:
  /// Takes `slot` now; cancellations reach the strand. Call from the initiating function.
  static std::shared_ptr<early_cancel> take(asio::cancellation_slot slot, const strand_type& s) {
    auto ec = std::make_shared<early_cancel>();
    if (slot.is_connected()) {
      slot.assign([ec, s](asio::cancellation_type) {
        ec->emitted_ = true;
        asio::dispatch(s, [ec] {
          if (ec->cancel_) std::exchange(ec->cancel_, {})();
          else ec->requested_ = true;
        });
      });
    }
    return ec;
  }
  /// On the strand, once registered: true if cancelled already (complete with operation_aborted
  /// instead of registering); otherwise `cancel` runs on the strand if cancellation comes.
  bool registered(std::function<void()> cancel) {
    if (requested_) return true;
    cancel_ = std::move(cancel);
    return false;
  }
  /// Whether cancellation was emitted, read where it is emitted (the handler's executor), before
  /// it has reached the strand.
  bool emitted() const noexcept { return emitted_; }

 private:
  std::atomic<bool> emitted_{false};
  bool requested_ = false;
  std::function<void()> cancel_;
};

/// An in-flight unary RPC, so close() can cancel it.
class call_base {
 public:
  virtual void cancel_rpc() = 0;

 protected:
  ~call_base() = default;
};

class watch_stream;
class keepalive_manager;
class lock_view;
class txn_batcher;
struct session_state;

/// An error of server_category() for a status the server explained in `text` (see error.hpp).
error_code server_error(int status, const std::string& text);

/// Parsed form of client_options::endpoints.
struct endpoint {
  bool tls = false;
  std::string host;  // without brackets for IPv6
  std::uint16_t port = 0;
};
/// Throws system_error(error::invalid_endpoint, "...'the endpoint'").
std::vector<endpoint> parse_endpoints(const std::vector<std::string>& in);
/// A gRPC target that lets the channel balance across (and fail over between) all endpoints.
std::string grpc_target(const std::vector<endpoint>& eps);
/// The member a call went to, as "host:port" (gRPC says "ipv4:127.0.0.1:2379"); empty if unknown.
std::string peer_address(grpc::ClientContext& ctx);
/// Whether an attempt that ended at its deadline could have reached a server, from what its own
/// channel (not the client's current one, which a sync may have replaced since) and context
/// show: the channel had a connection when the attempt was sent or has one now, or `peer`
/// (ClientContext::peer()) names the connection it went out on. Until a call is on a connection
/// gRPC reports the channel's `target` as its peer; `target` empty: not known. Only an attempt
/// for which this is false fails with error::endpoints_unreachable, which the recipes read as
/// "surely not applied".
bool may_have_reached_a_server(bool ready_when_sent, bool ready_now, std::string_view peer, std::string_view target);

class client_impl : public std::enable_shared_from_this<client_impl> {
 public:
  client_impl(asio::any_io_executor ex, client_options options);
  ~client_impl();
  client_impl(const client_impl&) = delete;
  client_impl& operator=(const client_impl&) = delete;

  /// Ends every call and stream (they complete with client_closed) and stops the CQ thread. Any
  /// thread; the work is done on the strand, at once when called there.
  void close();
  /// On strand (or from the destructor).
  bool closed() const noexcept { return closed_; }
  /// The execution context is shutting down: no thread runs it, so the strand's state is ours.
  void close_at_shutdown() { close_now(); }
  void register_with_context();

  /// A context for one RPC: deadline (unary), wait-for-ready, auth token, and "hasleader" when
  /// the call needs a member with a raft leader.
  std::unique_ptr<grpc::ClientContext> make_context(std::optional<sys_time> deadline, bool needs_leader = true) const;
  /// `reached`: whether the call could have reached a server (see may_have_reached_a_server);
  /// only a deadline's meaning depends on it.
  error_code map_status(const grpc::Status& s, bool reached = true) const;
  /// client_options::key_prefix.
  const std::string& key_prefix() const noexcept { return options_.key_prefix; }
  sys_time request_deadline() const { return std::chrono::system_clock::now() + options_.request_timeout; }

  /// Runs `then` once a token is available (at once when auth is off, here or on the server).
  /// On strand.
  void with_token(std::function<void(error_code)> then);
  /// The server rejected `bad`: forget it so the next with_token authenticates again.
  void invalidate_token(const std::string& bad);
  /// A call or stream sent without a token (the server had auth off) was refused for want of a
  /// user: auth is on again, so with_token authenticates from now on.
  void note_auth_on() noexcept { server_auth_off_ = false; }
  const std::string& token() const noexcept { return token_; }
  bool uses_auth() const noexcept { return !options_.user.empty(); }

  void track(call_base* c) { calls_.insert(c); }
  void untrack(call_base* c) { calls_.erase(c); }

  /// Unary calls on the wire at once. Each holds a gRPC call arena of ≈ 15 KB while in flight;
  /// unbounded, a burst (a thousand sessions starting together) sets the process's peak RSS
  /// for good. etcd serialises the writes anyway, so 128 loses no throughput.
  static constexpr std::size_t max_unary_in_flight = 128;
  /// Runs `send` now if a slot is free (taking it), else when one frees up (or at close).
  bool take_unary_slot() {
    if (unary_in_flight_ >= max_unary_in_flight) return false;
    ++unary_in_flight_;
    return true;
  }
  void queue_unary(std::function<void()> send) { unary_queue_.push_back(std::move(send)); }
  /// A unary call went on the wire: under completion_mode::poll (and adaptive, where it pays)
  /// the strand polls the queue until the replies are in. On strand.
  void poll_while_in_flight() {
    // A moving average, so that a moment with few calls out among many (replies taken in a
    // batch, the next calls not yet sent) does not start a poll that the next sends end:
    // each start and end is a hand-over between the threads.
    in_flight_average_ += (static_cast<double>(unary_in_flight_) - in_flight_average_) / 8;
    if (!reaping_ && !closed_ && polling_pays()) start_reaping();
  }
  /// A unary call sent at `sent_at` has its reply (or an error from the way). On strand.
  void note_reply(std::chrono::steady_clock::time_point sent_at) {
    last_reply_ = std::chrono::steady_clock::now();
    // A moving average over about the last eight replies, starting from the first one.
    const auto rtt = last_reply_ - sent_at;
    round_trip_ = round_trips_seen_++ == 0 ? rtt : round_trip_ + (rtt - round_trip_) / 8;
  }
  void release_unary_slot() {
    --unary_in_flight_;
    while (unary_in_flight_ < max_unary_in_flight && !unary_queue_.empty()) {
      auto next = std::move(unary_queue_.front());
      unary_queue_.pop_front();
      next();
    }
  }

  /// `h` with its result, bound to its own executor: what a completion posts. Its cancellation
  /// slot is cleared, since the operation has ended.
  template <class... Args>
  auto bound(asio::any_completion_handler<void(error_code, Args...)> h, error_code ec, Args... args) {
    asio::get_associated_cancellation_slot(h).clear();
    auto ex = asio::get_associated_executor(h, completion_ex_);
    return asio::bind_executor(std::move(ex), asio::append(std::move(h), ec, std::move(args)...));
  }
  /// Completes a user handler: never inline, on its associated executor.
  template <class... Args>
  void complete(asio::any_completion_handler<void(error_code, Args...)> h, error_code ec, Args... args) {
    asio::post(io_ex_, bound(std::move(h), ec, std::move(args)...));
  }

  watch_stream& watches();
  keepalive_manager& keepalives();
  txn_batcher& batcher();

  /// Posts `e` to the user's event hook, if there is one. On strand.
  void emit(event e) { telemetry_.emit(strand_, std::move(e)); }
  bool wants_events() const noexcept { return telemetry_.wants_events(); }
  /// How a call or stream on `ctx` ended (`ec` empty: answered), for the endpoint events. Reads
  /// the peer's address only when the connection's story changes. On strand.
  void note_outcome(grpc::ClientContext* ctx, error_code ec);

  asio::any_io_executor io_ex_;
  /// io_ex_ as the candidate executor when asking a type-erased handler for its own: given an
  /// any_io_executor, Asio converts it to an any_completion_executor, on the heap, at each ask.
  asio::any_completion_executor completion_ex_;
  strand_type strand_;
  client_options options_;
  telemetry telemetry_;
  std::uint64_t last_span_id_ = 0;  // on strand
  std::shared_ptr<grpc::Channel> channel_;
  std::string channel_target_;  // channel_'s gRPC target
  std::unique_ptr<pb::KV::Stub> kv_;
  std::unique_ptr<pb::Lease::Stub> lease_;
  std::unique_ptr<pb::Watch::Stub> watch_;
  std::unique_ptr<pb::Auth::Stub> auth_;
  std::unique_ptr<pb::Cluster::Stub> cluster_;
  std::unique_ptr<pb::Maintenance::Stub> maintenance_;
  grpc::CompletionQueue cq_;
  /// The user's object that owns this state now (moves update it), for session::get_client().
  /// Touched only by the user's calls, never by background work.
  client* user_ = nullptr;
  /// One view of each contended lock name, shared by this client's mutexes (see lock_view.hpp).
  std::map<std::string, std::weak_ptr<lock_view>> lock_views_;

  /// State a recipe keeps per client (stm's commit groups take slot 0), made by `make` on first
  /// use. Any thread; after the first call, an atomic load.
  std::shared_ptr<void> recipe_state(std::size_t slot, const std::function<std::shared_ptr<void>()>& make) {
    std::call_once(recipe_once_.at(slot), [&] { recipe_state_[slot] = make(); });
    return recipe_state_[slot];
  }

  /// A connection to the one member at `endpoint` (client_options::endpoints' form), with the
  /// client's credentials, for the calls a member answers about itself; kept until close. Throws
  /// system_error(error::invalid_endpoint). Any thread (initiating functions call it, so their
  /// calls take the cancellation slot there and then).
  std::shared_ptr<grpc::Channel> member_channel(const std::string& endpoint);

  /// Reads the member list and, when the voting members' client URLs differ from the endpoints
  /// in use, moves new calls and streams to them; `done` gets the member list's error, if any.
  /// On strand.
  /// Any thread (the member list is started like any call).
  void sync_endpoints(std::function<void(error_code)> done, asio::cancellation_slot slot = {});
  /// The endpoints in use now. Any thread.
  std::vector<std::string> current_endpoints() const {
    std::lock_guard g(endpoints_mutex_);
    return endpoints_;
  }

  /// A session made by this client: it ends in close(), there and then. On strand.
  void adopt(const std::shared_ptr<session_state>& s);
  /// Whether a live session of this client keeps `lease`. On strand.
  bool keeps_lease(std::int64_t lease) const;

 private:
  void cq_loop();
  /// Connects to `eps` (named `names`) from now on. On strand.
  void use_endpoints(const std::vector<endpoint>& eps, std::vector<std::string> names);
  /// Arms the next auto-sync step (client_options::auto_sync_interval). On strand.
  void arm_auto_sync();
  void start_reaping();
  /// Whether the strand should poll the queue now (completion_mode).
  bool polling_pays() const noexcept;
  // completion_mode::adaptive's bounds, measured on 2 cores with etcd beside the client (docs/
  // completions.md): polling won 1.2-1.5x on one request in flight and on lock chains, about
  // 1.1x for puts at 10 and 100 in flight, and nothing at 10 or 100 txns in flight, where it
  // doubled the CPU. A wake-up here costs 50-200 us; behind a millisecond it is a tenth or less.
  static constexpr double adaptive_max_in_flight = 4;
  static constexpr std::chrono::microseconds adaptive_max_round_trip{1000};
  // With requests out and no reply for this long (a member gone, a slow call), adaptive stops
  // polling instead of spinning a core until the reply or the deadline.
  static constexpr std::chrono::microseconds adaptive_stall{2000};
  void reap();
  void resume_cq_thread();
  void close_now();
  void authenticate();

  std::thread cq_thread_;
  // completion_mode::poll: the queue has one poller at a time. gRPC lets one thread poll the
  // socket and wakes the other to hand it each completion, so the client thread steps aside
  // (parks) while the strand polls: the alarm's tag asks it to, cq_resumes_ sends it back.
  grpc::Alarm yield_alarm_;
  char yield_tag_ = 0;
  std::atomic<bool> cq_parked_{false};  // the client thread has left the queue to the strand
  // Times the strand has sent it back. A count, not a flag: each park waits for a resume of its
  // own. With a flag, an episode's end and close() could both set it before the thread had
  // taken the first, and the next park (the following episode's) then waited for ever while
  // close() joined the thread (test_kv's polled case hung 2 runs in 12 under ASan).
  std::atomic<std::uint64_t> cq_resumes_{0};
  bool reaping_ = false;  // strand: a poll episode is on
  std::chrono::steady_clock::time_point last_reply_;
  std::chrono::steady_clock::duration round_trip_{};  // strand: note_reply's average
  std::uint64_t round_trips_seen_ = 0;                // strand: adaptive polls once there is one
  double in_flight_average_ = 0;  // strand: unary calls out, averaged over the last sends
  std::shared_ptr<struct client_registry> registry_;
  std::string last_peer_;  // the member that answered last when the story last changed
  bool link_down_ = false;
  bool closed_ = false;
  std::vector<std::weak_ptr<session_state>> sessions_;
  std::size_t swept_size_ = 8;
  std::unordered_set<call_base*> calls_;
  std::string token_;
  bool authenticating_ = false;
  // The server answered Authenticate with "authentication is not enabled": requests go without
  // a token, as Go's client sends them, until one is refused for want of a user.
  bool server_auth_off_ = false;
  std::size_t unary_in_flight_ = 0;
  std::deque<std::function<void()>> unary_queue_;
  std::vector<std::function<void(error_code)>> token_waiters_;
  std::shared_ptr<watch_stream> watches_;
  std::shared_ptr<keepalive_manager> keepalives_;
  std::shared_ptr<txn_batcher> batcher_;
  std::shared_ptr<grpc::ChannelCredentials> creds_;  // made once, from client_options::tls
  bool creds_secure_ = false;                         // creds_ are TLS ones
  std::string tls_name_;  // the host name certificates are checked against: the first endpoint's
  std::mutex member_channels_mutex_;  // not on any hot path: operating calls only
  std::map<std::string, std::shared_ptr<grpc::Channel>> member_channels_;
  mutable std::mutex endpoints_mutex_;  // endpoints_ is read by client::endpoints() on any thread
  std::vector<std::string> endpoints_;
  // Auto-sync waits on the completion queue, not on an Asio timer: a client that merely syncs
  // must not keep io_context::run() from returning.
  grpc::Alarm sync_alarm_;
  strand_tag sync_tag_{strand_};
  std::array<std::once_flag, 2> recipe_once_;
  std::array<std::shared_ptr<void>, 2> recipe_state_;
};

/// Fails a user handler without touching the network (bad input, closed client). Posted.
template <class Result>
void fail(const std::shared_ptr<client_impl>& c, handler<Result> h, error_code ec) {
  c->complete(std::move(h), ec, Result{});
}

/// An operation on an empty (moved-from) object: asio::error::bad_descriptor, as Asio's objects
/// answer an operation on a closed one; never inline. The object has no executor any more: the
/// handler runs on its associated executor, or on Asio's system executor when it has none.
template <class... Args>
void fail_empty(asio::any_completion_handler<void(error_code, Args...)> h) {
  asio::post(asio::system_executor(), asio::append(std::move(h), make_error_code(asio::error::bad_descriptor), Args{}...));
}

}  // namespace coetcd::detail
