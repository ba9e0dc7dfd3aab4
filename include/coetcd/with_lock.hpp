// with_lock, with_shared_lock, with_permits: run a coroutine body while a lock is held.
#pragma once

#include <coetcd/multi_lock.hpp>
#include <coetcd/mutex.hpp>
#include <coetcd/rw_mutex.hpp>
#include <coetcd/semaphore.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>

#include <chrono>
#include <exception>
#include <optional>
#include <type_traits>
#include <variant>

namespace coetcd {

/// Options of with_lock, with_shared_lock and with_permits.
struct with_lock_options {
  /// Longest the body may hold the lock; zero: no limit. Past it the body is cancelled.
  std::chrono::steady_clock::duration max_hold{};
};

namespace detail {
template <class T>
struct body_outcome {
  std::exception_ptr error;
  std::optional<std::conditional_t<std::is_void_v<T>, std::monostate, T>> value;
};

// Asio's || waits for the first operation that succeeds, so a body that throws must not be an
// operation that fails: its exception travels as a value.
template <class T>
asio::awaitable<body_outcome<T>> capture_outcome(asio::awaitable<T> a) {
  body_outcome<T> out;
  try {
    if constexpr (std::is_void_v<T>) {
      co_await std::move(a);
      out.value.emplace();
    } else {
      out.value.emplace(co_await std::move(a));
    }
  } catch (...) {
    out.error = std::current_exception();
  }
  co_return out;
}
}  // namespace detail

namespace detail {
// The three operations with_lock needs, on one side of a lock (held by reference).
template <class M>
struct exclusive_hold {
  M& m;
  static constexpr const char* what = "coetcd::with_lock";
  auto lock() { return m.async_lock(asio::use_awaitable); }
  auto unlock() { return m.async_unlock(asio::as_tuple(asio::use_awaitable)); }
  auto lost() { return m.async_wait_lost(asio::as_tuple(asio::use_awaitable)); }
};
struct shared_hold {
  rw_mutex& m;
  static constexpr const char* what = "coetcd::with_shared_lock";
  auto lock() { return m.async_lock_shared(asio::use_awaitable); }
  auto unlock() { return m.async_unlock_shared(asio::as_tuple(asio::use_awaitable)); }
  auto lost() { return m.async_wait_lost(asio::as_tuple(asio::use_awaitable)); }
};
struct permits_hold {
  semaphore& m;
  std::int64_t n;
  static constexpr const char* what = "coetcd::with_permits";
  auto lock() { return m.async_acquire(n, asio::use_awaitable); }
  auto unlock() { return m.async_release(n, asio::as_tuple(asio::use_awaitable)); }
  auto lost() { return m.async_wait_lost(asio::as_tuple(asio::use_awaitable)); }
};

template <class Hold, class Body>
auto with_hold(Hold m, Body body, with_lock_options options) -> std::invoke_result_t<Body&> {
  using namespace asio::experimental::awaitable_operators;
  using value_type = typename std::invoke_result_t<Body&>::value_type;
  co_await m.lock();
  asio::steady_timer limit(co_await asio::this_coro::executor);
  if (options.max_hold.count() > 0) limit.expires_after(options.max_hold);
  else limit.expires_at(asio::steady_timer::time_point::max());

  auto raced = co_await (detail::capture_outcome(body()) || m.lost() ||
                         limit.async_wait(asio::as_tuple(asio::use_awaitable)));

  // Release even if with_lock itself was cancelled: a fresh cancellation state for the unlock.
  co_await asio::this_coro::reset_cancellation_state();
  co_await asio::this_coro::throw_if_cancelled(false);
  auto [unlock_error] = co_await m.unlock();
  (void)unlock_error;  // after a loss the key is already gone; nothing else to do
  co_await asio::this_coro::throw_if_cancelled(true);

  if (raced.index() == 1) throw boost::system::system_error(make_error_code(error::session_lost), m.what);
  if (raced.index() == 2)
    throw boost::system::system_error(make_error_code(error::max_hold_exceeded), m.what);
  auto& outcome = std::get<0>(raced);
  if (outcome.error) std::rethrow_exception(outcome.error);
  if constexpr (!std::is_void_v<value_type>) co_return std::move(*outcome.value);
}

}  // namespace detail

/// Runs `body()` (which returns asio::awaitable<T>) while holding `m`, and returns what it returns.
///
/// The body is cancelled (terminal cancellation on its awaits) if the session is lost or
/// options.max_hold passes; with_lock then throws boost::system::system_error with
/// error::session_lost or error::max_hold_exceeded. The lock is released on every way out —
/// normal return, exception from the body, cancellation of with_lock itself — before with_lock
/// completes. Errors of async_lock are thrown as system_error.
///
/// `m` (and its session) must outlive the returned awaitable; the body runs on the awaiting
/// coroutine's executor.
///
/// g++ 12: a lambda with by-value captures written inside the `co_await with_lock(...)` expression
/// is destroyed twice by the compiler; name it first and pass it with std::move (see docs/how-it-works.md).
template <class Body>
auto with_lock(mutex& m, Body body, with_lock_options options = {}) {
  return detail::with_hold(detail::exclusive_hold<mutex>{m}, std::move(body), options);
}

/// with_lock on an rw_mutex held exclusively.
template <class Body>
auto with_lock(rw_mutex& m, Body body, with_lock_options options = {}) {
  return detail::with_hold(detail::exclusive_hold<rw_mutex>{m}, std::move(body), options);
}

/// with_lock on every part of a multi_lock: the body runs while all are held, and is cancelled
/// when the session of any part is lost.
template <class Body>
auto with_lock(multi_lock& m, Body body, with_lock_options options = {}) {
  return detail::with_hold(detail::exclusive_hold<multi_lock>{m}, std::move(body), options);
}

/// with_lock on an rw_mutex held shared (async_lock_shared / async_unlock_shared); errors and
/// release as with_lock.
template <class Body>
auto with_shared_lock(rw_mutex& m, Body body, with_lock_options options = {}) {
  return detail::with_hold(detail::shared_hold{m}, std::move(body), options);
}

/// Runs `body()` while holding `n` permits of `sem` (async_acquire(n) / async_release(n)); errors
/// and release as with_lock.
template <class Body>
auto with_permits(semaphore& sem, std::int64_t n, Body body, with_lock_options options = {}) {
  return detail::with_hold(detail::permits_hold{sem, n}, std::move(body), options);
}

}  // namespace coetcd
