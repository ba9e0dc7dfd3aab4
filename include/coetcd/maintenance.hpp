// coetcd::maintenance: etcd's Maintenance service and endpoint health (status, alarms,
// defragment, hashes, leader moves, snapshots).
#pragma once

#include <coetcd/client.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace coetcd {

/// What one member says of itself (`etcdctl endpoint status`).
struct endpoint_status {
  std::string endpoint;                 ///< the endpoint asked, as given
  response_header header;               ///< the response's header (member_id: who answered)
  std::string version;                  ///< the server's version, e.g. "3.4.23"
  std::int64_t db_size = 0;             ///< bytes of the backend database file
  std::int64_t db_size_in_use = 0;      ///< bytes of it in use (the rest a defragment gives back)
  std::uint64_t leader = 0;             ///< the raft leader's member ID as this member knows it (0: none)
  std::uint64_t raft_index = 0;         ///< this member's raft log index
  std::uint64_t raft_term = 0;          ///< this member's raft term
  std::uint64_t raft_applied_index = 0; ///< the last index applied to its store
  bool is_learner = false;              ///< this member is a learner
  std::vector<std::string> errors;      ///< alarms and other errors the member reports
};

/// An alarm's kind, as etcd numbers them.
enum class alarm_type : int {
  none = 0,     ///< no alarm (in a disarm: every alarm of the member or members named)
  nospace = 1,  ///< the backend reached --quota-backend-bytes: writes are refused until disarmed
  corrupt = 2,  ///< the member's store differs from the others'
};

/// One raised alarm.
struct alarm {
  std::uint64_t member_id = 0;        ///< the member that raised it
  alarm_type type = alarm_type::none; ///< what it is
};

/// One member's health, as `etcdctl endpoint health` (3.5) judges it: it answered a linearizable
/// read, which needs a raft leader and a quorum, and no alarm is raised.
struct endpoint_health {
  std::string endpoint;               ///< the endpoint asked, as given
  bool healthy = false;               ///< the read was answered (or refused for permission only) and no alarm is raised
  std::chrono::microseconds took{0};  ///< how long the read took
  error_code error;                   ///< why not healthy: the read's error, or error::alarm_raised (empty when healthy)
  std::vector<alarm> alarms;          ///< the alarms raised in the cluster, as this member lists them
};

/// The answer to maintenance::async_alarm_list and async_alarm_disarm.
struct alarm_result {
  response_header header;     ///< the response's header
  std::vector<alarm> alarms;  ///< alarms raised (list) or just disarmed (disarm)
};

/// The answer to maintenance::async_hash_kv.
struct hash_kv_result {
  response_header header;               ///< the response's header
  std::uint32_t hash = 0;               ///< hash of the keyspace up to the revision asked
  std::int64_t compact_revision = 0;    ///< the member's compacted revision
};

/// Where maintenance::async_snapshot reads from. Trivially destructible, as every options
/// struct here (a braced temporary of one is safe inside a co_await on g++ 12:
/// docs/how-it-works.md); the progress callback is a parameter of its own.
struct snapshot_options {
  /// The member to read from (one of the client's endpoints or any other member's client URL);
  /// empty: whichever member the client's balancer picks. Copied before async_snapshot returns.
  std::string_view endpoint;
};
static_assert(std::is_trivially_destructible_v<snapshot_options>);

/// Told after each chunk of a snapshot the bytes received so far and the expected total. Called
/// on the client's strand; must not block.
using snapshot_progress = std::function<void(std::uint64_t received, std::uint64_t total)>;

/// The answer to maintenance::async_snapshot.
struct snapshot_result {
  response_header header;  ///< the first response's header (member_id: who sent it)
  std::uint64_t size = 0;  ///< bytes written to the file, the trailing SHA-256 included
};

namespace detail {
void start_status(const std::shared_ptr<client_impl>&, std::string, handler<endpoint_status>);
void start_health(const std::shared_ptr<client_impl>&, std::string, handler<endpoint_health>);
void start_alarm(const std::shared_ptr<client_impl>&, bool, std::uint64_t, alarm_type, handler<alarm_result>);
void start_defragment(const std::shared_ptr<client_impl>&, std::string, handler<response_header>);
void start_hash_kv(const std::shared_ptr<client_impl>&, std::string, std::int64_t, handler<hash_kv_result>);
void start_move_leader(const std::shared_ptr<client_impl>&, std::uint64_t, handler<response_header>);
void start_snapshot(const std::shared_ptr<client_impl>&, std::string path, std::string endpoint, snapshot_progress,
                    handler<snapshot_result>);
}  // namespace detail

