// Error codes of coetcd: etcd-level conditions (coetcd::error, category "etcd") and raw gRPC
// status codes (category "grpc") for anything the server or transport reports that etcd does not
// name. Every async operation reports failures as a boost::system::error_code of one of these,
// or asio::error::operation_aborted when the operation was cancelled through its slot.
#pragma once

#include <boost/system/error_code.hpp>

#include <iosfwd>
#include <type_traits>

namespace coetcd {

using boost::system::error_code;

/// coetcd's error codes, of etcd_category(). They convert to error_code: test a result with
/// `ec == error::compacted`.
enum class error {
  // client-side input and state
  client_closed = 1,      ///< the client was closed while the operation was pending or before it
  empty_key,              ///< an operation that needs a key (or name) got an empty one
  invalid_argument,       ///< an argument is out of its documented range (see the function)
  invalid_endpoint,       ///< an endpoint string does not parse as [http[s]://]host:port
  tls_file_unreadable,    ///< a CA, certificate or key file is missing or cannot be read
  tls_file_invalid,       ///< a CA, certificate or key file holds no PEM data of the right kind
  endpoints_unreachable,  ///< no endpoint could be connected (refused, no route, TLS handshake, DNS): the request cannot have reached a server
  request_timeout,        ///< the per-request deadline passed after the request may have gone out (a write may have been applied)
  // authentication
  auth_failed,            ///< wrong user name or password
  auth_required,          ///< the server has authentication on and no user was given
  invalid_auth_token,     ///< the server rejected our token (re-authentication also failed)
  auth_not_enabled,       ///< the server has authentication off (the client then sends no token: not returned by it)
  permission_denied,      ///< the authenticated user may not do this
  // server conditions
  lease_not_found,        ///< the lease does not exist (expired or revoked)
  lease_expired,          ///< a kept-alive lease could not be renewed before its deadline
  compacted,              ///< the requested revision was compacted (watch: see compact_revision)
  future_revision,        ///< the requested revision is newer than the store's
  cluster_no_leader,      ///< the member has no raft leader (partitioned or electing)
  too_many_txn_ops,       ///< a txn has more operations than the server allows
  duplicate_key_in_txn,   ///< a txn writes the same key twice
  request_too_large,      ///< the request exceeds the server's size limit
  watch_canceled,         ///< the watcher was cancelled (by cancel() or by the server)
  // coordination primitives
  session_lost,           ///< the session's lease is gone; locks and leadership held under it too
  locked,                 ///< a try found the lock (or the permits) taken, or another caller ahead
  not_locked,             ///< unlock or release through an object that does not hold the lock
  max_hold_exceeded,      ///< with_lock: the body ran longer than the allowed hold time
  not_leader,             ///< proclaim/resign by a candidate that is not the leader
  no_leader,              ///< an election currently has no leader
  permits_mismatch,       ///< semaphore: a holder or waiter of the same name counts other permits
  foreign_key,            ///< a key of the name is not laid out as the recipe lays it out: semaphore: not an acquisition (another kind of lock of the same name); priority_queue: the last item of a priority has no sequence number
  lease_in_use,           ///< session: a live session of this client already keeps the lease to adopt
  // transactions beyond locks
  conflict,               ///< stm: every run of the body conflicted with another writer
  outcome_unknown,        ///< a write went out and no answer came: it may or may not have been applied
  not_a_number,           ///< counter: the key's value is not a decimal 64-bit integer
  key_exists,             ///< barrier: hold found the barrier already held (Go's ErrKeyExists)
  too_many_clients,       ///< double_barrier: more participants entered than its count (Go's ErrTooManyClients)
  snapshot_corrupt,       ///< maintenance: a snapshot's data does not match the SHA-256 its member sent
  alarm_raised,           ///< maintenance: the member answers, but an alarm (NOSPACE, CORRUPT) is raised
};

/// The category of coetcd::error (named "etcd").
const boost::system::error_category& etcd_category() noexcept;
/// gRPC status codes (grpc::StatusCode values) as error codes.
const boost::system::error_category& grpc_category() noexcept;
/// Failures the server explained in words that coetcd has no code for. message() is the
/// server's text and its gRPC status, e.g. "etcdserver: key not found (gRPC INVALID_ARGUMENT)";
/// the error compares equal to error_condition(status, grpc_category()), and grpc_status()
/// gives the status. etcd's own UNAVAILABLEs keep their words here ("etcdserver: leader
/// changed (gRPC UNAVAILABLE)"); gRPC's transport failures (a dropped connection, a refused
/// dial, DEADLINE_EXCEEDED, CANCELLED) stay in grpc_category(). Test a status with grpc_status()
/// or `ec == condition::transient`, not by category.
const boost::system::error_category& server_category() noexcept;
/// The gRPC status of an error of grpc_category() or server_category(); -1 for any other.
int grpc_status(const error_code& ec) noexcept;

/// Kinds of error to test a result against, whatever its category: `ec == condition::transient`.
enum class condition {
  /// The cluster could not answer now and may soon: no member reachable, no leader, the
  /// request's deadline passed, gRPC UNAVAILABLE or DEADLINE_EXCEEDED. A read may be sent
  /// again; a write may have been applied (look before sending it again).
  transient = 1,
};
/// The category of coetcd::condition (named "coetcd-condition").
const boost::system::error_category& condition_category() noexcept;
/// `c` as an error_condition of condition_category().
inline boost::system::error_condition make_error_condition(condition c) noexcept {
  return {static_cast<int>(c), condition_category()};
}

/// `e` as an error_code of etcd_category().
inline error_code make_error_code(error e) noexcept {
  return {static_cast<int>(e), etcd_category()};
}

/// Prints the error's message.
std::ostream& operator<<(std::ostream& os, error e);

}  // namespace coetcd

/// @cond INTERNAL
template <>
struct boost::system::is_error_code_enum<coetcd::error> : std::true_type {};
template <>
struct boost::system::is_error_condition_enum<coetcd::condition> : std::true_type {};
/// @endcond
