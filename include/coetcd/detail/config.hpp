#pragma once

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/deferred.hpp>

#include <coetcd/error.hpp>

namespace coetcd {
namespace asio = boost::asio;

namespace detail {
class client_impl;
struct watcher_state;
struct kept_lease;

template <class... Args>
using handler = asio::any_completion_handler<void(error_code, Args...)>;

/// Wraps a token-generic initiation so the operation body (compiled in src/) receives a
/// type-erased handler. Keeps templates in headers thin.
template <class Signature, class Token, class Start, class... Args>
auto initiate(Token&& token, Start start, Args&&... args) {
  return asio::async_initiate<Token, Signature>(
      [start = std::move(start)](auto h, auto&&... a) mutable {
        start(asio::any_completion_handler<Signature>(std::move(h)), std::forward<decltype(a)>(a)...);
      },
      token, std::forward<Args>(args)...);
}
}  // namespace detail
}  // namespace coetcd
