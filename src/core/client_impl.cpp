// The client's construction (channel, credentials, endpoints), its completion-queue loop, close, and the auth token.
#include "client_impl.hpp"
#include "unary_rpc.hpp"
#include "session_state.hpp"

#include "keepalive_manager.hpp"
#include "txn_batcher.hpp"
#include "watch_stream.hpp"

#include <absl/synchronization/mutex.h>

#include <boost/system/system_error.hpp>

#include <boost/asio/execution/context.hpp>
#include <boost/asio/execution_context.hpp>
#include <boost/asio/query.hpp>

#include <algorithm>
#include <fstream>
#include <mutex>
#include <sstream>

namespace coetcd::detail {

/// The clients of one execution context. close() is posted to a client's strand; when the
/// context is shut down (destroyed) with such a close never run, or with no close at all, its
/// clients are closed here, while no thread runs the context and before its scheduler goes: the
/// completion-queue thread must not post into a context that no longer exists.
struct client_registry {
  std::mutex m;  // taken when a client is made or destroyed, and at shutdown: never per call
  std::map<client_impl*, std::weak_ptr<client_impl>> clients;
};

namespace {

class client_service final : public asio::execution_context::service {
 public:
  static inline asio::execution_context::id id;
  explicit client_service(asio::execution_context& ctx) : service(ctx) {}
  std::shared_ptr<client_registry> registry = std::make_shared<client_registry>();

 private:
  void shutdown() override {
    std::vector<std::shared_ptr<client_impl>> live;
    {
      std::lock_guard lock(registry->m);
      for (auto& [p, w] : registry->clients)
        if (auto c = w.lock()) live.push_back(std::move(c));
    }
    for (auto& c : live) c->close_at_shutdown();
  }
};

std::string read_pem(const std::string& path, const char* what, const char* marker) {
  std::ifstream in(path, std::ios::binary);
  if (path.empty() || !in)
    throw boost::system::system_error(make_error_code(error::tls_file_unreadable),
                                      std::string("coetcd: ") + what + " file '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  std::string data = ss.str();
  if (data.find("-----BEGIN ") == std::string::npos || data.find(marker) == std::string::npos)
    throw boost::system::system_error(make_error_code(error::tls_file_invalid),
                                      std::string("coetcd: ") + what + " file '" + path + "'");
  return data;
}

std::shared_ptr<grpc::ChannelCredentials> make_credentials(const client_options& o, bool https) {
  if (!o.tls && !https) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  if (o.tls) {
    const auto& t = *o.tls;
    if (!t.ca_file.empty()) ssl.pem_root_certs = read_pem(t.ca_file, "TLS CA", "CERTIFICATE-----");
    if (t.cert_file.empty() != t.key_file.empty())
      throw boost::system::system_error(make_error_code(error::tls_file_unreadable),
                                        "coetcd: client TLS needs both cert_file and key_file");
    if (!t.cert_file.empty()) {
      ssl.pem_cert_chain = read_pem(t.cert_file, "TLS certificate", "CERTIFICATE-----");
      ssl.pem_private_key = read_pem(t.key_file, "TLS key", "PRIVATE KEY-----");
    }
  }
  return grpc::SslCredentials(ssl);
}

// Round robin over every member that is up, and gRPC-level retries of reads on UNAVAILABLE.
constexpr const char* service_config = R"({
  "loadBalancingConfig": [{"round_robin": {}}],
  "methodConfig": [{
    "name": [{"service": "etcdserverpb.KV", "method": "Range"},
             {"service": "etcdserverpb.Lease", "method": "LeaseTimeToLive"},
             {"service": "etcdserverpb.Lease", "method": "LeaseLeases"}],
    "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.05s", "maxBackoff": "0.5s",
                    "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}
  }]
})";

/// A channel to every endpoint in `eps` (`target`, their grpc_target), balanced round robin.
/// `tls_name`: the host name certificates are checked against (empty: the first endpoint's host).
std::shared_ptr<grpc::Channel> make_channel(const client_options& o, const std::vector<endpoint>& eps,
                                            const std::string& target,
                                            const std::shared_ptr<grpc::ChannelCredentials>& creds,
                                            const std::string& tls_name = {}) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, static_cast<int>(o.keepalive_time.count()));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, static_cast<int>(o.keepalive_timeout.count()));
  // etcd answers pings without an active stream with GOAWAY(too_many_pings).
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 0);
  // Reconnect quickly after a member restarts (gRPC's default starts at 1 s and grows to 120 s).
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetMaxReceiveMessageSize(-1);
  // One connection per client object, not shared process-wide: clients stay independent.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetServiceConfigJSON(service_config);
  if (o.tls || eps.front().tls) {
    // The target may list several addresses; verify certificates against one host name: the
    // first endpoint the user gave, also after a sync moved to the members' advertised URLs.
    args.SetSslTargetNameOverride(tls_name.empty() ? eps.front().host : tls_name);
  }
  return grpc::CreateCustomChannel(target, creds, args);
}

}  // namespace

