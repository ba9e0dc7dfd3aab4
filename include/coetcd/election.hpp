// coetcd::election: leader election laid out as etcd's Go concurrency.Election.
#pragma once

#include <coetcd/session.hpp>

#include <memory>
#include <string>
#include <string_view>

namespace coetcd {

namespace detail {
struct election_state;
}

/// Leader election laid out exactly like etcd's Go concurrency.Election and `etcdctl elect`: each
/// candidate writes `name + "/" + hex(lease)` (its proposal as the value) under its session's
/// lease; the candidate with the oldest create revision leads. Candidates wait in create-revision
/// order, on the same shared watch and local queue view as coetcd's mutex. As there, keys of
/// longer names under `name + "/"` (`name/x/<lease>`) are no candidates: they neither lead nor
/// delay a campaign (Go's election counts them).
///
/// One session is one candidate per name, as in Go: the key is the session's, not the object's.
/// Two election objects of one session on one name share that key, so both lead at once (a
/// campaign of the second finds the key and only proclaims), and a coetcd::mutex of that session
/// and name is granted while they lead (Go's Mutex takes the same key). Use one session per
/// candidate; to exclude callers of one process, campaign once and share that election, or take
/// a mutex of the name from another session.
///
/// The session must outlive the election. One operation at a time per election object.
/// Destroying an election that leads resigns in the background (as a destroyed mutex unlocks);
/// a campaign still pending then gives its proposal up instead of leading.
///
/// Threads: as coetcd::mutex. Initiating functions, the destructor and the accessors
/// (is_leader(), revision(), header(), …) may be called from any thread.
class election {
 public:
  /// An election named `name` under session `s`. Throws boost::system::system_error:
  /// error::empty_key for an empty name, error::session_lost for an empty session.
  election(session& s, std::string_view name);
  /// Takes over the other object; `other` is left empty: its accessors return empty values and
  /// its operations complete with asio::error::bad_descriptor.
  election(election&&) noexcept = default;
  /// Gives up what this object holds and aborts its pending operations, as the destructor does,
  /// then takes over `other`, which is left empty.
  election& operator=(election&& other) noexcept;
  /// Resigns in the background if leading. A pending campaign completes at once with
  /// asio::error::operation_aborted, as a cancelled one does (its proposal is deleted).
  ~election();

  /// Becomes leader with `value` as proposal, waiting as long as others lead before us. When our
  /// key already exists with another value (say, an earlier campaign of this session), the value
  /// is proclaimed. A campaign of a sitting leader only proclaims `value`; when our key is gone
  /// by then, the leadership is lost: it fails with error::session_lost, is_leader() turns
  /// false, and the next campaign starts over with a new key.
  ///
  /// @par Handler signature
  /// `void(error_code)`
  /// @par Errors
  /// error::session_lost (the session ended, or our proposal vanished: deleted by hand, or with
  /// the lease), error::client_closed, the @ref request_errors "request errors" of its txn, the
  /// refusals of the name's watch; asio::error::operation_aborted when cancelled.
  /// @par Cancellation
  /// Terminal, partial, total. The handler does not wait for our proposal's delete: it is
  /// deleted in the background (a txn still on the wire is cleaned up when it completes), and a
  /// later campaign of the session waits for that delete. A cancellation that meets the win
  /// before the handler runs resigns in the background (a sitting leader's campaign stays
  /// leader).
  /// @par Executor
  /// The handler's associated executor (default: the client's); never inside this call.
  /// @par Lifetimes
  /// `value` is copied before this returns. The session must outlive the election. On
  /// destruction of the election, see ~election().
  template <class CompletionToken = detail::default_token>
  auto async_campaign(std::string_view value, CompletionToken&& token = {}) {
    return detail::initiate<void(error_code)>(
        std::forward<CompletionToken>(token), [s = state_](asio::any_completion_handler<void(error_code)> h, std::string v) {
          start_campaign(s, std::move(v), std::move(h));
        }, std::string(value));
  }

  /// Replaces the leader's value, only while we lead.
  ///
  /// @par Handler signature
  /// `void(error_code)`
  /// @par Errors
  /// error::not_leader (we do not lead, or no longer: our key is gone), the
  /// @ref request_errors "request errors".
  /// @par Cancellation
  /// Terminal only (partial and total are ignored), and only before the operation has started
  /// on the client's strand: then nothing is sent and the handler gets
  /// asio::error::operation_aborted. Once started, it runs to its outcome.
  /// @par Executor
  /// The handler's associated executor (default: the client's); never inside this call.
  /// @par Lifetimes
  /// `value` is copied before this returns. The election may be destroyed meanwhile; the
  /// proclaim goes on.
  template <class CompletionToken = detail::default_token>
  auto async_proclaim(std::string_view value, CompletionToken&& token = {}) {
    return detail::initiate<void(error_code)>(
        std::forward<CompletionToken>(token), [s = state_](asio::any_completion_handler<void(error_code)> h, std::string v) {
          start_proclaim(s, std::move(v), std::move(h));
        }, std::string(value));
  }

