// coetcd::leader: be leader whenever possible, campaigning again on a fresh session after each loss.
#pragma once

#include <coetcd/election.hpp>
#include <coetcd/session.hpp>
#include <coetcd/txn.hpp>

#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/system_executor.hpp>
#include <boost/system/system_error.hpp>

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace coetcd {

/// Options of a leader.
struct leader_options {
  /// The proposal each term campaigns with: what `etcdctl elect -l` and election::async_leader
  /// show (an address, say).
  std::string value;
  /// TTL of each term's session: how long a leader that stopped answering (crashed, paused, cut
  /// off) keeps the name before the next candidate leads. 60 s, as a session's (Go's default):
  /// a shorter TTL loses terms to a paused process more often; set 10 s, say, for a faster
  /// fail-over.
  std::chrono::seconds ttl{60};
  /// Pause after the first failed attempt (a session that could not be made, a campaign that
  /// failed); it doubles on each further failure up to retry_max, each drawn from 0.5x to 1.5x.
  /// A term whose body returned is followed by a new campaign at once; a term lost, after a
  /// pause of retry_min (an outage may be under way). At least 1 ms.
  std::chrono::milliseconds retry_min{100};
  /// Longest pause between failed attempts.
  std::chrono::milliseconds retry_max{5000};
  /// When the body returns: true (Curator's autoRequeue) resigns and campaigns again; false
  /// resigns and completes async_run.
  bool requeue = true;
};

/// A change of a leader's state, read with leader::async_next_event.
struct leader_event {
  /// What happened.
  enum class kind {
    elected,  ///< a term began: `fencing_token` names it
    lost,     ///< the term of `fencing_token` ended, for the reason in `why` (empty: the body returned)
    failed,   ///< an attempt failed (`why`); the next one follows after a pause
    stopped   ///< async_run completed (`why`: its error, empty when the body returned with requeue false)
  };
  kind what = kind::failed;  ///< what happened
  std::int64_t fencing_token = 0;  ///< the term's fencing token, its key's create revision (elected, lost)
  error_code why;             ///< why a term ended or an attempt failed
};

namespace detail {
struct leader_state;
using leader_body = std::function<asio::awaitable<void>(election::hold&)>;
asio::any_io_executor leader_executor(const std::shared_ptr<leader_state>&);
asio::awaitable<void> run_leader(std::shared_ptr<leader_state>, leader_body);
void start_leader_next(const std::shared_ptr<leader_state>&, handler<leader_event>);
}  // namespace detail

/// Leadership that heals itself (Curator's LeaderSelector with autoRequeue): while async_run
/// runs, the leader campaigns on a fresh session whenever it does not lead, runs the body for
/// each term, and cancels the body the moment the term ends (the session lost: revoked, expired,
/// not renewed in time; or our key deleted). Keys are those of coetcd::election and Go's
/// concurrency.Election, so `etcdctl elect` sees it and waits behind it.
///
/// Its state lives on a strand of the client's executor. Destroying the leader stops a running
/// async_run (as terminal cancellation does); the client must outlive the leader.
///
/// Threads: initiating functions, the destructor and the accessors may be called from any thread.
class leader {
 public:
  /// A leader of the election `name` on client `c`. Throws boost::system::system_error:
  /// error::empty_key for an empty name, error::invalid_argument for a ttl below 1 s, retry_min
  /// below 1 ms or above retry_max, error::client_closed for a moved-from client (a closed one: async_run completes with it).
  leader(client& c, std::string_view name, leader_options options = {});
  /// Takes over the other leader; `other` is left empty (its operations complete with
  /// asio::error::bad_descriptor).
  leader(leader&&) noexcept = default;
  /// Stops this leader as the destructor does, then takes over `other`.
  leader& operator=(leader&& other) noexcept;
  /// Stops a running async_run: its body is cancelled, the term's session closed (its key goes
  /// with the lease), and its handler gets asio::error::operation_aborted.
  ~leader();

  /// Campaigns, leads and campaigns again, until cancelled, stopped, or a failure no retry can
  /// mend. `body(election::hold& term)` returns asio::awaitable<void> and runs once per term on
  /// the leader's strand; it must end when cancelled (as a with_lock body): until it does, the
  /// term's session is kept (is_leader() is false and `lost` is told at once, but the key stays).
  /// The term is the leader's: the body may proclaim, read `term.fencing_token()`, guard writes
  /// with `txn().when(term.fence())` (a write of an ended term is refused by etcd) and put keys
  /// under `term.lease()` (they go with the term), but not move the hold away. Releasing it ends
  /// the term: the body is then cancelled, as when the key is deleted.
  ///
  /// Like with_lock and stm, async_run runs a body of the user's, so it completes as
  /// asio::co_spawn does: the body's own exception reaches the handler unchanged.
  ///
  /// @par Handler signature
  /// `void(std::exception_ptr)`, as asio::co_spawn's. Null: the body returned with
  /// options.requeue false. Otherwise a boost::system::system_error: error::client_closed,
  /// error::auth_failed, error::auth_required, error::permission_denied (not retried); asio::error::operation_aborted (cancelled or the
  /// leader destroyed); asio::error::already_started (another async_run of this leader runs);
  /// asio::error::bad_descriptor (an empty leader). Or the exception the body threw, once its
  /// term is resigned.
  /// @par Cancellation
  /// Terminal: the body is cancelled, the term's session closed (its key deleted with the
  /// lease; if the server cannot be reached, the lease expires after its TTL), then the handler
  /// runs with operation_aborted.
  /// @par Executor
  /// The body runs on the leader's strand; the handler on its associated executor; never
  /// inside this call.
  /// @par Lifetimes
  /// The body is moved in and lives until the handler runs. The leader may be destroyed
  /// meanwhile (that stops the run).
  template <class Body, class CompletionToken = detail::default_token>
  auto async_run(Body body, CompletionToken&& token = {}) {
    auto shared = std::make_shared<Body>(std::move(body));  // std::function copies; the body need not
    detail::leader_body fn = [shared](election::hold& t) -> asio::awaitable<void> { co_await (*shared)(t); };
    return asio::async_initiate<CompletionToken, void(std::exception_ptr)>(
        [s = state_](auto handler, detail::leader_body fn) {
          if (!s) {
            auto error = std::make_exception_ptr(
                boost::system::system_error(make_error_code(asio::error::bad_descriptor), "coetcd::leader: an empty object"));
            auto to = asio::get_associated_executor(handler, asio::system_executor());
            asio::post(to, [h = std::move(handler), error]() mutable { std::move(h)(error); });
            return;
          }
          asio::co_spawn(detail::leader_executor(s), detail::run_leader(s, std::move(fn)), std::move(handler));
        },
        token, std::move(fn));
  }

  /// The next change of state, in order: each term's elected and lost (told the moment the term
  /// ends, while its body may still be winding down), each failed attempt, and the end of each
  /// run. Changes are kept until read (the last 1000; older ones are dropped).
  ///
  /// @par Handler signature
  /// `void(error_code, leader_event)`
  /// @par Errors
  /// asio::error::already_started (another async_next_event is pending),
  /// asio::error::operation_aborted (cancelled, or the leader destroyed),
  /// asio::error::bad_descriptor (an empty leader).
  /// @par Cancellation
  /// Terminal, partial, total: the wait is abandoned; no event is lost (one on its way to a
  /// cancelled reader goes back first in line).
  /// @par Executor
  /// The handler's associated executor (default: the leader's strand); never inside this call.
  template <class CompletionToken = detail::default_token>
  auto async_next_event(CompletionToken&& token = {}) {
    return detail::initiate<void(error_code, leader_event)>(
        std::forward<CompletionToken>(token),
        [s = state_](detail::handler<leader_event> h) { detail::start_leader_next(s, std::move(h)); });
  }

  /// The type of get_executor().
  using executor_type = asio::any_io_executor;
  /// The leader's strand (empty for an empty object).
  executor_type get_executor() const noexcept;
  /// The election's name.
  const std::string& name() const noexcept;
  /// True while a term lasts, as far as this process knows: false once the term's session
  /// counts as lost, its lease's local deadline included (see session::lost()), even before the
  /// term's end is delivered.
  bool is_leader() const noexcept;
  /// The current term's fencing token while leading, else 0.
  std::int64_t fencing_token() const noexcept;
  /// Terms begun so far.
  std::uint64_t terms() const noexcept;

 private:
  void stop() noexcept;
  std::shared_ptr<detail::leader_state> state_;
};

}  // namespace coetcd