client_impl::client_impl(asio::any_io_executor ex, client_options options)
    : io_ex_(ex),
      completion_ex_(as_completion_executor(io_ex_)),
      strand_(asio::make_strand(ex)),
      options_(std::move(options)),
      telemetry_(options_.on_event) {
  auto eps = parse_endpoints(options_.endpoints);
  if (options_.request_timeout.count() <= 0)
    throw boost::system::system_error(make_error_code(error::invalid_argument),
                                      "coetcd: request_timeout must be positive");
  if (options_.resend_after.count() < 0)
    throw boost::system::system_error(make_error_code(error::invalid_argument),
                                      "coetcd: resend_after must not be negative (0 turns resending off)");
  if (options_.turn_off_abseil_deadlock_detection)  // the user's choice, for the whole process
    absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  if (options_.auto_sync_interval.count() < 0)
    throw boost::system::system_error(make_error_code(error::invalid_argument),
                                      "coetcd: auto_sync_interval must not be negative (0 turns syncing off)");
  // Read once: a sync that moves to other members must not read the TLS files again (they may
  // have moved, or the process changed its directory).
  creds_ = make_credentials(options_, eps.front().tls);
  creds_secure_ = options_.tls || eps.front().tls;
  tls_name_ = eps.front().host;
  use_endpoints(eps, options_.endpoints);
  cq_thread_ = std::thread([this] { cq_loop(); });
}

void client_impl::use_endpoints(const std::vector<endpoint>& eps, std::vector<std::string> names) {
  // Calls look their stub up when they are sent, so a call sent again after this goes to the
  // new channel; one on the wire keeps the old channel alive through its context until it ends.
  channel_target_ = grpc_target(eps);
  channel_ = make_channel(options_, eps, channel_target_, creds_, tls_name_);
  kv_ = pb::KV::NewStub(channel_);
  lease_ = pb::Lease::NewStub(channel_);
  watch_ = pb::Watch::NewStub(channel_);
  auth_ = pb::Auth::NewStub(channel_);
  cluster_ = pb::Cluster::NewStub(channel_);
  maintenance_ = pb::Maintenance::NewStub(channel_);
  std::lock_guard g(endpoints_mutex_);
  endpoints_ = std::move(names);
}

void client_impl::register_with_context() {
  auto& ctx = asio::query(io_ex_, asio::execution::context);
  registry_ = asio::use_service<client_service>(ctx).registry;
  std::lock_guard lock(registry_->m);
  registry_->clients[this] = weak_from_this();
  if (options_.auto_sync_interval.count() > 0) arm_auto_sync();  // before any other thread sees us
}

