// Internal state of a client. Everything here is touched only on the client's strand, except
// the completion-queue thread's loop (cq_loop), which only posts completions to the strand.
#pragma once

#include <coetcd/client.hpp>

#include "telemetry.hpp"

#include "etcd/etcdserver/etcdserverpb/rpc.grpc.pb.h"

#include <grpcpp/alarm.h>
#include <grpcpp/grpcpp.h>

#include <boost/asio/append.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

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
  error_code map_status(const grpc::Status& s) const;
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
  /// A unary call went on the wire: under completion_mode::poll the strand polls the queue
  /// until the replies are in. On strand.
  void poll_while_in_flight() {
    if (options_.completions == completion_mode::poll && !reaping_ && !closed_) start_reaping();
  }
  void release_unary_slot() {
    --unary_in_flight_;
    while (unary_in_flight_ < max_unary_in_flight && !unary_queue_.empty()) {
      auto next = std::move(unary_queue_.front());
      unary_queue_.pop_front();
      next();
    }
  }

  /// Completes a user handler: never inline, on its associated executor.
  template <class... Args>
  void complete(asio::any_completion_handler<void(error_code, Args...)> h, error_code ec, Args... args) {
    asio::get_associated_cancellation_slot(h).clear();
    asio::post(io_ex_, asio::append(std::move(h), ec, std::move(args)...));
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
  strand_type strand_;
  client_options options_;
  telemetry telemetry_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<pb::KV::Stub> kv_;
  std::unique_ptr<pb::Lease::Stub> lease_;
  std::unique_ptr<pb::Watch::Stub> watch_;
  std::unique_ptr<pb::Auth::Stub> auth_;
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

  /// A session made by this client: it ends in close(), there and then. On strand.
  void adopt(const std::shared_ptr<session_state>& s);
  /// Whether a live session of this client keeps `lease`. On strand.
  bool keeps_lease(std::int64_t lease) const;

 private:
  void cq_loop();
  void start_reaping();
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
  std::array<std::once_flag, 2> recipe_once_;
  std::array<std::shared_ptr<void>, 2> recipe_state_;
};

template <class Req>
constexpr rpc_kind rpc_kind_of() {
  if constexpr (std::is_same_v<Req, pb::RangeRequest>) return rpc_kind::range;
  else if constexpr (std::is_same_v<Req, pb::PutRequest>) return rpc_kind::put;
  else if constexpr (std::is_same_v<Req, pb::DeleteRangeRequest>) return rpc_kind::delete_range;
  else if constexpr (std::is_same_v<Req, pb::TxnRequest>) return rpc_kind::txn;
  else if constexpr (std::is_same_v<Req, pb::CompactionRequest>) return rpc_kind::compact;
  else if constexpr (std::is_same_v<Req, pb::LeaseGrantRequest>) return rpc_kind::lease_grant;
  else if constexpr (std::is_same_v<Req, pb::LeaseRevokeRequest>) return rpc_kind::lease_revoke;
  else if constexpr (std::is_same_v<Req, pb::LeaseTimeToLiveRequest>) return rpc_kind::lease_ttl;
  else if constexpr (std::is_same_v<Req, pb::LeaseLeasesRequest>) return rpc_kind::lease_leases;
  else if constexpr (std::is_same_v<Req, pb::AuthenticateRequest>) return rpc_kind::authenticate;
  else static_assert(sizeof(Req) == 0, "count this RPC in telemetry.hpp");
}

template <class Resp>
using reader_ptr = std::unique_ptr<grpc::ClientAsyncResponseReader<Resp>>;

struct call_options {
  bool idempotent = false;  ///< safe to resend after UNAVAILABLE / no leader
  /// Also resent when unanswered after client_options::resend_after: only for calls whose copy
  /// applied late, after later writes, undoes nothing (reads; deletes guarded by the key's
  /// create revision; put-if-absent), since the cancelled copy may still be on its way.
  bool resend_when_silent = false;
  bool needs_token = true;  ///< false only for Authenticate itself
  /// Set when the call was sent again after a failure that may have been applied.
  std::shared_ptr<bool> resent;
};