/// Operating the members of the cluster a client talks to (Go's clientv3.Maintenance, and
/// `etcdctl endpoint health`). A cheap handle: it shares the client's connection and may be
/// copied.
///
/// Calls about one member (status, health, defragment, hash_kv, snapshot) take its endpoint, in
/// the form of client_options::endpoints ("host:port", "http://..." or "https://..."). It may
/// be one the client was not made with; the client's TLS settings and user are used for it, and
/// one connection per endpoint is kept until the client closes.
///
/// Every function is an Asio initiating function with the client's rules (see client): the
/// handler runs on its associated executor (default: the client's), never inside the call, and
/// the client may be closed meanwhile (error::client_closed). Any number of operations may be
/// pending at once.
///
/// @par Errors
/// error::invalid_endpoint for an endpoint that does not parse; etcd's own refusals
/// (server_category(), e.g. "etcdserver: not leader"); the @ref request_errors "request errors".
/// @par Cancellation
/// Reads (status, health, alarm list, hash_kv) and the snapshot: terminal, partial and total.
/// Changes (disarm, defragment, move leader): terminal and partial; a request for total alone
/// is ignored.
class maintenance {
 public:
  /// A handle on `c`'s cluster; `c` must outlive the operations started through it.
  /// Made from an empty (moved-from) client, the handle is empty: get_executor() is empty and
  /// its operations complete with asio::error::bad_descriptor.
  explicit maintenance(client& c) : impl_(detail::access::impl(c)) {}

  /// The type of get_executor().
  using executor_type = client::executor_type;
  /// The client's executor, on which handlers run by default (empty for an empty handle).
  executor_type get_executor() const noexcept;

  /// What the member at `endpoint` says of itself. Answered without a raft leader too.
  ///
  /// @par Handler signature
  /// `void(error_code, endpoint_status)`
  template <class CompletionToken = detail::default_token>
  auto async_status(std::string endpoint, CompletionToken&& token = {}) {
    return detail::initiate<void(error_code, endpoint_status)>(
        std::forward<CompletionToken>(token),
        [i = impl_](detail::handler<endpoint_status> h, std::string e) { detail::start_status(i, std::move(e), std::move(h)); },
        std::move(endpoint));
  }

  /// Whether the member at `endpoint` answers a linearizable read (which needs a leader and a
  /// quorum) within the request timeout, and lists no raised alarm. An unhealthy member is not
  /// an error: the handler's error_code is set only when the question could not be asked (bad
  /// endpoint, closed client, cancelled).
  ///
  /// @par Handler signature
  /// `void(error_code, endpoint_health)`
  template <class CompletionToken = detail::default_token>
  auto async_health(std::string endpoint, CompletionToken&& token = {}) {
    return detail::initiate<void(error_code, endpoint_health)>(
        std::forward<CompletionToken>(token),
        [i = impl_](detail::handler<endpoint_health> h, std::string e) { detail::start_health(i, std::move(e), std::move(h)); },
        std::move(endpoint));
  }

  /// The alarms raised in the cluster.
  ///
  /// @par Handler signature
  /// `void(error_code, alarm_result)`
  template <class CompletionToken = detail::default_token>
  auto async_alarm_list(CompletionToken&& token = {}) {
    return detail::initiate<void(error_code, alarm_result)>(
        std::forward<CompletionToken>(token), [i = impl_](detail::handler<alarm_result> h) {
          detail::start_alarm(i, false, 0, alarm_type::none, std::move(h));
        });
  }

  /// Disarms `type` raised by `member_id`; member 0 and alarm_type::none disarm every alarm,
  /// as `etcdctl alarm disarm` does. A NOSPACE alarm comes back at the next write unless space
  /// was freed first (compact, then defragment every member).
  ///
  /// @par Handler signature
  /// `void(error_code, alarm_result)`
  template <class CompletionToken = detail::default_token>
  auto async_alarm_disarm(std::uint64_t member_id = 0, alarm_type type = alarm_type::none, CompletionToken&& token = {}) {
    return detail::initiate<void(error_code, alarm_result)>(
        std::forward<CompletionToken>(token),
        [i = impl_](detail::handler<alarm_result> h, std::uint64_t m, alarm_type t) {
          detail::start_alarm(i, true, m, t, std::move(h));
        },
        member_id, type);
  }
  /// async_alarm_disarm(0, alarm_type::none, token): disarms every alarm. (No form takes a
  /// member alone: etcd disarms nothing for a member with alarm_type::none.)
  template <asio::completion_token_for<void(error_code, alarm_result)> CompletionToken>
  auto async_alarm_disarm(CompletionToken&& token) {
    return async_alarm_disarm(0, alarm_type::none, std::forward<CompletionToken>(token));
  }

