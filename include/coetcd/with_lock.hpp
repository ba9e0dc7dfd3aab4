// with_lock, with_shared_lock, with_permits: run a coroutine body while a lock is held.
#pragma once

#include <coetcd/multi_lock.hpp>
#include <coetcd/mutex.hpp>
#include <coetcd/rw_mutex.hpp>
#include <coetcd/semaphore.hpp>
#include <coetcd/detail/spawn_body.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
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
  /// When set, receives the release's outcome (cleared when it succeeded), whatever the body did.
  /// A failed release is not thrown: the body's work is done and its result stands, and a caller
  /// that saw an exception might run it again. The hold's own release documents what follows a
  /// failure (mutex::hold::async_release retries the delete in the background; any key goes with
  /// its session at the latest). Must stay valid until with_lock completes.
  boost::system::error_code* release_error = nullptr;
};

namespace detail {
/// T of the asio::awaitable<T> a with_lock body returns: `body(hold)` when it takes the hold,
/// else `body()`.
template <class Body, class Hold>
using lock_body_value_t = typename std::conditional_t<std::is_invocable_v<Body&, Hold&>, std::invoke_result<Body&, Hold&>,
                                                      std::invoke_result<Body&>>::type::value_type;

template <class T>
struct body_outcome {
  std::exception_ptr error;
  std::optional<std::conditional_t<std::is_void_v<T>, std::monostate, T>> value;
};

// Asio's || waits for the first operation that succeeds, so a body that throws must not be an
// operation that fails: its exception travels as a value.
template <class Body, class Hold, class T = lock_body_value_t<Body, Hold>>
asio::awaitable<body_outcome<T>> capture_outcome(Body& body, Hold& hold) {
  body_outcome<T> out;
  try {
    // Called in here: a body that throws before its first await is caught too.
    auto run = [&] {
      if constexpr (std::is_invocable_v<Body&, Hold&>) return body(hold);
      else return body();
    };
    if constexpr (std::is_void_v<T>) {
      co_await run();
      out.value.emplace();
    } else {
      out.value.emplace(co_await run());
    }
  } catch (...) {
    out.error = std::current_exception();
  }
  co_return out;
}

// The release runs to its end whatever is cancelled meanwhile: its handler has no slot.
inline auto release_token() { return asio::bind_cancellation_slot(asio::cancellation_slot(), asio::as_tuple(asio::use_awaitable)); }

// How with_lock takes each kind of hold (the lock object held by reference).
template <class M>
struct exclusive_lock {
  M& m;
  using hold_type = typename M::hold;
  static constexpr const char* what = "coetcd::with_lock";
  auto lock() { return m.async_lock(asio::use_awaitable); }
};
struct shared_lock {
  rw_mutex& m;
  using hold_type = rw_mutex::shared_hold;
  static constexpr const char* what = "coetcd::with_shared_lock";
  auto lock() { return m.async_lock_shared(asio::use_awaitable); }
};
struct permits_lock {
  semaphore& m;
  std::int64_t n;
  using hold_type = semaphore::hold;
  static constexpr const char* what = "coetcd::with_permits";
  auto lock() { return m.async_acquire(n, asio::use_awaitable); }
};

inline void set_release_error(const with_lock_options& options, error_code ec) {
  if (options.release_error) *options.release_error = ec;
}

template <class Lockable, class Body>
auto with_hold(Lockable l, Body body, with_lock_options options)
    -> asio::awaitable<lock_body_value_t<Body, typename Lockable::hold_type>> {
  using namespace asio::experimental::awaitable_operators;
  using value_type = lock_body_value_t<Body, typename Lockable::hold_type>;
  set_release_error(options, {});
  auto hold = co_await l.lock();
  asio::steady_timer limit(co_await asio::this_coro::executor);
  if (options.max_hold.count() > 0) limit.expires_after(options.max_hold);
  else limit.expires_at(asio::steady_timer::time_point::max());

  // The loss wait succeeds when the hold is lost, and the timer when max_hold passes: whichever
  // of the three comes first cancels the other two.
  auto raced = co_await (detail::capture_outcome(body, hold) || hold.async_wait_lost(asio::as_tuple(asio::use_awaitable)) ||
                         limit.async_wait(asio::as_tuple(asio::use_awaitable)));

  // Release even if with_lock itself was cancelled (and whatever is cancelled next).
  co_await asio::this_coro::reset_cancellation_state();
  co_await asio::this_coro::throw_if_cancelled(false);
  auto [release_error] = co_await hold.async_release(release_token());
  set_release_error(options, release_error);
  co_await asio::this_coro::throw_if_cancelled(true);

  if (raced.index() == 1) throw boost::system::system_error(make_error_code(error::session_lost), l.what);
  if (raced.index() == 2)
    throw boost::system::system_error(make_error_code(error::max_hold_exceeded), l.what);
  auto& outcome = std::get<0>(raced);
  if (outcome.error) std::rethrow_exception(outcome.error);
  if constexpr (!std::is_void_v<value_type>) co_return std::move(*outcome.value);
}

template <class Token>
concept not_options = !std::is_same_v<std::decay_t<Token>, with_lock_options>;

// The token form: with_hold as a coroutine of its own.
template <class Lockable, class Body, class Token>
auto with_hold_async(Lockable l, asio::any_io_executor ex, Body body, with_lock_options options, Token&& token) {
  return spawn_on_strand<lock_body_value_t<Body, typename Lockable::hold_type>>(
      std::forward<Token>(token), std::move(ex),
      [l, body = std::move(body), options]() mutable { return with_hold(l, std::move(body), options); });
}
}  // namespace detail