/// A txn or delete with call options: `idempotent` for those whose effect is the same sent twice.
void start_txn(const std::shared_ptr<client_impl>& c, txn t, handler<txn_result> h, call_options o);
void start_delete(const std::shared_ptr<client_impl>& c, std::string key, std::string end, delete_options o,
                  handler<delete_result> h, call_options co);

/// One unary RPC: retries idempotent calls on transient errors within the request deadline,
/// re-authenticates once on a rejected token, and hands (error_code, response) to `Done`.
template <class Req, class Resp, class Done>
class unary_rpc final : public call_base, public std::enable_shared_from_this<unary_rpc<Req, Resp, Done>> {
 public:
  using prepare_fn = std::function<reader_ptr<Resp>(grpc::ClientContext*, const Req&, grpc::CompletionQueue*)>;

  unary_rpc(std::shared_ptr<client_impl> c, prepare_fn p, Req r, call_options o, Done d)
      : client_(std::move(c)), prepare_(std::move(p)), req_(std::move(r)), opts_(o), done_(std::move(d)),
        tag_(client_->strand_), retry_timer_(client_->strand_), resend_timer_(client_->strand_),
        work_(asio::prefer(client_->io_ex_, asio::execution::outstanding_work.tracked)) {}

  /// Reads: a cancelled one changed nothing, so every cancellation type is honoured.
  static constexpr bool reads_only() {
    return std::is_same_v<Req, pb::RangeRequest> || std::is_same_v<Req, pb::LeaseTimeToLiveRequest> ||
           std::is_same_v<Req, pb::LeaseLeasesRequest> || std::is_same_v<Req, pb::AuthenticateRequest>;
  }

  void start(asio::cancellation_slot slot) {
    deadline_ = client_->request_deadline();
    if (slot.is_connected()) {
      slot.assign([w = this->weak_from_this(), s = client_->strand_](asio::cancellation_type type) {
        // A write cancelled on the wire may still be applied: partial cancellation in Asio's
        // terms, never total (no side effects). A write ignores a request for total only.
        constexpr auto terminal_or_partial = asio::cancellation_type::terminal | asio::cancellation_type::partial;
        if (!reads_only() && (type & terminal_or_partial) == asio::cancellation_type::none) return;
        asio::dispatch(s, [w] {
          if (auto self = w.lock()) self->user_cancel();
        });
      });
    }
    asio::dispatch(client_->strand_, [self = this->shared_from_this()] { self->begin(); });
  }

  void cancel_rpc() override {
    if (ctx_) ctx_->TryCancel();
  }

 private:
  void user_cancel() {
    if (finished_) return;
    user_cancelled_ = true;
    if (ctx_) ctx_->TryCancel();
    if (waiting_) {  // between attempts or waiting for a token: nothing on the wire to cancel
      retry_timer_.cancel();
      finish(asio::error::operation_aborted);
    }
  }

  void begin() {
    if (finished_) return;
    if (client_->closed()) return finish(error::client_closed);
    if (user_cancelled_) return finish(asio::error::operation_aborted);
    if (!opts_.needs_token || !client_->uses_auth()) return send();
    waiting_ = true;
    client_->with_token([self = this->shared_from_this()](error_code ec) {
      self->waiting_ = false;
      if (self->finished_) return;
      if (ec) return self->finish(ec);
      self->send();
    });
  }

  void send() {
    if (client_->closed()) return finish(error::client_closed);
    if (!client_->take_unary_slot()) {
      waiting_ = true;  // a cancel finishes it here; the queued send then does nothing
      client_->queue_unary([self = this->shared_from_this()] {
        self->waiting_ = false;
        if (!self->finished_) self->send();
      });
      return;
    }
    reader_.reset();  // before its context: the reader lives in the call the context releases
    ctx_ = client_->make_context(deadline_, needs_leader());
    ++sends_;
    resend_due_ = false;
    sent_token_ = client_->token();
    reader_ = prepare_(ctx_.get(), req_, &client_->cq_);
    bump(counters().sent);
    bump(client_->telemetry_.in_flight);
    reader_->StartCall();
    client_->track(this);
    reader_->Finish(&resp_, &status_, tag_.arm([self = this->shared_from_this()](bool) { self->on_finished(); }));
    on_wire_ = true;
    arm_resend();
    client_->poll_while_in_flight();
  }

