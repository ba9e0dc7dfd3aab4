// client_options: what a client connects to (endpoints, TLS, credentials) and how.
#pragma once

#include <coetcd/event.hpp>
#include <coetcd/span.hpp>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace coetcd {

/// TLS settings. Empty `ca_file` trusts the system roots. `cert_file` and `key_file` together
/// enable client-certificate (mutual) TLS. Files are read when the client is constructed.
struct tls_options {
  std::string ca_file;    ///< PEM file of the CA certificates to trust (empty: the system roots)
  std::string cert_file;  ///< PEM file of the client certificate (with `key_file`: mutual TLS)
  std::string key_file;   ///< PEM file of the client certificate's private key
};

/// How gRPC's completions reach the event loop (see client_options::completions).
enum class completion_mode {
  /// A thread of the client blocks on gRPC's completion queue and posts each completion to the
  /// event loop: no CPU while waiting, a cross-thread wake-up per reply.
  thread,
  /// While unary requests are in flight (and for `poll_linger` after the last reply), the event
  /// loop's own thread polls the completion queue between its other handlers, so a reply costs
  /// no wake-up. That thread is busy for the whole round trip of every request: it trades CPU
  /// for latency. Idle, the client thread takes over again and nothing spins.
  poll,
  /// `poll` where it pays, `thread` elsewhere (the default). The loop polls while at most
  /// four unary requests are in flight and replies have been coming back within a millisecond
  /// (a moving average of the last round trips): there a cross-thread wake-up is a large part of
  /// each round trip. With more requests in flight the loop is rarely idle and takes replies in
  /// batches, and across a slow network a wake-up is a small part of the wait, so it blocks
  /// instead. client_stats::replies_polled counts the replies it polled.
  adaptive,
};

/// What a client connects to and how (see client::client).
struct client_options {
  /// Cluster members as host:port, http://host:port or https://host:port. Requests go to any
  /// member that is up; a dead member does not stop the client while another one answers.
  std::vector<std::string> endpoints{"127.0.0.1:2379"};
  /// Deadline of each unary request, including the time to connect. An unreachable cluster
  /// fails requests with error::endpoints_unreachable when it passes.
  std::chrono::milliseconds request_timeout{std::chrono::seconds(10)};
  /// A read, or a release of a lock, rw_mutex, semaphore or election key (a delete guarded by
  /// the key's create revision), still unanswered after this long is cancelled and sent again to
  /// the next member, within `request_timeout`: at most twice, each wait twice the one before.
  /// etcd 3.4 answers a write that a follower forwarded to a leader killed a moment later only
  /// after its own 7 s timeout; resent, the lock passes on once the new leader is up (1-3 s).
  /// Puts are never resent this way (a late copy would re-create a released key). Zero: never.
  /// Keep it above your slowest normal request (a write that waits for an fsync).
  std::chrono::milliseconds resend_after{std::chrono::seconds(2)};
  /// A namespace for this client (Go's clientv3/namespace): every key it sends (keys, range
  /// ends, watches, txn compares and operations, and so the keys of its sessions' locks,
  /// elections and queues) is put under this prefix, and the prefix is taken off every key that
  /// comes back. "\0" as a range end ("every key from here on") ends at the namespace's end,
  /// and an empty key with `prefix` or `from_key` (get, delete, watch, cache) is the whole
  /// namespace. A lease's key list shows only the keys inside the namespace. Lease IDs,
  /// revisions and the cluster's maintenance calls are not namespaced. A mutex named
  /// "job" in namespace "tenant/" holds "tenant/job/<lease>", as Go's concurrency.Mutex on a
  /// namespaced client does. Empty (the default): keys as they are.
  std::string key_prefix;
  /// Every this long the client reads the member list and, when the voting members' client URLs
  /// differ from the endpoints it uses, moves to those (Go's AutoSyncInterval): members added
  /// later are used and removed ones dropped, without a restart. Requests already on the wire
  /// finish where they are; streams move when they next reopen. Zero (the default): the
  /// endpoints stay as given. client::async_sync_endpoints does one such step on demand.
  std::chrono::milliseconds auto_sync_interval{0};
  /// TLS for every endpoint (also implied by https:// endpoints, then with system roots).
  std::optional<tls_options> tls;
  /// Authentication. When `user` is non-empty the client authenticates before its first request
  /// and again whenever the server reports the token invalid or stale.
  std::string user;
  /// Password of `user`.
  std::string password;
  /// HTTP/2 keepalive pings on the connection, so a dead peer is detected while streams idle.
  std::chrono::milliseconds keepalive_time{std::chrono::seconds(10)};
  /// How long a keepalive ping may go unanswered before the connection counts as dead.
  std::chrono::milliseconds keepalive_timeout{std::chrono::seconds(5)};
  /// Told of connections, stream reopenings, watch resumptions, late keepalives, lost sessions,
  /// lock acquisitions, releases and losses, and leader changes (see event.hpp). Called on the
  /// client's strand, never inside a coetcd call; empty (the default) costs nothing.
  event_hook on_event;
  /// Told of the start and end of each RPC attempt and lock wait (see span.hpp), with the
  /// context a caller gave the operation (with_span_context). Empty (the default): no span is
  /// made.
  span_hooks spans;
  /// See completion_mode. `adaptive` polls only for short round trips with few requests in flight;
  /// `thread` never spends CPU waiting; `poll` always polls while a request is out.
  completion_mode completions = completion_mode::adaptive;
  /// How long `poll` and `adaptive` keep polling after the last reply: a request sent within it finds the loop
  /// polling still, and skips the hand-over (two wake-ups).
  std::chrono::microseconds poll_linger{200};
  /// Turns Abseil's deadlock detection off for the whole process when the client is created
  /// (absl::SetMutexDeadlockDetectionMode(kIgnore)), and leaves it off: Abseil has no per-mutex
  /// switch, and no client turns it back on. Off by default: a client leaves process-wide state
  /// alone. Why one might: Debian's Abseil is built without NDEBUG, so each lock and unlock of an
  /// absl::Mutex, gRPC's included, also records lock order in a process-wide graph under a global
  /// lock (about 1.5% of a busy client's CPU samples, GraphCycles), and a cycle found in it aborts
  /// the process (Abseil's default), which gRPC's own locking has been reported to trigger in
  /// some gRPC versions; a release build of Abseil has the check off already. Leave it false if your
  /// program, or a library in it, relies on Abseil's deadlock reports. (Earlier versions turned
  /// it off unless `keep_abseil_deadlock_detection` was set; that field is gone.)
  bool turn_off_abseil_deadlock_detection = false;
};

}  // namespace coetcd
