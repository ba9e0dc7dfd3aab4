// Counters, lock-name statistics and event text behind client::stats() and on_event (see telemetry.hpp).
#include "telemetry.hpp"

#include "client_impl.hpp"

#include <cstdio>

namespace coetcd::detail {

const char* rpc_name(rpc_kind k) noexcept {
  switch (k) {
    case rpc_kind::range: return "Range";
    case rpc_kind::put: return "Put";
    case rpc_kind::delete_range: return "DeleteRange";
    case rpc_kind::txn: return "Txn";
    case rpc_kind::compact: return "Compact";
    case rpc_kind::lease_grant: return "LeaseGrant";
    case rpc_kind::lease_revoke: return "LeaseRevoke";
    case rpc_kind::lease_ttl: return "LeaseTimeToLive";
    case rpc_kind::lease_leases: return "LeaseLeases";
    case rpc_kind::authenticate: return "Authenticate";
    case rpc_kind::member_list: return "MemberList";
    case rpc_kind::member_add: return "MemberAdd";
    case rpc_kind::member_remove: return "MemberRemove";
    case rpc_kind::member_update: return "MemberUpdate";
    case rpc_kind::member_promote: return "MemberPromote";
    case rpc_kind::alarm: return "Alarm";
    case rpc_kind::status: return "Status";
    case rpc_kind::defragment: return "Defragment";
    case rpc_kind::hash_kv: return "HashKV";
    case rpc_kind::move_leader: return "MoveLeader";
    case rpc_kind::snapshot: return "Snapshot";
    case rpc_kind::count_: break;
  }
  return "?";
}

const char* stream_name(stream_kind k) noexcept {
  return k == stream_kind::watch ? "Watch" : "LeaseKeepAlive";
}

void lock_counters::record_wait(std::chrono::steady_clock::duration d) noexcept {
  const double s = std::chrono::duration<double>(d).count();
  std::size_t i = 0;
  while (i < wait_histogram::bounds.size() && s > wait_histogram::bounds[i]) ++i;
  bump(wait_buckets[i]);
  bump(wait_micros, static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(d).count()));
}

std::shared_ptr<lock_counters> telemetry::lock(const std::string& name) {
  std::lock_guard lock(locks_mutex_);
  if (auto it = locks_.find(name); it != locks_.end())
    if (auto c = it->second.lock()) return c;
  std::erase_if(locks_, [](const auto& e) { return e.second.expired(); });
  auto c = std::make_shared<lock_counters>(name);
  locks_[name] = c;
  return c;
}

client_stats telemetry::snapshot() const {
  constexpr auto r = std::memory_order_relaxed;
  client_stats s;
  for (unsigned k = 0; k < rpcs_.size(); ++k) {
    const auto& c = rpcs_[k];
    if (auto sent = c.sent.load(r))
      s.rpcs.emplace(rpc_name(static_cast<rpc_kind>(k)), rpc_stats{sent, c.failed.load(r), c.retried.load(r),
                                                                    c.resent_unanswered.load(r)});
  }
  for (unsigned k = 0; k < streams_.size(); ++k) {
    const auto& c = streams_[k];
    if (auto opened = c.opened.load(r))
      s.streams.emplace(stream_name(static_cast<stream_kind>(k)), stream_stats{opened, c.reopened.load(r)});
  }
  s.rpcs_in_flight = in_flight.load(r);
  s.watchers = watchers.load(r);
  s.leases_kept = leases.load(r);
  s.sessions_lost = sessions_lost.load(r);
  s.replies_polled = replies_polled.load(r);
  std::lock_guard lock(locks_mutex_);
  for (const auto& [name, w] : locks_) {
    auto c = w.lock();
    if (!c) continue;
    lock_stats l;
    l.name = name;
    l.held = c->held.load(r);
    l.waiting = c->waiting.load(r);
    l.acquired = c->acquired.load(r);
    l.handoffs = c->handoffs.load(r);
    l.fenced_handoffs = c->fenced_handoffs.load(r);
    l.cleaning = c->cleaning.load(r);
    l.lost = c->lost.load(r);
    for (std::size_t i = 0; i < l.wait.counts.size(); ++i) {
      l.wait.counts[i] = c->wait_buckets[i].load(r);
      l.wait.count += l.wait.counts[i];
    }
    l.wait.sum_seconds = static_cast<double>(c->wait_micros.load(r)) / 1e6;
    s.locks.push_back(std::move(l));
  }
  return s;
}

}  // namespace coetcd::detail

namespace coetcd {

std::string_view to_string(event_kind k) noexcept {
  switch (k) {
    case event_kind::endpoint_connected: return "endpoint_connected";
    case event_kind::endpoint_failed_over: return "endpoint_failed_over";
    case event_kind::endpoint_unreachable: return "endpoint_unreachable";
    case event_kind::stream_reopened: return "stream_reopened";
    case event_kind::watch_resumed: return "watch_resumed";
    case event_kind::watch_relisted: return "watch_relisted";
    case event_kind::keepalive_late: return "keepalive_late";
    case event_kind::session_lost: return "session_lost";
    case event_kind::lock_acquired: return "lock_acquired";
    case event_kind::lock_released: return "lock_released";
    case event_kind::lock_lost: return "lock_lost";
    case event_kind::leader_changed: return "leader_changed";
    case event_kind::request_resent: return "request_resent";
    case event_kind::endpoints_changed: return "endpoints_changed";
  }
  return "unknown";
}

std::string to_string(const event& e) {
  std::string s(to_string(e.kind));
  auto quoted = [&](const char* field, const std::string& v) {
    if (v.empty()) return;
    s += ' ';
    s += field;
    s += "=\"";
    for (char ch : v) {
      if (ch == '"' || ch == '\\') s += '\\';
      if (static_cast<unsigned char>(ch) < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(ch));
        s += buf;
      } else {
        s += ch;
      }
    }
    s += '"';
  };
  quoted("name", e.name);
  quoted("key", e.key);
  if (e.lease) {
    char buf[32];
    std::snprintf(buf, sizeof buf, " lease=%llx", static_cast<unsigned long long>(e.lease));
    s += buf;
  }
  if (e.revision) s += " revision=" + std::to_string(e.revision);
  if (e.duration.count()) s += " duration=" + std::to_string(e.duration.count()) + "ms";
  if (e.error) quoted("error", e.error.message());
  quoted("detail", e.detail);
  return s;
}

client_stats client::stats() const { return impl_ ? impl_->telemetry_.snapshot() : client_stats{}; }

}  // namespace coetcd