std::shared_ptr<grpc::Channel> client_impl::member_channel(const std::string& endpoint) {
  std::lock_guard g(member_channels_mutex_);
  auto& ch = member_channels_[endpoint];
  if (!ch) {
    try {
      auto eps = parse_endpoints({endpoint});
      // The client's own credentials where they fit: the TLS files are read once, at construction.
      const bool secure = options_.tls || eps.front().tls;
      ch = make_channel(options_, eps, grpc_target(eps),
                        secure == creds_secure_ ? creds_ : make_credentials(options_, eps.front().tls));
    } catch (...) {
      member_channels_.erase(endpoint);
      throw;
    }
  }
  return ch;
}

client_impl::~client_impl() {
  if (registry_) {
    std::lock_guard lock(registry_->m);
    registry_->clients.erase(this);
  }
  // The last owner is going: nothing is on the wire (every call and stream holds a reference),
  // and no other thread can reach us. A close() posted to a strand that never ran ends here.
  close_now();
  if (cq_thread_.joinable()) {
    if (cq_thread_.get_id() == std::this_thread::get_id()) cq_thread_.detach();
    else cq_thread_.join();
  }
}

void client_impl::cq_loop() {
  // Completions that are ready together go to the strand in one post: a post is an allocation
  // freed on the other thread and, when the event loop is idle, a wake-up.
  constexpr std::size_t max_batch = 64;
  struct completion {
    std::function<void(bool)> fn;
    bool ok;
  };
  std::vector<completion> batch;
  std::uint64_t parks = 0;  // each waits for the resume_cq_thread() with its number
  void* tag = nullptr;
  bool ok = false;
  while (cq_.Next(&tag, &ok)) {
    bool park = false;
    for (;;) {
      if (tag == &yield_tag_) {
        park = true;
      } else {
        tag_returned_by_grpc(tag);
        batch.push_back({static_cast<strand_tag*>(tag)->take(), ok});
      }
      if (batch.size() >= max_batch ||
          cq_.AsyncNext(&tag, &ok, gpr_inf_past(GPR_CLOCK_MONOTONIC)) != grpc::CompletionQueue::GOT_EVENT)
        break;
    }
    if (!batch.empty())
      asio::post(strand_, [b = std::exchange(batch, {})] {
        for (auto& c : b) c.fn(c.ok);
      });
    if (park) {
      // The strand polls now (completion_mode::poll) until it sends us back.
      cq_parked_.store(true, std::memory_order_release);
      ++parks;
      for (auto seen = cq_resumes_.load(std::memory_order_acquire); seen < parks;
           seen = cq_resumes_.load(std::memory_order_acquire))
        cq_resumes_.wait(seen, std::memory_order_acquire);
    }
  }
}

void client_impl::start_reaping() {
  reaping_ = true;
  last_reply_ = std::chrono::steady_clock::now();
  // Due now: the client thread, blocked in Next, gets the tag at once and parks.
  yield_alarm_.Set(&cq_, gpr_now(GPR_CLOCK_MONOTONIC), &yield_tag_);
  asio::post(strand_, [self = shared_from_this()] { self->reap(); });
}

