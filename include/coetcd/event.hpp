// Events for client_options::on_event: what a client saw happen, for logs and metrics.
#pragma once

#include <coetcd/error.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace coetcd {

/// What happened, for client_options::on_event.
enum class event_kind {
  endpoint_connected,    ///< first answer from `name` (a member's address), or the first after a failure there
  endpoint_failed_over,  ///< after a failure, requests are answered by `name`; `detail` names the member before
  endpoint_unreachable,  ///< a request or stream failed for want of a member (`error` says how)
  stream_reopened,       ///< the shared `name` stream ("Watch", "LeaseKeepAlive") is up again; `error`: why it ended
  watch_resumed,         ///< the watch of `name` continues on a new stream from `revision`, nothing lost
  watch_relisted,        ///< the view of lock/election `name` was read anew (`error`: compacted, stream lost, ...)
  keepalive_late,        ///< lease `lease` has `duration` left and no renewal answered since a third of its TTL
  session_lost,          ///< the session of lease `lease` ended without being closed (`error`: why)
  lock_acquired,         ///< `name` is held by key `key` (fencing token `revision`) after waiting `duration`
  lock_released,         ///< `name` was released by its holder after holding it for `duration`
  lock_lost,             ///< `name` was held and its key went (session lost, key deleted): `error` says how
  leader_changed,        ///< election `name` has leader `key` (empty: none), with fencing token `revision`
  request_resent,        ///< a `name` request ("Txn", "Range", ...) had no answer from `detail`'s member after
                         ///< `duration` (client_options::resend_after) and was sent again
  endpoints_changed,     ///< the member list changed: requests now go to `detail` (comma-separated)
};

/// The kind's name as spelt in event_kind ("lock_acquired").
std::string_view to_string(event_kind k) noexcept;

/// One thing an operator may want in a log. Fields a kind does not use are empty or zero.
struct event {
  event_kind kind{};   ///< what happened
  std::string name;    ///< lock or election name, member address, stream or watched key
  std::string key;     ///< the lock or leader key, when there is one
  std::string detail;  ///< more words, when there are some
  error_code error;                       ///< why, for failures and losses
  std::int64_t lease = 0;                 ///< the lease concerned
  std::int64_t revision = 0;              ///< a fencing token or store revision (see event_kind)
  std::chrono::milliseconds duration{0};  ///< a wait, a hold or the time left (see event_kind)
};

/// The event as one log line: `lock_acquired name="jobs" key="jobs/694d..." revision=42 duration=12ms`.
std::string to_string(const event& e);

/// client_options::on_event: called on the client's strand (one call at a time, in the order the
/// events happened), never inside a coetcd function. Keep it short; it must not throw.
using event_hook = std::function<void(const event&)>;

}  // namespace coetcd
