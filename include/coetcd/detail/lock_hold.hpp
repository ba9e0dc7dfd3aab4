// detail::lock_hold: the owned hold of a mutex or rw_mutex, which mutex::hold, rw_mutex::hold and
// rw_mutex::shared_hold are; and the initiation that hands one to a caller's handler. Not API.
#pragma once

#include <coetcd/detail/access.hpp>
#include <coetcd/detail/config.hpp>
#include <coetcd/kv.hpp>
#include <coetcd/loss_reason.hpp>
#include <coetcd/txn.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

namespace coetcd::detail {

struct hold_state;

/// One caller's hold of a lock key (see docs/api-vocabulary.md, section 3): move-only, released
/// in the background when destroyed while held. The three mutex-family holds derive from it and
/// add nothing but their type, so a hold of one kind cannot be passed where another is meant.
class lock_hold {
 public:
  using executor_type = asio::any_io_executor;

  lock_hold() noexcept = default;
  explicit lock_hold(std::shared_ptr<hold_state> s) noexcept : state_(std::move(s)) {}
  lock_hold(lock_hold&&) noexcept = default;
  lock_hold& operator=(lock_hold&& other) noexcept {
    if (this != &other) {
      if (state_) drop(std::move(state_));
      state_ = std::move(other.state_);
    }
    return *this;
  }
  lock_hold(const lock_hold&) = delete;
  lock_hold& operator=(const lock_hold&) = delete;
  ~lock_hold() {
    if (state_) drop(std::move(state_));
  }

  explicit operator bool() const noexcept;
  std::int64_t fencing_token() noexcept;
  compare fence();

  template <class CompletionToken = default_token>
  auto async_release(CompletionToken&& token = {}) {
    return initiate<void(error_code)>(
        std::forward<CompletionToken>(token),
        [s = state_](asio::any_completion_handler<void(error_code)> h) { start_release(s, std::move(h)); });
  }
  template <class CompletionToken = default_token>
  auto async_wait_lost(CompletionToken&& token = {}) {
    return initiate<void(error_code, loss_reason)>(
        std::forward<CompletionToken>(token),
        [s = state_](asio::any_completion_handler<void(error_code, loss_reason)> h) { start_wait_lost(s, std::move(h)); });
  }

  executor_type get_executor() const noexcept;
  const std::string& key() const noexcept;
  std::uint64_t local_sequence() const noexcept;
  response_header header() const noexcept;

  friend struct access;
 private:
  static void drop(std::shared_ptr<hold_state> s) noexcept;
  static void start_release(const std::shared_ptr<hold_state>& s, asio::any_completion_handler<void(error_code)> h);
  static void start_wait_lost(const std::shared_ptr<hold_state>& s,
                              asio::any_completion_handler<void(error_code, loss_reason)> h);
  std::shared_ptr<hold_state> state_;
};

/// The handler a lock's queue completes, with the internal hold; turned into the caller's hold type
/// on the way out.
using lock_handler = asio::any_completion_handler<void(error_code, lock_hold)>;

/// Hands the queue's lock_hold to a handler that takes `Hold`. Everything else (executor,
/// cancellation slot, allocator) is the wrapped handler's, as for work_tracking_handler.
template <class Hold, class Handler>
struct hold_handler {
  Handler handler;
  void operator()(error_code ec, lock_hold h) { std::move(handler)(ec, Hold(std::move(h))); }
};

/// initiate() for an acquisition completing with `void(error_code, Hold)`: the body gets a
/// lock_handler, with one type-erased handler, not two.
template <class Hold, class Token, class Start>
auto initiate_hold(Token&& token, Start start) {
  return asio::async_initiate<Token, void(error_code, Hold)>(
      [start = std::move(start)](auto h) mutable {
        using tracked = work_tracking_handler<decltype(h)>;
        start(lock_handler(hold_handler<Hold, tracked>{tracked(std::move(h))}));
      },
      token);
}

}  // namespace coetcd::detail

namespace boost::asio {
template <template <class, class> class Associator, class Hold, class Handler, class DefaultCandidate>
struct associator<Associator, coetcd::detail::hold_handler<Hold, Handler>, DefaultCandidate>
    : Associator<Handler, DefaultCandidate> {
  static typename Associator<Handler, DefaultCandidate>::type get(
      const coetcd::detail::hold_handler<Hold, Handler>& h) noexcept {
    return Associator<Handler, DefaultCandidate>::get(h.handler);
  }
  static auto get(const coetcd::detail::hold_handler<Hold, Handler>& h, const DefaultCandidate& c) noexcept
      -> decltype(Associator<Handler, DefaultCandidate>::get(h.handler, c)) {
    return Associator<Handler, DefaultCandidate>::get(h.handler, c);
  }
};
}  // namespace boost::asio
