// What with_lock and stm share: a coroutine body's value type, and their completion-token form,
// which spawns the coroutine on a new strand of the object's executor (not the handler's). Not API.
#pragma once

#include <coetcd/detail/config.hpp>
#include <coetcd/detail/trace.hpp>

#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/system_executor.hpp>
#include <boost/system/system_error.hpp>

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
/// `ex` (the object's executor: not the handler's, which for asio::use_future is a thread pool of
/// Asio's), so that a coroutine using `||` stays on one strand even on a thread pool. Completes as
/// co_spawn does (never inline, on the handler's associated executor; terminal cancellation from
/// the handler's slot). An empty `ex` (a moved-from object): asio::error::bad_descriptor.
template <class T, class Token, class Make>
auto spawn_on_strand(Token&& token, asio::any_io_executor ex, Make make) {
  return asio::async_initiate<Token, typename spawn_signature<T>::type>(
      [](auto handler, asio::any_io_executor ex, Make make) {
        if (!ex) {
          auto error = std::make_exception_ptr(
              boost::system::system_error(make_error_code(asio::error::bad_descriptor), "coetcd: an empty object"));
          auto to = asio::get_associated_executor(handler, asio::system_executor());
          if constexpr (std::is_void_v<T>)
            asio::post(to, [h = std::move(handler), error]() mutable { std::move(h)(error); });
          else
            asio::post(to, [h = std::move(handler), error]() mutable { std::move(h)(error, T{}); });
          return;
        }
        auto strand = asio::make_strand(std::move(ex));
        // Given a span context (with_span_context), the body's calls carry it wherever it
        // resumes, and the caller's code after it does not.
        if (auto trace = op_trace::current())
          return asio::co_spawn(traced_executor(std::move(strand), trace), make(),
                                untraced_handler<decltype(handler)>{std::move(handler), trace});
        asio::co_spawn(std::move(strand), make(), std::move(handler));
      },
      token, std::move(ex), std::move(make));
}

}  // namespace coetcd::detail
