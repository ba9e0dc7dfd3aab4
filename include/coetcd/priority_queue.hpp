// coetcd::priority_queue: a priority queue laid out as etcd's Go recipe.PriorityQueue.
#pragma once

#include <coetcd/queue.hpp>

namespace coetcd {

/// A distributed priority queue in the layout of etcd's Go `contrib/recipes` PriorityQueue: an
/// item of priority P is the key `name + "/" + %05d(P) + "/" + %016d(seq)`, sequence numbers
/// rising per priority (guarded by the key `"__" + name + "/" + %05d(P)`), and dequeues take the
/// lowest key: the lowest priority number first, then the oldest. Go producers and consumers
/// share a queue with coetcd's.
///
/// Each item goes to exactly one consumer, faults included, as with coetcd::queue (batches
/// chained by a receipt key under the session's lease). Lifetimes and threads as coetcd::queue.
class priority_queue {
 public:
  /// The priority queue `name` under session `s`. Throws as queue's constructor.
  priority_queue(session& s, std::string_view name, queue_options options = {})
      : state_(detail::make_queue(s, name, true, options)) {}
  /// Takes over the other queue; `other` is left empty (its operations complete with
  /// asio::error::bad_descriptor).
  priority_queue(priority_queue&&) noexcept = default;
  /// Closes this queue as the destructor does, then takes over `other`.
  priority_queue& operator=(priority_queue&& other) noexcept {
    if (this != &other) {
      detail::close_queue(state_);
      state_ = std::move(other.state_);
    }
    return *this;
  }
  /// As ~queue().
  ~priority_queue() { detail::close_queue(state_); }

  /// Adds `value` with `priority` (0 is taken first).
  ///
  /// @par Handler signature
  /// `void(error_code, std::string key)`: the item's key.
  /// @par Errors
  /// As queue::async_enqueue, and error::foreign_key when the last key of this priority does not
  /// end in a sequence number that has a next one in 64 bits (`name/PPPPP/<seq>`; Go's
  /// PriorityQueue fails its put on no number too): the item is not put.
  /// @par Cancellation, Executor
  /// As queue::async_enqueue.
  template <class CompletionToken = detail::default_token>
  auto async_enqueue(std::string_view value, std::uint16_t priority, CompletionToken&& token = {}) {
    return detail::initiate<void(error_code, std::string)>(
        std::forward<CompletionToken>(token),
        [s = state_](detail::handler<std::string> h, std::string v, int p) { detail::start_enqueue(s, std::move(v), p, std::move(h)); },
        std::string(value), static_cast<int>(priority));
  }

  /// Takes the item of the lowest priority number (the oldest of them), waiting until there is one.
  ///
  /// @par Handler signature
  /// `void(error_code, std::string value)`
  /// @par Errors, Cancellation, Executor
  /// As queue::async_dequeue.
  template <class CompletionToken = detail::default_token>
  auto async_dequeue(CompletionToken&& token = {}) {
    return detail::initiate<void(error_code, std::string)>(
        std::forward<CompletionToken>(token),
        [s = state_](detail::handler<std::string> h) { detail::start_dequeue(s, std::move(h)); });
  }

  /// The type of get_executor().
  using executor_type = asio::any_io_executor;
  /// The client's executor (empty for an empty object).
  executor_type get_executor() const noexcept { return detail::queue_executor(state_); }
  /// The queue's name.
  const std::string& name() const noexcept { return detail::queue_name(state_); }

 private:
  std::shared_ptr<detail::queue_state> state_;
};

}  // namespace coetcd
