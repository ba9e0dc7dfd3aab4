// What with_lock and stm share: a coroutine body's value type, and their completion-token form,
// which spawns the coroutine on a strand of the handler's executor. Not API.
#pragma once

#include <coetcd/detail/config.hpp>

#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/strand.hpp>

#include <exception>
#include <type_traits>
#include <utility>

namespace coetcd::detail {

/// T of the asio::awaitable<T> that `body(args...)` returns.
template <class Body, class... Args>
using body_value_t = typename std::invoke_result_t<Body&, Args...>::value_type;

/// co_spawn's completion signature for a coroutine returning T: an exception, then the value.
template <class T>
struct spawn_signature {
  using type = void(std::exception_ptr, T);
};
template <>
struct spawn_signature<void> {
  using type = void(std::exception_ptr);
};

/// Starts `make()` (returning asio::awaitable<T>) as a coroutine of its own on a new strand of
/// the handler's associated executor (default: `fallback`), so that a coroutine using `||` stays
/// on one strand even when that executor is a thread pool's. Completes as co_spawn does (never
/// inline; terminal cancellation from the handler's slot).
template <class T, class Token, class Make>
auto spawn_on_strand(Token&& token, asio::any_io_executor fallback, Make make) {
  return asio::async_initiate<Token, typename spawn_signature<T>::type>(
      [](auto handler, asio::any_io_executor fallback, Make make) {
        auto strand = asio::make_strand(asio::get_associated_executor(handler, fallback));
        asio::co_spawn(std::move(strand), make(), std::move(handler));
      },
      token, std::move(fallback), std::move(make));
}

}  // namespace coetcd::detail