void client_impl::reap() {
  if (closed_) {
    reaping_ = false;
    return;
  }
  auto again = [this] { asio::post(strand_, [self = shared_from_this()] { self->reap(); }); };
  // Until the client thread has parked, it still takes the completions and posts them.
  if (!cq_parked_.load(std::memory_order_acquire)) return again();
  void* tag = nullptr;
  bool ok = false;
  int got = 0;
  // A few at a time, then back to the event loop's queue: other handlers run in between.
  while (got < 16 && !closed_ &&
         cq_.AsyncNext(&tag, &ok, gpr_inf_past(GPR_CLOCK_MONOTONIC)) == grpc::CompletionQueue::GOT_EVENT) {
    tag_returned_by_grpc(tag);
    static_cast<strand_tag*>(tag)->take()(ok);
    ++got;
  }
  if (closed_) {  // a continuation closed the client: close_now() sent the client thread back
    reaping_ = false;
    return;
  }
  // Nothing came: let the other threads of this core run before the next look. Where the
  // server or the program's other work shares the cores, a poller that never lets go takes a
  // core from them and the reply comes later (measured on 2 cores with etcd beside it: one
  // worker's txn + delete 326-462 acq/s spinning, 503-582 yielding; Go's client 392-498).
  if (got == 0) std::this_thread::yield();
  const auto now = std::chrono::steady_clock::now();
  if (got > 0) bump(telemetry_.replies_polled, static_cast<std::uint64_t>(got));
  // last_reply_: the start of this poll, or the last unary reply since (note_reply).
  const bool stalled = options_.completions == completion_mode::adaptive && now - last_reply_ > adaptive_stall;
  if (polling_pays() && !stalled && (unary_in_flight_ > 0 || now - last_reply_ < options_.poll_linger))
    return again();
  reaping_ = false;
  resume_cq_thread();
}

bool client_impl::polling_pays() const noexcept {
  switch (options_.completions) {
    case completion_mode::poll:
      return true;
    case completion_mode::adaptive:
      return round_trips_seen_ > 0 && in_flight_average_ <= adaptive_max_in_flight &&
             round_trip_ <= adaptive_max_round_trip;
    case completion_mode::thread:
      break;
  }
  return false;
}

void client_impl::resume_cq_thread() {
  cq_parked_.store(false, std::memory_order_relaxed);
  cq_resumes_.fetch_add(1, std::memory_order_release);
  cq_resumes_.notify_one();
}

watch_stream& client_impl::watches() {
  if (!watches_) watches_ = std::make_shared<watch_stream>(shared_from_this());
  return *watches_;
}

txn_batcher& client_impl::batcher() {
  if (!batcher_) batcher_ = std::make_shared<txn_batcher>(*this);
  return *batcher_;
}

keepalive_manager& client_impl::keepalives() {
  if (!keepalives_) keepalives_ = std::make_shared<keepalive_manager>(shared_from_this());
  return *keepalives_;
}

void client_impl::close() {
  // From any thread: the state it ends is the strand's. Inline when already on the strand.
  asio::dispatch(strand_, [self = shared_from_this()] { self->close_now(); });
}

void client_impl::close_now() {
  if (closed_) return;
  closed_ = true;
  for (auto* c : calls_) c->cancel_rpc();
  // Streams hold a reference to us; closing them and dropping ours breaks the cycle.
  if (auto w = std::exchange(watches_, nullptr)) w->close();
  if (auto k = std::exchange(keepalives_, nullptr)) k->close();
  if (auto b = std::exchange(batcher_, nullptr)) b->close();
  for (auto& w : std::exchange(token_waiters_, {})) w(error::client_closed);
  // Sessions end now rather than when the keepalives' completions posted above run: at the
  // context's shutdown those never run, and the locks waiting under a session (whose handlers
  // may own the very objects that own the lock's queue) would keep each other, and this client,
  // alive for good. Ending them drops every waiter; its handler is posted, so it runs after a
  // close() and is destroyed with the context at shutdown.
  for (auto& w : std::exchange(sessions_, {}))
    if (auto s = w.lock()) s->finish(error::client_closed);
  for (auto& send : std::exchange(unary_queue_, {})) send();  // each finds us closed
  // A parked client thread goes back to the queue to drain it (completion_mode::poll).
  if (options_.completions != completion_mode::thread) resume_cq_thread();
  sync_alarm_.Cancel();
  {
    std::lock_guard g(member_channels_mutex_);
    member_channels_.clear();
  }
  // Every started operation was cancelled above, so the queue drains promptly.
  cq_.Shutdown();
  if (cq_thread_.joinable() && cq_thread_.get_id() != std::this_thread::get_id()) cq_thread_.join();
}

