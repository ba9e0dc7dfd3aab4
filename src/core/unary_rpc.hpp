// The call machinery: one unary RPC with its retries, resends, re-authentication and
// cancellation (unary_rpc), and the helpers every service's calls start through.
#pragma once

#include "client_impl.hpp"
#include "spans.hpp"

namespace coetcd::detail {

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
  else if constexpr (std::is_same_v<Req, pb::MemberListRequest>) return rpc_kind::member_list;
  else if constexpr (std::is_same_v<Req, pb::MemberAddRequest>) return rpc_kind::member_add;
  else if constexpr (std::is_same_v<Req, pb::MemberRemoveRequest>) return rpc_kind::member_remove;
  else if constexpr (std::is_same_v<Req, pb::MemberUpdateRequest>) return rpc_kind::member_update;
  else if constexpr (std::is_same_v<Req, pb::MemberPromoteRequest>) return rpc_kind::member_promote;
  else if constexpr (std::is_same_v<Req, pb::AlarmRequest>) return rpc_kind::alarm;
  else if constexpr (std::is_same_v<Req, pb::StatusRequest>) return rpc_kind::status;
  else if constexpr (std::is_same_v<Req, pb::DefragmentRequest>) return rpc_kind::defragment;
  else if constexpr (std::is_same_v<Req, pb::HashKVRequest>) return rpc_kind::hash_kv;
  else if constexpr (std::is_same_v<Req, pb::MoveLeaderRequest>) return rpc_kind::move_leader;
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
  /// Refused by a member without a raft leader even where the call would not need one (a
  /// member list to follow: a partitioned member's list may be stale).
  bool needs_leader = false;
  /// Set when the call was sent again after a failure that may have been applied.
  std::shared_ptr<bool> resent;
  /// The channel `prepare` calls on when it is not the client's (a member's): a deadline is
  /// read against its connection.
  std::shared_ptr<grpc::Channel> channel;
};

/// One unary RPC: retries idempotent calls on transient errors within the request deadline,
/// re-authenticates once on a rejected token, and hands (error_code, response) to `Done`.
template <class Req, class Resp, class Done>
class unary_rpc final : public call_base, public std::enable_shared_from_this<unary_rpc<Req, Resp, Done>> {
 public:
  using prepare_fn = std::function<reader_ptr<Resp>(grpc::ClientContext*, const Req&, grpc::CompletionQueue*)>;

  unary_rpc(std::shared_ptr<client_impl> c, prepare_fn p, Req r, call_options o, Done d)
      : client_(std::move(c)), prepare_(std::move(p)), req_(std::move(r)), opts_(o), done_(std::move(d)),
        tag_(client_->strand_), retry_timer_(client_->strand_), resend_timer_(client_->strand_),
        work_(asio::prefer(client_->io_ex_, asio::execution::outstanding_work.tracked)) {
    if (client_->options_.spans) trace_ = op_trace::current();  // made where the request is made
  }

  /// Reads: a cancelled one changed nothing, so every cancellation type is honoured.
  bool reads_only() const {
    return std::is_same_v<Req, pb::RangeRequest> || std::is_same_v<Req, pb::LeaseTimeToLiveRequest> ||
           std::is_same_v<Req, pb::LeaseLeasesRequest> || std::is_same_v<Req, pb::AuthenticateRequest> ||
           std::is_same_v<Req, pb::MemberListRequest> || std::is_same_v<Req, pb::StatusRequest> ||
           std::is_same_v<Req, pb::HashKVRequest> ||
           (std::is_same_v<Req, pb::AlarmRequest> && req_is_alarm_get());
  }

