#include <coetcd/error.hpp>

#include <ostream>
#include <string>

namespace coetcd {
namespace {

class etcd_category_impl final : public boost::system::error_category {
 public:
  const char* name() const noexcept override { return "etcd"; }
  std::string message(int ev) const override {
    switch (static_cast<error>(ev)) {
      case error::client_closed: return "the etcd client is closed";
      case error::empty_key: return "empty key or name: this operation needs a non-empty one";
      case error::invalid_argument: return "invalid argument";
      case error::invalid_endpoint: return "endpoint does not parse: expected [http[s]://]host:port";
      case error::tls_file_unreadable: return "TLS file (CA, certificate or key) is missing or unreadable";
      case error::tls_file_invalid: return "TLS file holds no PEM data of the expected kind";
      case error::endpoints_unreachable:
        return "no etcd endpoint could be reached (connection refused, no route, TLS handshake or DNS failure)";
      case error::request_timeout: return "etcd request timed out";
      case error::auth_failed: return "etcd authentication failed: invalid user name or password";
      case error::auth_required: return "etcd requires authentication: no user name was given";
      case error::invalid_auth_token: return "etcd rejected the auth token";
      case error::auth_not_enabled: return "credentials given but etcd authentication is not enabled";
      case error::permission_denied: return "etcd permission denied";
      case error::lease_not_found: return "etcd lease not found (expired or revoked)";
      case error::lease_expired: return "lease could not be renewed before its TTL ran out";
      case error::compacted: return "requested revision has been compacted";
      case error::future_revision: return "requested revision is a future revision";
      case error::cluster_no_leader: return "etcd member has no raft leader";
      case error::too_many_txn_ops: return "too many operations in one etcd txn";
      case error::duplicate_key_in_txn: return "duplicate key written in one etcd txn";
      case error::request_too_large: return "etcd request is too large";
      case error::watch_canceled: return "watch canceled";
      case error::session_lost: return "session lost: its lease expired or was revoked";
      case error::locked: return "mutex is locked by another session";
      case error::not_locked: return "mutex is not held by this session";
      case error::max_hold_exceeded: return "lock held longer than its maximum hold time";
      case error::not_leader: return "not the election leader";
      case error::no_leader: return "election has no leader";
    }
    return "unknown etcd error " + std::to_string(ev);
  }
};

class grpc_category_impl final : public boost::system::error_category {
 public:
  const char* name() const noexcept override { return "grpc"; }
  std::string message(int ev) const override {
    static const char* const names[] = {
        "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
        "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
        "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
        "UNAUTHENTICATED"};
    if (ev >= 0 && ev < static_cast<int>(std::size(names))) return std::string("gRPC ") + names[ev];
    return "gRPC status " + std::to_string(ev);
  }
};

}  // namespace

const boost::system::error_category& etcd_category() noexcept {
  static const etcd_category_impl c;
  return c;
}
const boost::system::error_category& grpc_category() noexcept {
  static const grpc_category_impl c;
  return c;
}

std::ostream& operator<<(std::ostream& os, error e) { return os << make_error_code(e).message(); }

}  // namespace coetcd