/// Runs `body(h)` or `body()` (either returning asio::awaitable<T>) while holding `m`, and returns
/// what it returns. `h` is the hold (a mutex::hold&, say): a body that takes it can build
/// `h.fence()` into its txns or read `h.fencing_token()`; it must not release it or move it away.
///
/// The body is cancelled (terminal cancellation on its awaits) if the hold is lost or
/// options.max_hold passes; with_lock then throws boost::system::system_error with
/// error::session_lost or error::max_hold_exceeded. The hold is released on every way out —
/// normal return, exception from the body, cancellation of with_lock itself — before with_lock
/// completes; the release's outcome goes to options.release_error. Errors of the lock are thrown
/// as system_error.
///
/// Two forms. Without a token, with_lock returns an asio::awaitable<T> to co_await; the body
/// runs on the awaiting coroutine's executor, which must not run it on two threads at once (a
/// strand, or an io_context run by one thread). With a completion token, it is an initiating
/// function usable from any code (callbacks, asio::use_future, asio::deferred, use_awaitable):
///
/// @par Handler signature
/// `void(std::exception_ptr, T)`, or `void(std::exception_ptr)` when T is void: asio::co_spawn's.
/// The exception is what the awaitable form would throw; T is value-initialised with one.
/// @par Cancellation
/// Terminal: the body is cancelled, the lock released, then the handler runs with the
/// operation_aborted system_error (or the body's own exception).
/// @par Executor
/// The body runs on a new strand of the lock's executor (the client's); the handler runs on its
/// associated executor; never inside this call. An empty (moved-from) lock: the handler gets
/// asio::error::bad_descriptor as a system_error.
/// @par Lifetimes
/// `m` (and its session) must outlive the operation in both forms; the body is moved in and
/// destroyed once it has run.
///
/// g++ 12: a lambda with by-value captures written inside the `co_await with_lock(...)` expression
/// is destroyed twice by the compiler; name it first and pass it with std::move (see docs/how-it-works.md).
template <class Body>
auto with_lock(mutex& m, Body body, with_lock_options options = {}) {
  return detail::with_hold(detail::exclusive_lock<mutex>{m}, std::move(body), options);
}

/// with_lock with a completion token (see above).
template <class Body, detail::not_options CompletionToken>
auto with_lock(mutex& m, Body body, with_lock_options options, CompletionToken&& token) {
  return detail::with_hold_async(detail::exclusive_lock<mutex>{m}, m.get_executor(), std::move(body), options,
                                 std::forward<CompletionToken>(token));
}
/// with_lock(m, body, {}, token).
template <class Body, detail::not_options CompletionToken>
auto with_lock(mutex& m, Body body, CompletionToken&& token) {
  return with_lock(m, std::move(body), with_lock_options{}, std::forward<CompletionToken>(token));
}