  /// Gives up leadership (deletes our key, guarded by its create revision). A no-op when not
  /// leader. A delete that fails with an error an outage explains (timed out, endpoints
  /// unreachable, no leader, an auth token to renew: it may have landed, or will pass later)
  /// ends the leadership here all the same, as a failed mutex unlock does: is_leader() is false
  /// when the handler runs with the error, and the delete is retried in the background until it
  /// lands or the session ends (its lease then takes the key); a later campaign of the session
  /// waits for it. A request refused outright (permission denied, say) leaves us leader, so it
  /// can be retried.
  ///
  /// @par Handler signature
  /// `void(error_code)`
  /// @par Errors
  /// The @ref request_errors "request errors": after error::request_timeout,
  /// error::endpoints_unreachable, error::cluster_no_leader, error::invalid_auth_token or gRPC's
  /// UNAVAILABLE or DEADLINE_EXCEEDED no longer leader (the delete goes on), after any other
  /// still leader.
  /// @par Cancellation
  /// Terminal only (partial and total are ignored), and only before the operation has started
  /// on the client's strand: then nothing is sent and the handler gets
  /// asio::error::operation_aborted. Once started, it runs to its outcome.
  /// @par Executor
  /// The handler's associated executor (default: the client's); never inside this call.
  /// @par Lifetimes
  /// The election may be destroyed meanwhile; the resign goes on.
  template <class CompletionToken = detail::default_token>
  auto async_resign(CompletionToken&& token = {}) {
    return detail::initiate<void(error_code)>(
        std::forward<CompletionToken>(token), [s = state_](asio::any_completion_handler<void(error_code)> h) { start_resign(s, std::move(h)); });
  }

  /// The current leader's key and value, read from etcd.
  ///
  /// @par Handler signature
  /// `void(error_code, key_value)`
  /// @par Errors
  /// error::no_leader, the @ref request_errors "request errors".
  /// @par Cancellation
  /// Terminal, partial, total (a read: cancelled, it changed nothing): the read is cancelled and
  /// the handler gets asio::error::operation_aborted.
  /// @par Executor
  /// The handler's associated executor (default: the client's); never inside this call.
  /// @par Lifetimes
  /// The election may be destroyed meanwhile; the read goes on.
  template <class CompletionToken = detail::default_token>
  auto async_leader(CompletionToken&& token = {}) {
    return detail::initiate<void(error_code, key_value)>(
        std::forward<CompletionToken>(token), [s = state_](asio::any_completion_handler<void(error_code, key_value)> h) {
          start_leader(s, std::move(h));
        });
  }

  /// The type of get_executor().
  using executor_type = asio::any_io_executor;
  /// The client's executor, on which handlers run by default (empty for an empty object).
  executor_type get_executor() const noexcept;
  /// The election's name.
  const std::string& name() const noexcept;
  /// Our proposal key: name + "/" + hex(lease).
  const std::string& key() const noexcept;
  /// True between a successful campaign and resign (as far as this process knows): false once
  /// the session counts as lost, its lease's local deadline included (see session::lost()).
  /// async_resign() (or destroying the object) still ends the leadership here, as does a resign
  /// that timed out or found no endpoint (its delete goes on in the background).
  bool is_leader() const noexcept;
  /// Our key's create revision while leader (a fencing token, as for the mutex).
  std::int64_t revision() const noexcept;
  /// Header of the response to our last successful campaign, proclaim or resign (a copy: safe
  /// to read from any thread).
  response_header header() const noexcept;

 private:
  void abandon() noexcept;  // the destructor's work, also done by move assignment
  static void start_campaign(const std::shared_ptr<detail::election_state>&, std::string,
                             asio::any_completion_handler<void(error_code)>);
  static void start_proclaim(const std::shared_ptr<detail::election_state>&, std::string,
                             asio::any_completion_handler<void(error_code)>);
  static void start_resign(const std::shared_ptr<detail::election_state>&, asio::any_completion_handler<void(error_code)>);
  static void start_leader(const std::shared_ptr<detail::election_state>&,
                           asio::any_completion_handler<void(error_code, key_value)>);
  std::shared_ptr<detail::election_state> state_;
};

}  // namespace coetcd
