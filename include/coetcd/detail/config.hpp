// Asio glue shared by the public headers (the asio alias, default token, initiation); not API.
#pragma once

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_allocator.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/associator.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/prefer.hpp>

#include <type_traits>
#include <utility>

#include <coetcd/error.hpp>

namespace coetcd {
namespace asio = boost::asio;

namespace detail {
class client_impl;
struct watcher_state;
struct kept_lease;

template <class... Args>
using handler = asio::any_completion_handler<void(error_code, Args...)>;

/// The completion token an initiating function uses when none is given: the executor's, as
/// Asio's own I/O objects take it. Objects here use asio::any_io_executor, whose default in
/// Asio 1.81 is none (void), so a call without a token does not compile rather than returning a
/// deferred operation nobody starts; Asio versions that give executors a default give it here.
/// (A per-object default, as asio::as_default_on gives sockets, would need the executor type as
/// a template parameter of every class.)
using default_token = asio::default_completion_token_t<asio::any_io_executor>;

/// A handler that keeps outstanding work on its own associated executor until it is called, as
/// Asio's operations do: a handler bound to another io_context keeps that context's run() going
/// while the operation is pending. Everything else (executor, cancellation slot, allocator) is
/// the wrapped handler's.
template <class Handler>
struct work_tracking_handler {
  using work_type = std::decay_t<decltype(asio::prefer(asio::get_associated_executor(std::declval<const Handler&>()),
                                                       asio::execution::outstanding_work.tracked))>;
  Handler handler;
  work_type work;

  explicit work_tracking_handler(Handler h)
      : handler(std::move(h)),
        work(asio::prefer(asio::get_associated_executor(handler), asio::execution::outstanding_work.tracked)) {}

  template <class... Args>
  void operator()(Args&&... args) {
    auto done = std::move(work);  // released once the handler has run
    std::move(handler)(std::forward<Args>(args)...);
  }
};

/// `ex` as the executor an any_completion_handler reports. Asio 1.81 wraps an any_io_executor
/// in a shared, heap-allocated copy when it converts it, once per query of a type-erased
/// handler's executor; the io_context's own executor, which an any_io_executor usually holds,
/// fits in the small buffer instead. Same target, so the same executor either way.
template <class Executor>
asio::any_completion_executor as_completion_executor(const Executor& ex) noexcept {
  if constexpr (std::is_same_v<Executor, asio::any_completion_executor>) {
    return ex;
  } else {
    if constexpr (std::is_same_v<Executor, asio::any_io_executor>)
      if (auto* io = ex.template target<asio::io_context::executor_type>())
        return asio::any_completion_executor(std::nothrow, *io);
    return asio::any_completion_executor(std::nothrow, ex);
  }
}

/// Whether an allocator is an any_completion_handler's, which allocates from its handler.
template <class Allocator>
struct is_type_erased_allocator : std::false_type {};
template <class T, class... Signatures>
struct is_type_erased_allocator<asio::any_completion_handler_allocator<T, Signatures...>> : std::true_type {};

/// Wraps a token-generic initiation so the operation body (compiled in src/) receives a
/// type-erased handler. Keeps templates in headers thin. Callers forward the token, so `Token`
/// is the token's own type for an rvalue and Asio moves a move-only handler, never copies it.
template <class Signature, class Token, class Start, class... Args>
auto initiate(Token&& token, Start start, Args&&... args) {
  return asio::async_initiate<Token, Signature>(
      [start = std::move(start)](auto h, auto&&... a) mutable {
        start(asio::any_completion_handler<Signature>(work_tracking_handler<decltype(h)>(std::move(h))),
              std::forward<decltype(a)>(a)...);
      },
      token, std::forward<Args>(args)...);  // an lvalue: Asio moves from it when Token is no reference
}
}  // namespace detail
}  // namespace coetcd

namespace boost::asio {
template <template <class, class> class Associator, class Handler, class DefaultCandidate>
struct associator<Associator, coetcd::detail::work_tracking_handler<Handler>, DefaultCandidate>
    : Associator<Handler, DefaultCandidate> {
  static typename Associator<Handler, DefaultCandidate>::type get(
      const coetcd::detail::work_tracking_handler<Handler>& h) noexcept {
    return Associator<Handler, DefaultCandidate>::get(h.handler);
  }
  static auto get(const coetcd::detail::work_tracking_handler<Handler>& h, const DefaultCandidate& c) noexcept
      -> decltype(Associator<Handler, DefaultCandidate>::get(h.handler, c)) {
    return Associator<Handler, DefaultCandidate>::get(h.handler, c);
  }
};
// Asked by the any_completion_handler that holds the wrapper (the candidate is then an
// any_completion_executor), the executor comes back in the form that costs no allocation.
template <class Handler>
struct associator<associated_executor, coetcd::detail::work_tracking_handler<Handler>, any_completion_executor>
    : associated_executor<Handler, any_completion_executor> {  // for its traits only
  using type = any_completion_executor;
  static type get(const coetcd::detail::work_tracking_handler<Handler>& h) noexcept {
    return get(h, any_completion_executor());
  }
  static type get(const coetcd::detail::work_tracking_handler<Handler>& h, const any_completion_executor& c) noexcept {
    return coetcd::detail::as_completion_executor(get_associated_executor(h.handler, c));
  }
};
// A type-erased handler's allocator allocates from that handler's own storage. The wrapper,
// held in an any_completion_handler of its own, must not be freed through it: when the wrapper
// is dropped unrun, the inner handler (and that storage) is gone first. Such an allocator,
// wherever it comes from (a bind_executor around an any_completion_handler too), gives way to
// the default; every other allocator is forwarded.
template <class Handler, class DefaultCandidate>
struct associator<associated_allocator, coetcd::detail::work_tracking_handler<Handler>, DefaultCandidate> {
  using inner = associated_allocator<Handler, DefaultCandidate>;
  static constexpr bool erased = coetcd::detail::is_type_erased_allocator<typename inner::type>::value;
  using type = std::conditional_t<erased, DefaultCandidate, typename inner::type>;
  static type get(const coetcd::detail::work_tracking_handler<Handler>& h) noexcept {
    if constexpr (erased) return DefaultCandidate();
    else return inner::get(h.handler);
  }
  static type get(const coetcd::detail::work_tracking_handler<Handler>& h, const DefaultCandidate& c) noexcept {
    if constexpr (erased) return c;
    else return inner::get(h.handler, c);
  }
};
}  // namespace boost::asio