  /// An idempotent call still unanswered after client_options::resend_after is cancelled and sent
  /// again, and round robin takes it to the next member. etcd 3.4 holds a write that a follower
  /// forwarded to a leader that died meanwhile until its own request timeout (7 s): the proposal
  /// went to a dead peer and nothing tells the follower (test_faults,
  /// an_unlock_caught_by_a_leader_kill_is_resent_not_held_for_etcds_timeout). At most twice,
  /// each time waiting twice as long, and only while the next attempt would still have twice
  /// this one's wait before the deadline: a request that is merely slow is cut at most once or
  /// twice and then left to finish (with the defaults, 10 s and 2 s: once).
  /// How long the attempt after `resends` cuts by the resend timer waits for an answer.
  std::chrono::milliseconds resend_wait(int resends) const { return client_->options_.resend_after * (1 << resends); }
  void arm_resend() {
    const auto after = resend_wait(resends_);
    if (!opts_.resend_when_silent || resends_ >= 2 || after.count() <= 0 ||
        std::chrono::system_clock::now() + 3 * after > deadline_)
      return;
    resend_timer_.expires_after(after);
    resend_timer_.async_wait([self = this->shared_from_this(), attempt = sends_](error_code ec) {
      // (on_wire_: the reply may have been reaped in this turn already, and the call be waiting
      // to be sent again for another reason)
      if (ec || self->finished_ || !self->on_wire_ || self->sends_ != attempt) return;
      self->resend_due_ = true;
      self->ctx_->TryCancel();
    });
  }

  void on_finished() {
    client_->untrack(this);
    client_->release_unary_slot();
    bump(client_->telemetry_.in_flight, -1);
    on_wire_ = false;
    resend_timer_.cancel();
    // Our own cancel only if the call did end cancelled: a reply (or an error of the server's)
    // that came in the same turn as the timer stands.
    const bool resend_due = std::exchange(resend_due_, false) && status_.error_code() == grpc::StatusCode::CANCELLED;
    if (finished_) return;
    if (status_.ok()) {
      client_->note_outcome(ctx_.get(), {});
      return finish({});
    }
    if (user_cancelled_) return finish(asio::error::operation_aborted);
    if (client_->closed()) return finish(error::client_closed);
    if (resend_due) {  // our own cancel: the first copy may still be applied (ambiguous)
      ++resends_;
      bump(counters().retried);
      bump(counters().resent_unanswered);
      if (client_->wants_events()) {
        // A cancelled call may report the channel's whole target list instead of its peer.
        auto peer = peer_address(*ctx_);
        if (peer.empty() || peer.find(',') != std::string::npos) peer = "its member";
        client_->emit({.kind = event_kind::request_resent, .name = rpc_name(rpc_kind_of<Req>()),
                       .detail = "no answer from " + peer + "; sent again", .duration = resend_wait(resends_ - 1)});
      }
      if (opts_.resent) *opts_.resent = true;
      return begin();
    }
    error_code ec = client_->map_status(status_);
    client_->note_outcome(ctx_.get(), ec);
    // A token refused (expired, or auth switched off under it on 3.4), or none sent to a server
    // that has auth on again: authenticate anew and send once more. etcd checks the token before
    // the request is looked at, so nothing was applied.
    const bool sent_none = ec == error::auth_required && sent_token_.empty();
    if (sent_none && client_->uses_auth()) client_->note_auth_on();
    if ((ec == error::invalid_auth_token || sent_none) && opts_.needs_token && client_->uses_auth() && !auth_retried_) {
      auth_retried_ = true;
      client_->invalidate_token(sent_token_);
      return begin();
    }
    // "No leader" comes from etcd's interceptor, before the request is looked at (every call
    // carries "hasleader"): nothing was applied, so any call may go again. Other UNAVAILABLEs may
    // have been applied, so only idempotent calls are resent after them.
    const bool not_applied = ec == error::cluster_no_leader;
    bool transient = not_applied || (ec.category() == grpc_category() && ec.value() == grpc::StatusCode::UNAVAILABLE);
    auto backoff = std::chrono::milliseconds(50 * (1 << std::min(attempts_, 4)));
    if (transient && (opts_.idempotent || not_applied) && std::chrono::system_clock::now() + backoff < deadline_) {
      ++attempts_;
      bump(counters().retried);
      if (opts_.resent && !not_applied) *opts_.resent = true;
      waiting_ = true;
      retry_timer_.expires_after(backoff);
      retry_timer_.async_wait([self = this->shared_from_this()](error_code) {
        self->waiting_ = false;
        self->begin();
      });
      return;
    }
    finish(ec);
  }

