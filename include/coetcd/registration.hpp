// coetcd::registration: a key kept under a session and put again on a fresh one after each loss.
#pragma once

#include <coetcd/session.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace coetcd {

/// Options of a registration.
struct registration_options {
  /// TTL of each session: how long the key outlives a process that stopped answering. 60 s, as a
  /// session's; set 10 s, say, for a registry that must forget a dead process sooner.
  std::chrono::seconds ttl{60};
  /// Pause after the first failed attempt; doubles per further failure up to retry_max, each
  /// drawn from 0.5x to 1.5x.
  std::chrono::milliseconds retry_min{100};
  /// Longest pause between failed attempts.
  std::chrono::milliseconds retry_max{5000};
};

namespace detail {
struct registration_state;
void start_registration(const std::shared_ptr<registration_state>&, handler<>);
}  // namespace detail

/// A key that stays in etcd while its program lives (Curator's PersistentNode): put under a
/// session's lease, and put again when the session is lost (revoked, expired, not renewed in
/// time: a fresh session), when the key is deleted, or when it is overwritten without a lease. A
/// program that dies takes the key with it after the TTL.
///
/// One key, one owner at a time: a put over ours under another lease (a second registration of
/// the key, here or in another process, or anyone's put with a lease) is left alone, and this
/// registration stands by (is_registered() false) until that key is deleted or put without a
/// lease, then puts again. So two registrations of one key settle: the last to put keeps it, the
/// other takes over when it goes. Each put on a fresh session is unconditional (it takes the key
/// from a predecessor whose lease has not yet expired). For service discovery in the layout of Go's
/// `naming/endpoints`, give it naming::key(target, id) and naming::encode(endpoint)
/// (<coetcd/naming.hpp>).
///
/// Threads: initiating functions, the destructor and the accessors may be called from any thread.
/// The client must outlive the registration.
class registration {
 public:
  /// Registers `value` at `key` on client `c` once async_run runs. Throws
  /// boost::system::system_error: error::empty_key for an empty key, error::invalid_argument for
  /// a ttl below 1 s, retry_min below 1 ms or above retry_max, error::client_closed for a moved-from client (a closed one: async_run completes with it).
  registration(client& c, std::string key, std::string value, registration_options options = {});
  /// Takes over the other registration; `other` is left empty (its operations complete with
  /// asio::error::bad_descriptor).
  registration(registration&&) noexcept = default;
  /// Stops this registration as the destructor does, then takes over `other`.
  registration& operator=(registration&& other) noexcept;
  /// Stops a running async_run: its session is closed (the key deleted with the lease), and its
  /// handler gets asio::error::operation_aborted.
  ~registration();

  /// Keeps the key in etcd until cancelled, stopped, or a failure no retry can mend.
  ///
  /// @par Handler signature
  /// `void(error_code)`
  /// @par Errors
  /// asio::error::operation_aborted (cancelled, or the registration destroyed: the key is
  /// deleted before the handler runs, unless the server cannot be reached, when it goes with the
  /// lease's TTL); error::client_closed, error::auth_failed, error::auth_required,
  /// error::invalid_auth_token, error::permission_denied (not retried);
  /// asio::error::already_started (another async_run of this registration runs).
  /// @par Cancellation
  /// Terminal, partial, total, each the same way: the run stops, its session is closed (the key
  /// deleted with the lease), then the handler runs with asio::error::operation_aborted.
  /// @par Executor
  /// The handler's associated executor (default: the client's); never inside this call.
  template <class CompletionToken = detail::default_token>
  auto async_run(CompletionToken&& token = {}) {
    return detail::initiate<void(error_code)>(
        std::forward<CompletionToken>(token), [s = state_](detail::handler<> h) { detail::start_registration(s, std::move(h)); });
  }

  /// The type of get_executor().
  using executor_type = asio::any_io_executor;
  /// The client's executor (empty for an empty object).
  executor_type get_executor() const noexcept;
  /// The key kept.
  const std::string& key() const noexcept;
  /// True while the key is in etcd under our session, as far as this process knows (false while
  /// standing by behind another lease's put).
  bool is_registered() const noexcept;
  /// The lease the key is under while registered, else 0.
  std::int64_t lease() const noexcept;
  /// Puts so far (1 + each put again after a loss).
  std::uint64_t puts() const noexcept;

 private:
  void stop() noexcept;
  std::shared_ptr<detail::registration_state> state_;
};

}  // namespace coetcd
