// coetcd::election: leader election laid out as etcd's Go concurrency.Election.
#pragma once

#include <coetcd/loss_reason.hpp>
#include <coetcd/session.hpp>
#include <coetcd/txn.hpp>

#include <memory>
#include <string>
#include <string_view>

namespace coetcd {

namespace detail {
struct election_state;
struct leadership_state;
}

/// Leader election laid out exactly like etcd's Go concurrency.Election and `etcdctl elect`: each
/// candidate writes `name + "/" + hex(lease)` (its proposal as the value) under its session's
/// lease; the candidate with the oldest create revision leads. Candidates wait in create-revision
/// order, on the same shared watch and local queue view as coetcd's mutex. As there, keys of
/// longer names under `name + "/"` (`name/x/<lease>`) are no candidates: they neither lead nor
/// delay a campaign (Go's election counts them).
///
/// One session is one candidate per name, as in Go: the key is the session's, not the object's.
/// So a campaign while another of the same session and name is pending or leads (through any
/// election object) fails with asio::error::already_started. A coetcd::mutex of that session and
/// name is granted while it leads (Go's Mutex takes the same key). Use one session per candidate;
/// to exclude callers of one process, campaign once and share the hold, or take a mutex of the
/// name from another session.
///
/// A won campaign hands its caller an election::hold: the leadership, which proclaims, fences and
/// resigns; destroying it resigns in the background. The session must outlive the election and
/// its holds. Destroying the election aborts a pending campaign (its proposal is deleted).
///
/// Threads: as coetcd::mutex. Initiating functions, the destructor and the holds' accessors may be
/// called from any thread.
class election {
 public:
  /// A leadership, handed over by async_campaign: move-only, resigned in the background when
  /// destroyed while leading. It does not point at its election object: destroying or moving the
  /// object leaves it alone.
  class [[nodiscard]] hold {
   public:
    /// The type of get_executor().
    using executor_type = asio::any_io_executor;
    /// Empty: leads nothing; its operations complete with asio::error::bad_descriptor.
    hold() noexcept = default;
    /// @cond INTERNAL
    explicit hold(std::shared_ptr<detail::leadership_state> s) noexcept : state_(std::move(s)) {}
    friend struct detail::access;
    /// @endcond
    /// Takes over `other`'s leadership; `other` is left empty.
    hold(hold&&) noexcept = default;
    /// Resigns this leadership as the destructor does, then takes over `other`'s.
    hold& operator=(hold&& other) noexcept;
    hold(const hold&) = delete;
    hold& operator=(const hold&) = delete;
    /// If still leading: resigns in the background.
    ~hold();

    /// Leading now, as far as this process knows: not empty, not resigned, our key not found gone
    /// by a proclaim, and the session not counted as lost (session::lost()).
    explicit operator bool() const noexcept;
    /// Our key's create revision while leading, else 0: a fencing token, rising with each
    /// leadership of the name.
    std::int64_t fencing_token() const noexcept;
    /// A compare that holds while our key is still the one we won with (its create revision);
    /// never once the leadership is over. Empty: throws boost::system::system_error
    /// (asio::error::bad_descriptor).
    compare fence() const;
    /// Our proposal key: name + "/" + hex(lease).
    const std::string& key() const noexcept;
    /// The lease the key is under (the session's): put keys under it to have them end with the
    /// leadership's session.
    std::int64_t lease() const noexcept;
    /// Header of the response to the campaign, or to the last successful proclaim (a copy: safe
    /// to read from any thread).
    response_header header() const noexcept;
    /// The client's executor, on which handlers run by default (empty when empty).
    executor_type get_executor() const noexcept;

