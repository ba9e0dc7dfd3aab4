// coetcd::election_observer: follows the leader of an election, change by change.
#pragma once

#include <coetcd/client.hpp>

#include <memory>
#include <optional>
#include <string_view>

namespace coetcd {

namespace detail {
class observer_core;
}

/// Follows the leader of an election (Go's Election.Observe, `etcdctl elect --listen`): a stream
/// of leader changes, in order. Observing starts when the object is constructed, on one watch of
/// the client's shared Watch stream; changes are queued until taken. Move-only; destroying it
/// stops observing. The client must outlive it.
///
/// Threads: async_next and the destructor may be called from any thread; they hand their work to
/// the client's strand.
class election_observer {
 public:
  /// Starts observing election `name` of client `c`. Throws
  /// boost::system::system_error(error::empty_key) for an empty name.
  election_observer(client& c, std::string_view name);
  /// Takes over the other object; `other` is left empty: its accessors return empty values and
  /// its operations complete with asio::error::bad_descriptor.
  election_observer(election_observer&&) noexcept = default;
  /// Gives up what this object holds and aborts its pending operations, as the destructor does,
  /// then takes over `other`, which is left empty.
  election_observer& operator=(election_observer&& other) noexcept;
  /// Stops observing. A pending async_next completes with asio::error::operation_aborted, as a
  /// destroyed Asio object's operations do (changes not yet taken are dropped).
  ~election_observer();

  /// The next leader state. The first is the leader when observing started. After that: a new
  /// leader, a new value proclaimed by the leader, or std::nullopt when no candidate is left.
  /// Only one async_next may be pending at a time.
  ///
  /// @par Handler signature
  /// `void(error_code, std::optional<key_value>)`
  /// @par Errors
  /// error::client_closed, the refusals of the name's watch (error::permission_denied,
  /// error::auth_failed, error::auth_required, error::auth_not_enabled): observing is over
  /// then. asio::error::already_started when another async_next is pending.
  /// @par Cancellation
  /// Terminal, partial, total abandon the wait (asio::error::operation_aborted); observing
  /// goes on.
  /// @par Executor
  /// The handler's associated executor (default: the client's); never inside this call.
  /// @par Lifetimes
  /// The observer may be destroyed meanwhile: the wait completes with
  /// asio::error::operation_aborted (see ~election_observer()). A client closed or destroyed
  /// meanwhile gives error::client_closed.
  template <class CompletionToken = detail::default_token>
  auto async_next(CompletionToken&& token = {}) {
    return detail::initiate<void(error_code, std::optional<key_value>)>(
        std::forward<CompletionToken>(token), [c = core_](asio::any_completion_handler<void(error_code, std::optional<key_value>)> h) {
          start_next(c, std::move(h));
        });
  }

  /// The type of get_executor().
  using executor_type = asio::any_io_executor;
  /// The client's executor, on which handlers run by default (empty for an empty object).
  executor_type get_executor() const noexcept;

 private:
  void abandon() noexcept;  // the destructor's work, also done by move assignment
  static void start_next(const std::shared_ptr<detail::observer_core>&,
                         asio::any_completion_handler<void(error_code, std::optional<key_value>)>);
  std::shared_ptr<detail::observer_core> core_;
};

}  // namespace coetcd