  void start(asio::cancellation_slot slot) {
    deadline_ = client_->request_deadline();
    if (slot.is_connected()) {
      slot.assign([w = this->weak_from_this(), s = client_->strand_, reads = reads_only()](asio::cancellation_type type) {
        // A write cancelled on the wire may still be applied: partial cancellation in Asio's
        // terms, never total (no side effects). A write ignores a request for total only.
        constexpr auto terminal_or_partial = asio::cancellation_type::terminal | asio::cancellation_type::partial;
        if (!reads && (type & terminal_or_partial) == asio::cancellation_type::none) return;
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
    // Where this attempt goes out and whether a connection was there: its deadline is read
    // against them, not against a channel a sync may put in its place meanwhile.
    sent_on_ = opts_.channel ? opts_.channel : client_->channel_;
    ready_when_sent_ = sent_on_->GetState(false) == GRPC_CHANNEL_READY;
    reader_ = prepare_(ctx_.get(), req_, &client_->cq_);
    if (client_->options_.spans) span_.begin(*client_, rpc_name(rpc_kind_of<Req>()), span_key(*client_, key_of(req_)), sends_, trace_.get());
    bump(counters().sent);
    bump(client_->telemetry_.in_flight);
    sent_at_ = std::chrono::steady_clock::now();
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
    // A call cancelled (by us or its caller) says nothing of how long replies take.
    if (status_.error_code() != grpc::StatusCode::CANCELLED) client_->note_reply(sent_at_);
    // Our own cancel only if the call did end cancelled: a reply (or an error of the server's)
    // that came in the same turn as the timer stands.
    const bool resend_due = std::exchange(resend_due_, false) && status_.error_code() == grpc::StatusCode::CANCELLED;
    if (span_.is_open()) span_.end(*client_, peer_address(*ctx_), status_.ok() ? error_code{} : mapped_status());
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
      unanswered_before_ = !reads_only();
      return begin();
    }
    error_code ec = mapped_status();
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
    bool transient = not_applied || grpc_status(ec) == grpc::StatusCode::UNAVAILABLE;
    auto backoff = std::chrono::milliseconds(50 * (1 << std::min(attempts_, 4)));
    if (transient && (opts_.idempotent || not_applied) && std::chrono::system_clock::now() + backoff < deadline_) {
      ++attempts_;
      bump(counters().retried);
      if (opts_.resent && !not_applied) *opts_.resent = true;
      unanswered_before_ = unanswered_before_ || (!not_applied && !reads_only());
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

  /// The attempt's status as an error. A deadline is error::endpoints_unreachable only when
  /// neither this attempt nor an earlier one of the call could have reached a server: the
  /// recipes take that error for a write that was surely not applied.
  error_code mapped_status() {
    bool reached = true;
    if (status_.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED && !unanswered_before_) {
      const bool ready_now = sent_on_->GetState(false) == GRPC_CHANNEL_READY;
      // The target is known for the client's channel only, and only while it is still in use.
      const bool current = !opts_.channel && sent_on_ == client_->channel_;
      reached = may_have_reached_a_server(ready_when_sent_, ready_now, ctx_->peer(),
                                          current ? std::string_view(client_->channel_target_) : std::string_view());
    }
    return client_->map_status(status_, reached);
  }

  bool req_is_alarm_get() const {
    if constexpr (std::is_same_v<Req, pb::AlarmRequest>) return req_.action() == pb::AlarmRequest::GET;
    else return false;
  }

  telemetry::rpc_counters& counters() { return client_->telemetry_.rpc(rpc_kind_of<Req>()); }

  /// The key a span of this request names: a txn's first compared key, else its first op's.
  static std::string_view key_of(const Req& r) {
    if constexpr (std::is_same_v<Req, pb::RangeRequest> || std::is_same_v<Req, pb::PutRequest> ||
                  std::is_same_v<Req, pb::DeleteRangeRequest>)
      return r.key();
    else if constexpr (std::is_same_v<Req, pb::TxnRequest>) {
      if (r.compare_size() > 0) return r.compare(0).key();
      if (r.success_size() == 0) return {};
      const auto& op = r.success(0);
      if (op.has_request_range()) return op.request_range().key();
      if (op.has_request_put()) return op.request_put().key();
      if (op.has_request_delete_range()) return op.request_delete_range().key();
      return {};
    } else return {};
  }

  /// Whether the member must have a raft leader to serve this call: not for what it answers from
  /// its own state (a serializable read, the lease list), which keeps working without a quorum.
  bool needs_leader() const {
    if (opts_.needs_leader) return true;
    if constexpr (std::is_same_v<Req, pb::RangeRequest>) return !req_.serializable();
    else if constexpr (std::is_same_v<Req, pb::LeaseLeasesRequest>) return false;
    // What a member says of itself, from its own state: asked most when something is wrong.
    else if constexpr (std::is_same_v<Req, pb::StatusRequest> || std::is_same_v<Req, pb::MemberListRequest> ||
                       std::is_same_v<Req, pb::HashKVRequest> || std::is_same_v<Req, pb::DefragmentRequest>)
      return false;
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
  std::shared_ptr<const op_trace> trace_;  // with span hooks: what this request was made for
  open_span span_;                         // the attempt on the wire, with span hooks
  std::unique_ptr<grpc::ClientContext> ctx_;
  std::shared_ptr<grpc::Channel> sent_on_;  // the channel of the attempt on the wire
  reader_ptr<Resp> reader_;
  grpc::Status status_;
  sys_time deadline_;
  std::string sent_token_;
  int attempts_ = 0;
  int sends_ = 0;             // attempts on the wire so far: a resend timer belongs to one of them
  int resends_ = 0;           // attempts cancelled by the resend timer
  bool resend_due_ = false;   // the resend timer cancelled the attempt on the wire
  bool ready_when_sent_ = false;    // sent_on_ had a connection when the attempt was sent
  bool unanswered_before_ = false;  // a write's earlier attempt ended in a way that may follow its apply
  bool on_wire_ = false;      // an attempt is on the wire and its completion not yet handled
  std::chrono::steady_clock::time_point sent_at_;  // of the attempt on the wire (its round trip)
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

}  // namespace coetcd::detail