  /// Defragments the backend of the member at `endpoint`, giving free pages back to the file
  /// system. The member answers nothing else meanwhile; run it on one member at a time.
  ///
  /// @par Handler signature
  /// `void(error_code, response_header)`
  template <class CompletionToken = detail::default_token>
  auto async_defragment(std::string endpoint, CompletionToken&& token = {}) {
    return detail::initiate<void(error_code, response_header)>(
        std::forward<CompletionToken>(token),
        [i = impl_](detail::handler<response_header> h, std::string e) { detail::start_defragment(i, std::move(e), std::move(h)); },
        std::move(endpoint));
  }

  /// The hash of the keyspace of the member at `endpoint` up to `revision` (0: the latest), to
  /// compare members with each other.
  ///
  /// @par Handler signature
  /// `void(error_code, hash_kv_result)`
  template <class CompletionToken = detail::default_token>
  auto async_hash_kv(std::string endpoint, std::int64_t revision = 0, CompletionToken&& token = {}) {
    return detail::initiate<void(error_code, hash_kv_result)>(
        std::forward<CompletionToken>(token),
        [i = impl_](detail::handler<hash_kv_result> h, std::string e, std::int64_t r) {
          detail::start_hash_kv(i, std::move(e), r, std::move(h));
        },
        std::move(endpoint), revision);
  }
  /// async_hash_kv(endpoint, 0, token): the hash at the latest revision.
  template <asio::completion_token_for<void(error_code, hash_kv_result)> CompletionToken>
  auto async_hash_kv(std::string endpoint, CompletionToken&& token) {
    return async_hash_kv(std::move(endpoint), 0, std::forward<CompletionToken>(token));
  }

  /// Hands raft leadership to the voting member `target_id`. Only the leader can do this, so
  /// the request is sent to the leader's client URL (from the member list), whichever endpoint
  /// the client was made with.
  ///
  /// @par Handler signature
  /// `void(error_code, response_header)`
  template <class CompletionToken = detail::default_token>
  auto async_move_leader(std::uint64_t target_id, CompletionToken&& token = {}) {
    return detail::initiate<void(error_code, response_header)>(
        std::forward<CompletionToken>(token),
        [i = impl_](detail::handler<response_header> h, std::uint64_t t) { detail::start_move_leader(i, t, std::move(h)); },
        target_id);
  }

  /// Streams a snapshot of a member's backend into the file `path`. The data goes to
  /// `path` + ".part" and is renamed to `path` only once every byte is in and the SHA-256 the
  /// member appends matches the data (error::snapshot_corrupt if not; the part file is then
  /// removed). The file restores with `etcdctl snapshot restore` (3.4) or `etcdutl snapshot
  /// restore` (3.5). No request deadline applies: a large database takes as long as it takes;
  /// cancel to stop.
  ///
  /// @par Handler signature
  /// `void(error_code, snapshot_result)`
  /// @par Errors
  /// error::snapshot_corrupt; a file error of boost::system's generic category (the file could
  /// not be written); the request errors.
  /// @par Lifetimes
  /// `path`, `options.endpoint` and `progress` are copied before this returns. In a coroutine on
  /// g++ 12, name a progress lambda that captures by value before the co_await
  /// (docs/how-it-works.md).
  template <class CompletionToken = detail::default_token>
  auto async_snapshot(std::string path, snapshot_options options, snapshot_progress progress, CompletionToken&& token = {}) {
    return detail::initiate<void(error_code, snapshot_result)>(
        std::forward<CompletionToken>(token),
        [i = impl_](detail::handler<snapshot_result> h, std::string p, std::string e, snapshot_progress pr) {
          detail::start_snapshot(i, std::move(p), std::move(e), std::move(pr), std::move(h));
        },
        std::move(path), std::string(options.endpoint), std::move(progress));
  }
  /// async_snapshot(path, options, {}, token): no progress reports.
  template <class CompletionToken = detail::default_token>
  auto async_snapshot(std::string path, snapshot_options options = {}, CompletionToken&& token = {}) {
    return async_snapshot(std::move(path), options, snapshot_progress(), std::forward<CompletionToken>(token));
  }
  /// async_snapshot(path, {}, token).
  template <asio::completion_token_for<void(error_code, snapshot_result)> CompletionToken>
  auto async_snapshot(std::string path, CompletionToken&& token) {
    return async_snapshot(std::move(path), snapshot_options{}, std::forward<CompletionToken>(token));
  }

 private:
  std::shared_ptr<detail::client_impl> impl_;
};

}  // namespace coetcd
