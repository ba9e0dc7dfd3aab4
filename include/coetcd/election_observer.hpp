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
  /// Throws boost::system::system_error(error::empty_key) for an empty name.
  election_observer(client& c, std::string_view name);
  election_observer(election_observer&&) noexcept = default;
  ~election_observer();

  /// The next leader state. The first is the leader when observing started. After that: a new
  /// leader, a new value proclaimed by the leader, or std::nullopt when no candidate is left.
  /// Handler: void(error_code, std::optional<key_value>). Errors: error::client_closed.
  /// Cancellation: terminal, partial, total abandon the wait; observing goes on.
  template <class CompletionToken = detail::default_token>
  auto async_next(CompletionToken&& token = {}) {
    return detail::initiate<void(error_code, std::optional<key_value>)>(
        std::forward<CompletionToken>(token), [c = core_](asio::any_completion_handler<void(error_code, std::optional<key_value>)> h) {
          start_next(c, std::move(h));
        });
  }

  /// The client's executor, on which handlers run by default (empty for an empty object).
  using executor_type = asio::any_io_executor;
  executor_type get_executor() const noexcept;

 private:
  static void start_next(const std::shared_ptr<detail::observer_core>&,
                         asio::any_completion_handler<void(error_code, std::optional<key_value>)>);
  std::shared_ptr<detail::observer_core> core_;
};

}  // namespace coetcd