bool client_impl::keeps_lease(std::int64_t lease) const {
  return std::any_of(sessions_.begin(), sessions_.end(), [lease](const auto& w) {
    auto s = w.lock();
    return s && !s->lost && s->lease == lease;
  });
}

void client_impl::adopt(const std::shared_ptr<session_state>& s) {
  // Sessions come and go; the list is swept of ended ones whenever it has doubled.
  if (sessions_.size() >= 2 * swept_size_) {
    std::erase_if(sessions_, [](const auto& w) { return w.expired(); });
    swept_size_ = std::max<std::size_t>(sessions_.size(), 8);
  }
  sessions_.push_back(s);
}

std::unique_ptr<grpc::ClientContext> client_impl::make_context(std::optional<sys_time> deadline, bool needs_leader) const {
  auto ctx = std::make_unique<grpc::ClientContext>();
  if (deadline) ctx->set_deadline(*deadline);
  // Wait for a connection (bounded by the deadline) instead of failing while a member restarts.
  ctx->set_wait_for_ready(true);
  if (!token_.empty()) ctx->AddMetadata("token", token_);
  // A member without a raft leader fails the call at once instead of holding it (a request) or
  // keeping it silently idle (a stream). etcd checks this before the handler runs, so such a
  // failure applied nothing: unary_rpc resends any call after it, and round robin moves on.
  if (needs_leader) ctx->AddMetadata("hasleader", "true");
  return ctx;
}

error_code client_impl::map_status(const grpc::Status& s, bool reached) const {
  const auto& m = s.error_message();
  auto has = [&](const char* t) { return m.find(t) != std::string::npos; };
  if (has("requested lease not found")) return error::lease_not_found;
  if (has("required revision has been compacted")) return error::compacted;
  if (has("required revision is a future revision")) return error::future_revision;
  if (has("invalid auth token") || has("revision of auth store is old")) return error::invalid_auth_token;
  if (has("authentication failed")) return error::auth_failed;
  if (has("user name is empty")) return error::auth_required;
  if (has("authentication is not enabled")) return error::auth_not_enabled;
  if (has("permission denied")) return error::permission_denied;
  if (has("no leader")) return error::cluster_no_leader;
  if (has("too many operations in txn")) return error::too_many_txn_ops;
  if (has("duplicate key given in txn")) return error::duplicate_key_in_txn;
  // etcd's own size check, and gRPC's receive limit above it (max-request-bytes + 512 KiB).
  if (has("request is too large") || has("larger than max")) return error::request_too_large;
  if (has("too large lease TTL")) return error::invalid_argument;
  if (has("key is not provided")) return error::empty_key;
  // A reconfiguration refused until every member has been up a while: UNAVAILABLE, but etcd's
  // words say what to do (wait and try again) where "gRPC UNAVAILABLE" would not.
  if (has("unhealthy cluster")) return server_error(static_cast<int>(s.error_code()), m);
  if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED)
    return reached ? error::request_timeout : error::endpoints_unreachable;
  // What the server explained in words keeps its words. gRPC's own UNAVAILABLE and CANCELLED
  // (a dropped connection, a refused dial) say nothing of etcd's and stay bare; etcd's
  // UNAVAILABLEs ("etcdserver: leader changed", "request timed out", "rpc not supported for
  // learner") say which of several quite different things happened.
  auto code = s.error_code();
  const bool etcds_words = m.rfind("etcdserver:", 0) == 0;
  if (!m.empty() && ((code != grpc::StatusCode::UNAVAILABLE && code != grpc::StatusCode::CANCELLED) || etcds_words))
    return server_error(static_cast<int>(code), m);
  return {static_cast<int>(code), grpc_category()};
}

