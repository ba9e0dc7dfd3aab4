// The error categories (etcd, gRPC, server text, conditions) and their readable messages.
#include <coetcd/error.hpp>

#include <map>
#include <mutex>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

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
      case error::locked: return "lock is taken: another caller holds it (or the permits asked for) or waits ahead";
      case error::not_locked: return "lock is not held through this object";
      case error::max_hold_exceeded: return "lock held longer than its maximum hold time";
      case error::not_leader: return "not the election leader";
      case error::no_leader: return "election has no leader";
      case error::permits_mismatch:
        return "semaphore permits differ: another holder or waiter of this name counts a different number";
      case error::foreign_key:
        return "a key under the name is not laid out as the recipe lays it out: not one of a semaphore's "
               "acquisitions (a mutex, election or rw_mutex of the same name?), or a priority queue's last item with "
               "no sequence number";
      case error::lease_in_use:
        return "a live session of this client already keeps this lease: share that session instead of adopting "
               "the lease again (two would queue apart on one lock key, and both would hold)";
      case error::conflict:
        return "every run of the transaction conflicted with another writer (stm_options::max_attempts)";
      case error::outcome_unknown:
        return "the write went out and no answer came: it may or may not have been applied (not sent again)";
      case error::not_a_number:
        return "the key's value is not a decimal 64-bit integer";
      case error::key_exists:
        return "the key already exists (the barrier is already held)";
      case error::too_many_clients:
        return "more participants entered the double barrier than its count";
      case error::snapshot_corrupt:
        return "the snapshot's data does not match the SHA-256 its member appended (file not kept)";
      case error::alarm_raised:
        return "an alarm is raised in the cluster (NOSPACE or CORRUPT; see maintenance::async_alarm_list)";
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

/// Each distinct (status, server text) gets a number, for ever: an error_code carries only an
/// int. A server says few distinct things; past `max_messages` the text is dropped.
struct server_messages {
  static constexpr std::size_t max_messages = 4096;
  std::mutex m;
  std::vector<std::pair<int, std::string>> all;
  std::map<std::pair<int, std::string>, int> index;

  // Numbered from 1: an error_code of value 0 is no error.
  std::pair<int, std::string> at(int ev) {
    std::lock_guard lock(m);
    if (ev < 1 || static_cast<std::size_t>(ev) > all.size()) return {-1, {}};
    return all[static_cast<std::size_t>(ev - 1)];
  }
  int status_at(int ev) noexcept {
    std::lock_guard lock(m);
    if (ev < 1 || static_cast<std::size_t>(ev) > all.size()) return -1;
    return all[static_cast<std::size_t>(ev - 1)].first;
  }
};

// Never destroyed: a completion-queue thread may still name an error while statics go at exit.
server_messages& messages() {
  static auto* s = new server_messages;
  return *s;
}

class server_category_impl final : public boost::system::error_category {
 public:
  const char* name() const noexcept override { return "etcd-server"; }
  std::string message(int ev) const override {
    auto [status, text] = messages().at(ev);
    return text + " (" + grpc_category().message(status) + ")";
  }
  boost::system::error_condition default_error_condition(int ev) const noexcept override {
    return {messages().status_at(ev), grpc_category()};
  }
};

class condition_category_impl final : public boost::system::error_category {
 public:
  const char* name() const noexcept override { return "coetcd-condition"; }
  std::string message(int ev) const override {
    if (ev == static_cast<int>(condition::transient)) return "transient: the cluster may answer if asked again";
    return "unknown coetcd condition " + std::to_string(ev);
  }
  bool equivalent(const error_code& code, int cond) const noexcept override {
    if (cond != static_cast<int>(condition::transient)) return false;
    if (code == error::endpoints_unreachable || code == error::request_timeout || code == error::cluster_no_leader)
      return true;
    const int status = grpc_status(code);
    return status == 14 || status == 4;  // UNAVAILABLE, DEADLINE_EXCEEDED
  }
};

}  // namespace

const boost::system::error_category& condition_category() noexcept {
  static const condition_category_impl c;
  return c;
}

const boost::system::error_category& server_category() noexcept {
  static const server_category_impl c;
  return c;
}

int grpc_status(const error_code& ec) noexcept {
  if (ec.category() == grpc_category()) return ec.value();
  if (ec.category() == server_category()) return messages().status_at(ec.value());
  return -1;
}

namespace detail {
error_code server_error(int status, const std::string& text) {
  auto& s = messages();
  std::lock_guard lock(s.m);
  auto key = std::pair(status, text);
  if (auto it = s.index.find(key); it != s.index.end()) return {it->second, server_category()};
  if (s.all.size() >= server_messages::max_messages) return {status, grpc_category()};
  s.all.push_back(key);
  int ev = static_cast<int>(s.all.size());
  s.index.emplace(std::move(key), ev);
  return {ev, server_category()};
}
}  // namespace detail

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