/// with_lock on an rw_mutex held exclusively.
template <class Body>
auto with_lock(rw_mutex& m, Body body, with_lock_options options = {}) {
  return detail::with_hold(detail::exclusive_lock<rw_mutex>{m}, std::move(body), options);
}

/// with_lock on an rw_mutex held exclusively, with a completion token.
template <class Body, detail::not_options CompletionToken>
auto with_lock(rw_mutex& m, Body body, with_lock_options options, CompletionToken&& token) {
  return detail::with_hold_async(detail::exclusive_lock<rw_mutex>{m}, m.get_executor(), std::move(body), options,
                                 std::forward<CompletionToken>(token));
}
/// with_lock(m, body, {}, token).
template <class Body, detail::not_options CompletionToken>
auto with_lock(rw_mutex& m, Body body, CompletionToken&& token) {
  return with_lock(m, std::move(body), with_lock_options{}, std::forward<CompletionToken>(token));
}

/// with_lock on every part of a multi_lock: the body runs while all are held, and is cancelled
/// when the session of any part is lost.
template <class Body>
auto with_lock(multi_lock& m, Body body, with_lock_options options = {}) {
  return detail::with_hold(detail::exclusive_lock<multi_lock>{m}, std::move(body), options);
}

/// with_lock on every part of a multi_lock, with a completion token.
template <class Body, detail::not_options CompletionToken>
auto with_lock(multi_lock& m, Body body, with_lock_options options, CompletionToken&& token) {
  return detail::with_hold_async(detail::exclusive_lock<multi_lock>{m}, m.get_executor(), std::move(body), options,
                                 std::forward<CompletionToken>(token));
}
/// with_lock(m, body, {}, token).
template <class Body, detail::not_options CompletionToken>
auto with_lock(multi_lock& m, Body body, CompletionToken&& token) {
  return with_lock(m, std::move(body), with_lock_options{}, std::forward<CompletionToken>(token));
}

/// with_lock on an rw_mutex held shared (async_lock_shared, a rw_mutex::shared_hold); errors and
/// release as with_lock.
template <class Body>
auto with_shared_lock(rw_mutex& m, Body body, with_lock_options options = {}) {
  return detail::with_hold(detail::shared_lock{m}, std::move(body), options);
}

/// with_shared_lock with a completion token (as with_lock's).
template <class Body, detail::not_options CompletionToken>
auto with_shared_lock(rw_mutex& m, Body body, with_lock_options options, CompletionToken&& token) {
  return detail::with_hold_async(detail::shared_lock{m}, m.get_executor(), std::move(body), options,
                                 std::forward<CompletionToken>(token));
}
/// with_shared_lock(m, body, {}, token).
template <class Body, detail::not_options CompletionToken>
auto with_shared_lock(rw_mutex& m, Body body, CompletionToken&& token) {
  return with_shared_lock(m, std::move(body), with_lock_options{}, std::forward<CompletionToken>(token));
}

/// Runs `body()` (or `body(p)`, `p` the semaphore::hold) while holding `n` permits of `sem`; errors
/// and release as with_lock.
template <class Body>
auto with_permits(semaphore& sem, std::int64_t n, Body body, with_lock_options options = {}) {
  return detail::with_hold(detail::permits_lock{sem, n}, std::move(body), options);
}

/// with_permits with a completion token (as with_lock's).
template <class Body, detail::not_options CompletionToken>
auto with_permits(semaphore& sem, std::int64_t n, Body body, with_lock_options options, CompletionToken&& token) {
  return detail::with_hold_async(detail::permits_lock{sem, n}, sem.get_executor(), std::move(body), options,
                                 std::forward<CompletionToken>(token));
}
/// with_permits(sem, n, body, {}, token).
template <class Body, detail::not_options CompletionToken>
auto with_permits(semaphore& sem, std::int64_t n, Body body, CompletionToken&& token) {
  return with_permits(sem, n, std::move(body), with_lock_options{}, std::forward<CompletionToken>(token));
}

}  // namespace coetcd
