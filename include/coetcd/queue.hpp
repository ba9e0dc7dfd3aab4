// coetcd::queue: a FIFO work queue laid out as etcd's Go recipe.Queue; each item to one consumer.
#pragma once

#include <coetcd/session.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace coetcd {

/// Options of queue and priority_queue.
struct queue_options {
  /// Most items one txn puts or claims (etcd allows 128 operations per txn by default).
  std::size_t max_batch = 64;
};

namespace detail {
struct queue_state;
std::shared_ptr<queue_state> make_queue(session& s, std::string_view name, bool priority, queue_options o);
void close_queue(std::shared_ptr<queue_state>&) noexcept;
void start_enqueue(const std::shared_ptr<queue_state>&, std::string value, int priority, handler<std::string>);
void start_dequeue(const std::shared_ptr<queue_state>&, handler<std::string>);
asio::any_io_executor queue_executor(const std::shared_ptr<queue_state>&) noexcept;
const std::string& queue_name(const std::shared_ptr<queue_state>&) noexcept;
}  // namespace detail

/// A distributed FIFO queue in the layout of etcd's Go `contrib/recipes` Queue: each item is the
/// key `name + "/" + <nanoseconds>` (no lease), dequeued in create-revision order by deleting it.
/// Go producers and consumers share a queue with coetcd's.
///
/// Each item goes to exactly one consumer, faults included: the enqueues and the dequeues of one
/// object go in batches, one txn each, chained by a receipt key under the session's lease
/// (`__coetcd-queue/` + name + ...), so a txn resent after an unanswered attempt is applied once.
/// One object serves any number of concurrent async_enqueue and async_dequeue calls; give every
/// coroutine of a process the same object to batch them.
///
/// The session must outlive the queue; when it is lost, pending and later operations fail with
/// error::session_lost (the items stay). Threads: initiating functions and the destructor may be
/// called from any thread.
class queue {
 public:
  /// The queue `name` under session `s`. Throws boost::system::system_error: error::empty_key for
  /// an empty name, error::session_lost for an empty or lost session, error::invalid_argument for
  /// max_batch 0 or above 100.
  queue(session& s, std::string_view name, queue_options options = {})
      : state_(detail::make_queue(s, name, false, options)) {}
  /// Takes over the other queue; `other` is left empty (its operations complete with
  /// asio::error::bad_descriptor).
  queue(queue&&) noexcept = default;
  /// Closes this queue as the destructor does, then takes over `other`.
  queue& operator=(queue&& other) noexcept {
    if (this != &other) {
      detail::close_queue(state_);
      state_ = std::move(other.state_);
    }
    return *this;
  }
  /// Pending dequeues complete with asio::error::operation_aborted, unless their item is already
  /// claimed (it is delivered); puts under way finish. The receipt keys are deleted once idle.
  /// Items claimed for dequeues cancelled with their claim on the wire go back into the queue,
  /// also after the object is gone (see async_dequeue).
  ~queue() { detail::close_queue(state_); }

  /// Adds `value` at the end of the queue.
  ///
  /// @par Handler signature
  /// `void(error_code, std::string key)`: the item's key.
  /// @par Errors
  /// error::session_lost, error::outcome_unknown (the session ended while the put had no answer:
  /// it may or may not be in the queue), the @ref request_errors "request errors" that say the
  /// put was refused. Unanswered puts are sent again while the session lives.
  /// @par Cancellation
  /// Terminal, partial, total, until the put leaves in a txn (then it runs to its outcome):
  /// asio::error::operation_aborted, and nothing was put.
  /// @par Executor
  /// The handler's associated executor (default: the client's); never inside this call.
  template <class CompletionToken = detail::default_token>
  auto async_enqueue(std::string_view value, CompletionToken&& token = {}) {
    return detail::initiate<void(error_code, std::string)>(
        std::forward<CompletionToken>(token),
        [s = state_](detail::handler<std::string> h, std::string v) { detail::start_enqueue(s, std::move(v), -1, std::move(h)); },
        std::string(value));
  }

  /// Takes the oldest item, waiting until there is one.
  ///
  /// @par Handler signature
  /// `void(error_code, std::string value)`
  /// @par Errors
  /// error::session_lost, error::outcome_unknown (the session ended while a claim had no
  /// answer: items it may have taken are lost to everyone), the
  /// @ref request_errors "request errors" that say the claim was refused.
  /// @par Cancellation
  /// Terminal, partial, total: asio::error::operation_aborted, and no item was taken for this
  /// call. A cancel that meets its claim on the wire completes once the claim is answered; an
  /// item claimed for it goes to a dequeue of this object already waiting, else back into the
  /// queue for any consumer (at its old key when free, else at the back; exactly once, with or
  /// without the session; lost only when that put is refused for good, e.g. the client closed
  /// first: see docs/coordination.md).
  /// @par Executor
  /// The handler's associated executor (default: the client's); never inside this call.
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
