// coetcd::counter: a 64-bit integer in one etcd key, changed by optimistic txns (no lock).
#pragma once

#include <coetcd/client.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace coetcd {

namespace detail {
struct counter_state;
void start_counter_add(const std::shared_ptr<counter_state>&, std::int64_t delta, handler<std::int64_t>);
void start_counter_cas(const std::shared_ptr<counter_state>&, std::int64_t expected, std::int64_t desired,
                       handler<bool, std::int64_t>);
void start_counter_get(const std::shared_ptr<counter_state>&, handler<std::int64_t>);
void start_counter_watch(const std::shared_ptr<counter_state>&, handler<watcher>);
}  // namespace detail

/// A 64-bit integer kept in one key as decimal text (`etcdctl get KEY` shows it; a missing key
/// counts as 0). Each change is one txn that compares the key's mod revision with the one this
/// object saw last: one round trip when no other writer came between, else the txn's else branch
/// reads the key and the change is made again from there (no extra round trip). Nothing is
/// locked, and no increment is lost or made twice. Adds made through one object while its txn is
/// on the wire go together in the next txn, as one sum: share one object per key among the
/// coroutines of a process (as one mutex object), and N concurrent adds cost about one txn per
/// round trip instead of N txns that mostly conflict.
///
/// An operation that went out without an answer (the deadline, a dropped connection, a cancel
/// while on the wire) fails with error::outcome_unknown: it may have been applied, and is not
/// sent again. Any number of operations may be pending at once. Operations run on the client's
/// strand; the object (its destructor included) may be used from any thread.
///
/// Move-only: the batching and the hint are per object. Destroying the object completes its
/// pending operations with asio::error::operation_aborted; for an add or compare-and-set whose
/// txn was on the wire that means its outcome is unknown (the txn runs to its end). A
/// moved-from counter is empty: its operations complete with asio::error::bad_descriptor and
/// key() is empty.
class counter {
 public:
  /// The type of get_executor().
  using executor_type = client::executor_type;

  /// A counter in `key` of `c`'s cluster. It holds the client's state, not `c`: moving the
  /// client leaves it working, and closing or destroying the client fails its operations with
  /// error::client_closed. Throws boost::system::system_error:
  /// error::empty_key for an empty key, error::client_closed for a moved-from client.
  counter(client& c, std::string key);
  /// Takes over the other counter; `other` is left empty.
  counter(counter&&) noexcept = default;
  /// Aborts this object's pending operations, as the destructor does, then takes over the
  /// other counter, which is left empty.
  counter& operator=(counter&& other) noexcept;
  /// Not copyable.
  counter(const counter&) = delete;
  /// Not copyable.
  counter& operator=(const counter&) = delete;
  /// Pending operations complete with asio::error::operation_aborted.
  ~counter();

  /// Adds `delta` (which may be negative) and completes with the value after it.
  ///
  /// @par Handler signature
  /// `void(error_code, std::int64_t value)`
  /// @par Errors
  /// error::not_a_number (the key holds something else; nothing written), error::invalid_argument
  /// (the sum would overflow), error::outcome_unknown, error::client_closed,
  /// asio::error::operation_aborted (the object was destroyed), the
  /// @ref request_errors "request errors".
  /// @par Cancellation
  /// None: an add runs to its outcome (at most client_options::request_timeout per txn).
  /// @par Executor
  /// The handler's associated executor (default: the client's); never inside this call.
  template <class CompletionToken = detail::default_token>
  auto async_add(std::int64_t delta, CompletionToken&& token = {}) {
    return detail::initiate<void(error_code, std::int64_t)>(
        std::forward<CompletionToken>(token),
        [s = state_](detail::handler<std::int64_t> h, std::int64_t d) { detail::start_counter_add(s, d, std::move(h)); },
        delta);
  }

  /// Sets the value to `desired` if it is `expected`, and completes with whether it did and the
  /// value it found (`expected` when it did). One round trip when this object saw the key last.
  ///
  /// @par Handler signature
  /// `void(error_code, bool swapped, std::int64_t found)`
  /// @par Errors, Executor
  /// As async_add (no overflow).
  /// @par Cancellation
  /// Terminal (it runs as one coroutine): before its txn went out, operation_aborted; while it
  /// is on the wire, error::outcome_unknown.
  template <class CompletionToken = detail::default_token>
  auto async_compare_and_set(std::int64_t expected, std::int64_t desired, CompletionToken&& token = {}) {
    return detail::initiate<void(error_code, bool, std::int64_t)>(
        std::forward<CompletionToken>(token),
        [s = state_](detail::handler<bool, std::int64_t> h, std::int64_t e, std::int64_t d) {
          detail::start_counter_cas(s, e, d, std::move(h));
        },
        expected, desired);
  }

  /// Reads the value (a linearizable read).
  ///
  /// @par Handler signature
  /// `void(error_code, std::int64_t value)`
  /// @par Errors
  /// error::not_a_number, error::client_closed, asio::error::operation_aborted (cancelled, or the
  /// object destroyed), the request errors.
  /// @par Cancellation
  /// Terminal only (partial and total are ignored): operation_aborted.
  /// @par Executor
  /// As async_add.
  template <class CompletionToken = detail::default_token>
  auto async_get(CompletionToken&& token = {}) {
    return detail::initiate<void(error_code, std::int64_t)>(
        std::forward<CompletionToken>(token),
        [s = state_](detail::handler<std::int64_t> h) { detail::start_counter_get(s, std::move(h)); });
  }

  /// Watches the key from the next revision: each event's kv.value is the new value as text
  /// (parse() reads it; a delete means 0). As client::async_watch(key()): the watch is the
  /// client's, and destroying the counter does not end it.
  template <class CompletionToken = detail::default_token>
  auto async_watch(CompletionToken&& token = {}) {
    return detail::initiate<void(error_code, watcher)>(
        std::forward<CompletionToken>(token),
        [s = state_](detail::handler<watcher> h) { detail::start_counter_watch(s, std::move(h)); });
  }

  /// The value a key's text stands for: decimal, an optional '-', nothing else; empty on anything else.
  static std::optional<std::int64_t> parse(std::string_view text) noexcept;

  /// The key (empty for an empty object).
  const std::string& key() const noexcept;
  /// The client's executor, on which handlers run by default (empty for an empty object).
  executor_type get_executor() const noexcept;

 private:
  std::shared_ptr<detail::counter_state> state_;
};

}  // namespace coetcd