    /// Replaces the leader's value, only while we lead.
    ///
    /// @par Handler signature
    /// `void(error_code)`
    /// @par Errors
    /// error::not_leader (we no longer lead: resigned, or our key is gone; the hold then reports
    /// false), the @ref request_errors "request errors"; asio::error::bad_descriptor for an
    /// empty hold.
    /// @par Cancellation
    /// Terminal only (partial and total are ignored), and only before the operation has started
    /// on the client's strand: then nothing is sent and the handler gets
    /// asio::error::operation_aborted. Once started, it runs to its outcome.
    /// @par Executor
    /// The handler's associated executor (default: the client's); never inside this call.
    /// @par Lifetimes
    /// `value` is copied before this returns. The hold may be destroyed meanwhile; the proclaim
    /// goes on.
    template <class CompletionToken = detail::default_token>
    auto async_proclaim(std::string_view value, CompletionToken&& token = {}) {
      return detail::initiate<void(error_code)>(
          std::forward<CompletionToken>(token),
          [s = state_](asio::any_completion_handler<void(error_code)> h, std::string v) {
            start_proclaim(s, std::move(v), std::move(h));
          },
          std::string(value));
    }
    /// Resigns: deletes our key, guarded by its create revision. A delete that fails with an
    /// error an outage explains (timed out, endpoints unreachable, no leader, an auth token to
    /// renew: it may have landed, or will pass later) ends the leadership here all the same: the
    /// hold is false when the handler runs with the error, and the delete is retried in the
    /// background until it lands or the session ends (its lease then takes the key); a later
    /// campaign of the session waits for it. A request refused outright (permission denied, say)
    /// leaves us leader, so it can be retried.
    ///
    /// @par Handler signature
    /// `void(error_code)`
    /// @par Errors
    /// error::not_locked (resigned already), the @ref request_errors "request errors": after
    /// error::request_timeout, error::endpoints_unreachable, error::cluster_no_leader,
    /// error::invalid_auth_token or gRPC's UNAVAILABLE or DEADLINE_EXCEEDED no longer leader
    /// (the delete goes on), after any other still leader; asio::error::bad_descriptor for an
    /// empty hold.
    /// @par Cancellation
    /// None: the release always runs to its outcome.
    /// @par Executor
    /// The handler's associated executor (default: the client's); never inside this call.
    /// @par Lifetimes
    /// The hold may be destroyed meanwhile; the resign goes on.
    template <class CompletionToken = detail::default_token>
    auto async_release(CompletionToken&& token = {}) {
      return detail::initiate<void(error_code)>(
          std::forward<CompletionToken>(token),
          [s = state_](asio::any_completion_handler<void(error_code)> h) { start_release(s, std::move(h)); });
    }
    /// Completes with success when the leadership is lost: its session lost, closed, orphaned or
    /// destroyed. Any number may be pending.
    ///
    /// @par Handler signature
    /// `void(error_code, loss_reason)`
    /// @par Errors
    /// asio::error::operation_aborted when cancelled, or when the hold is released or destroyed
    /// first; asio::error::bad_descriptor for an empty hold.
    /// @par Cancellation
    /// Terminal, partial, total abandon the wait (asio::error::operation_aborted).
    /// @par Executor
    /// The handler's associated executor (default: the client's); never inside this call.
    template <class CompletionToken = detail::default_token>
    auto async_wait_lost(CompletionToken&& token = {}) {
      return detail::initiate<void(error_code, loss_reason)>(
          std::forward<CompletionToken>(token),
          [s = state_](asio::any_completion_handler<void(error_code, loss_reason)> h) { start_wait_lost(s, std::move(h)); });
    }

   private:
    static void start_proclaim(const std::shared_ptr<detail::leadership_state>&, std::string,
                               asio::any_completion_handler<void(error_code)>);
    static void start_release(const std::shared_ptr<detail::leadership_state>&, asio::any_completion_handler<void(error_code)>);
    static void start_wait_lost(const std::shared_ptr<detail::leadership_state>&,
                                asio::any_completion_handler<void(error_code, loss_reason)>);
    std::shared_ptr<detail::leadership_state> state_;
  };

  /// An election named `name` under session `s`. Throws boost::system::system_error:
  /// error::empty_key for an empty name, error::session_lost for an empty session.
  election(session& s, std::string_view name);
  /// Takes over the other object; `other` is left empty: its accessors return empty values and
  /// its operations complete with asio::error::bad_descriptor. Holds are not affected.
  election(election&&) noexcept = default;
  /// Aborts this object's pending operations, as the destructor does, then takes over `other`,
  /// which is left empty.
  election& operator=(election&& other) noexcept;
  /// A pending campaign completes at once with asio::error::operation_aborted, as a cancelled one
  /// does (its proposal is deleted). Holds are not affected.
  ~election();

  /// Becomes leader with `value` as proposal, waiting as long as others lead before us, and hands
  /// the caller the leadership. When our key already exists with another value (a campaign of
  /// an earlier session on the same lease, say), the value is proclaimed.
  ///
  /// @par Handler signature
  /// `void(error_code, election::hold)`: the hold is empty on error.
  /// @par Errors
  /// asio::error::already_started (a campaign of this session and name is pending or leads),
  /// error::session_lost (the session ended, or our proposal vanished: deleted by hand, or with
  /// the lease), error::client_closed, the @ref request_errors "request errors" of its txn, the
  /// refusals of the name's watch; asio::error::operation_aborted when cancelled or when the
  /// election is destroyed first.
  /// @par Cancellation
  /// Terminal, partial, total. The handler does not wait for our proposal's delete: it is
  /// deleted in the background (a txn still on the wire is cleaned up when it completes), and a
  /// later campaign of the session waits for that delete. A cancellation that meets the win
  /// before the handler runs resigns in the background.
  /// @par Executor
  /// The handler's associated executor (default: the client's); never inside this call.
  /// @par Lifetimes
  /// `value` is copied before this returns. The session must outlive the election and the hold.
  /// On destruction of the election, see ~election().
  template <class CompletionToken = detail::default_token>
  auto async_campaign(std::string_view value, CompletionToken&& token = {}) {
    return detail::initiate<void(error_code, hold)>(
        std::forward<CompletionToken>(token),
        [s = state_](asio::any_completion_handler<void(error_code, hold)> h, std::string v) {
          start_campaign(s, std::move(v), std::move(h));
        },
        std::string(value));
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
  /// The session's proposal key: name + "/" + hex(lease).
  const std::string& key() const noexcept;

 private:
  void abandon() noexcept;  // the destructor's work, also done by move assignment
  static void start_campaign(const std::shared_ptr<detail::election_state>&, std::string,
                             asio::any_completion_handler<void(error_code, hold)>);
  static void start_leader(const std::shared_ptr<detail::election_state>&,
                           asio::any_completion_handler<void(error_code, key_value)>);
  std::shared_ptr<detail::election_state> state_;
};

}  // namespace coetcd