  telemetry::rpc_counters& counters() { return client_->telemetry_.rpc(rpc_kind_of<Req>()); }

  /// Whether the member must have a raft leader to serve this call: not for what it answers from
  /// its own state (a serializable read, the lease list), which keeps working without a quorum.
  bool needs_leader() const {
    if constexpr (std::is_same_v<Req, pb::RangeRequest>) return !req_.serializable();
    else if constexpr (std::is_same_v<Req, pb::LeaseLeasesRequest>) return false;
    else return true;
  }

  void finish(error_code ec) {
    if (finished_) return;
    finished_ = true;
    if (ec) bump(counters().failed);
    done_(ec, resp_);
    work_ = {};
  }

  std::shared_ptr<client_impl> client_;
  prepare_fn prepare_;
  Req req_;
  Resp resp_;
  call_options opts_;
  Done done_;
  strand_tag tag_;
  asio::steady_timer retry_timer_;
  asio::steady_timer resend_timer_;
  asio::any_io_executor work_;
  std::unique_ptr<grpc::ClientContext> ctx_;
  reader_ptr<Resp> reader_;
  grpc::Status status_;
  sys_time deadline_;
  std::string sent_token_;
  int attempts_ = 0;
  int sends_ = 0;             // attempts on the wire so far: a resend timer belongs to one of them
  int resends_ = 0;           // attempts cancelled by the resend timer
  bool resend_due_ = false;   // the resend timer cancelled the attempt on the wire
  bool on_wire_ = false;      // an attempt is on the wire and its completion not yet handled
  bool auth_retried_ = false;
  bool user_cancelled_ = false;
  bool waiting_ = false;
  bool finished_ = false;
};

/// Starts a unary RPC whose outcome goes to `done(error_code, Resp&)` on the strand.
template <class Req, class Resp, class Done>
void start_unary(const std::shared_ptr<client_impl>& c,
                 typename unary_rpc<Req, Resp, Done>::prepare_fn prepare, Req req, call_options o, Done done,
                 asio::cancellation_slot slot = {}) {
  auto rpc = std::make_shared<unary_rpc<Req, Resp, Done>>(c, std::move(prepare), std::move(req), o, std::move(done));
  rpc->start(slot);
}

/// Starts a unary RPC for a user handler: converts the response with `convert(Resp&) -> Result`.
template <class Req, class Resp, class Result, class Convert>
void start_user_unary(const std::shared_ptr<client_impl>& c,
                      std::function<reader_ptr<Resp>(grpc::ClientContext*, const Req&, grpc::CompletionQueue*)> prepare,
                      Req req, call_options o, Convert convert, handler<Result> h) {
  auto slot = asio::get_associated_cancellation_slot(h);
  auto done = [c, h = std::move(h), convert = std::move(convert)](error_code ec, Resp& resp) mutable {
    if (ec) return c->complete(std::move(h), ec, Result{});
    c->complete(std::move(h), ec, convert(resp));
  };
  start_unary<Req, Resp>(c, std::move(prepare), std::move(req), o, std::move(done), slot);
}

/// Fails a user handler without touching the network (bad input, closed client). Posted.
template <class Result>
void fail(const std::shared_ptr<client_impl>& c, handler<Result> h, error_code ec) {
  c->complete(std::move(h), ec, Result{});
}

}  // namespace coetcd::detail
