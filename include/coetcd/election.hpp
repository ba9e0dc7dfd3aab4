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
/// order, on the same shared watch and local queue view as coetcd's mutex.
///
/// The session must outlive the election. One operation at a time per election object.
/// Destroying an election that leads resigns in the background (as a destroyed mutex unlocks);
/// a campaign still pending then gives its proposal up instead of leading.
///
/// Threads: initiating functions (async_*) and the destructor may be called from any thread;
/// they hand their work to the client's strand. The accessors (is_leader(), revision(), …) read what the strand
/// last wrote: call them where the object's completions run (the coroutine that awaits them),
/// not from another thread while the io_context runs on several.
class election {
 public:
  /// Throws boost::system::system_error(error::empty_key) for an empty name.
  election(session& s, std::string_view name);
  election(election&&) noexcept = default;
  ~election();

  /// Becomes leader with `value` as proposal, waiting as long as others lead before us. When our
  /// key already exists with another value (say, an earlier campaign of this session), the value
  /// is proclaimed. Handler: void(error_code). Errors: error::session_lost (the session ended,
  /// or our proposal vanished: deleted by hand, or with the lease), transport errors. A campaign
  /// of a sitting leader only proclaims `value`; when our key is gone by then, the leadership is
  /// lost: it fails with error::session_lost, is_leader() turns false, and the next campaign
  /// starts over with a new key.
  /// Cancellation: terminal, partial, total; our proposal is deleted before the handler runs.
  template <class CompletionToken = detail::default_token>
  auto async_campaign(std::string_view value, CompletionToken&& token = {}) {
    return detail::initiate<void(error_code)>(
        std::forward<CompletionToken>(token), [s = state_](asio::any_completion_handler<void(error_code)> h, std::string v) {
          start_campaign(s, std::move(v), std::move(h));
        }, std::string(value));
  }

  /// Replaces the leader's value, only while we lead. Handler: void(error_code).
  /// Errors: error::not_leader (we do not lead, or no longer: our key is gone), transport errors.
  template <class CompletionToken = detail::default_token>
  auto async_proclaim(std::string_view value, CompletionToken&& token = {}) {
    return detail::initiate<void(error_code)>(
        std::forward<CompletionToken>(token), [s = state_](asio::any_completion_handler<void(error_code)> h, std::string v) {
          start_proclaim(s, std::move(v), std::move(h));
        }, std::string(value));
  }

  /// Gives up leadership (deletes our key, guarded by its create revision). A no-op when not
  /// leader. On a failed request we stay leader, so it can be retried. Handler: void(error_code).
  template <class CompletionToken = detail::default_token>
  auto async_resign(CompletionToken&& token = {}) {
    return detail::initiate<void(error_code)>(
        std::forward<CompletionToken>(token), [s = state_](asio::any_completion_handler<void(error_code)> h) { start_resign(s, std::move(h)); });
  }

  /// The current leader's key and value. Handler: void(error_code, key_value).
  /// Errors: error::no_leader, transport errors.
  template <class CompletionToken = detail::default_token>
  auto async_leader(CompletionToken&& token = {}) {
    return detail::initiate<void(error_code, key_value)>(
        std::forward<CompletionToken>(token), [s = state_](asio::any_completion_handler<void(error_code, key_value)> h) {
          start_leader(s, std::move(h));
        });
  }

  /// The client's executor, on which handlers run by default (empty for an empty object).
  using executor_type = asio::any_io_executor;
  executor_type get_executor() const noexcept;
  const std::string& name() const noexcept;
  /// Our proposal key: name + "/" + hex(lease).
  const std::string& key() const noexcept;
  /// True between a successful campaign and resign (as far as this process knows).
  bool is_leader() const noexcept;
  /// Our key's create revision while leader (a fencing token, as for the mutex).
  std::int64_t revision() const noexcept;
  const response_header& header() const noexcept;

 private:
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