void client_impl::note_outcome(grpc::ClientContext* ctx, error_code ec) {
  if (!wants_events() || closed_) return;
  // gRPC's own UNAVAILABLE only: one etcd explained in words ("leader changed", "unhealthy
  // cluster") came from a member that is up.
  const bool unreachable = ec == error::endpoints_unreachable || ec == error::cluster_no_leader ||
                           (ec.category() == grpc_category() && ec.value() == grpc::StatusCode::UNAVAILABLE);
  if (unreachable) {
    if (link_down_) return;
    link_down_ = true;
    emit({.kind = event_kind::endpoint_unreachable, .name = last_peer_.empty() ? grpc_target(parse_endpoints(options_.endpoints)) : last_peer_, .error = ec});
    return;
  }
  if (ec || (!link_down_ && !last_peer_.empty()) || !ctx) return;  // nothing new (the cheap path)
  std::string peer = peer_address(*ctx);
  if (peer.empty()) return;
  event e{.kind = event_kind::endpoint_connected, .name = peer};
  if (!last_peer_.empty() && peer != last_peer_) {
    e.kind = event_kind::endpoint_failed_over;
    e.detail = "from " + last_peer_;
  }
  link_down_ = false;
  last_peer_ = std::move(peer);
  emit(std::move(e));
}

void client_impl::with_token(std::function<void(error_code)> then) {
  if (closed_) return then(error::client_closed);
  if (!uses_auth() || !token_.empty() || server_auth_off_) return then({});
  token_waiters_.push_back(std::move(then));
  if (!authenticating_) authenticate();
}

void client_impl::invalidate_token(const std::string& bad) {
  if (token_ == bad) token_.clear();
}

void client_impl::authenticate() {
  authenticating_ = true;
  pb::AuthenticateRequest req;
  req.set_name(options_.user);
  req.set_password(options_.password);
  auto done = [self = shared_from_this()](error_code ec, pb::AuthenticateResponse& r) {
    self->authenticating_ = false;
    // Credentials for a server with auth off: go on without a token (Go's client does too), so a
    // client keeps working when auth is switched off under it.
    if (ec == error::auth_not_enabled) {
      self->server_auth_off_ = true;
      ec = {};
    }
    if (!ec) self->token_ = r.token();
    for (auto& w : std::exchange(self->token_waiters_, {})) w(ec);
  };
  const trace_scope shared(nullptr);  // for every caller waiting for a token, not the one that asked
  start_unary<pb::AuthenticateRequest, pb::AuthenticateResponse>(
      shared_from_this(),
      [this](grpc::ClientContext* c, const pb::AuthenticateRequest& r, grpc::CompletionQueue* q) {
        return auth_->PrepareAsyncAuthenticate(c, r, q);
      },
      std::move(req), call_options{.idempotent = true, .needs_token = false}, std::move(done));
}

}  // namespace coetcd::detail

namespace coetcd {

client::client(asio::any_io_executor ex, client_options options)
    : impl_(std::make_shared<detail::client_impl>(std::move(ex), std::move(options))) {
  impl_->register_with_context();
  impl_->user_ = this;
}

client::client(client&& other) noexcept : impl_(std::move(other.impl_)) {
  if (impl_) impl_->user_ = this;
}

client& client::operator=(client&& other) noexcept {
  if (this != &other) {
    // Sessions of the replaced connection keep naming this object (closed connection replaced),
    // as before the move support: not a null one.
    if (impl_) impl_->close();
    impl_ = std::move(other.impl_);
    if (impl_) impl_->user_ = this;
  }
  return *this;
}

client::~client() {
  if (impl_) {
    impl_->user_ = nullptr;
    impl_->close();
  }
}

void client::close() {
  if (impl_) impl_->close();
}

client::executor_type client::get_executor() const noexcept { return impl_ ? impl_->io_ex_ : executor_type(); }

const client_options& client::options() const noexcept {
  if (impl_) return impl_->options_;
  // An empty client talks to no one: no endpoints, as endpoints() says.
  static const client_options none = [] {
    client_options o;
    o.endpoints.clear();
    return o;
  }();
  return none;
}

}  // namespace coetcd
