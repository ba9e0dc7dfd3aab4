// span, span_hooks and with_span_context: a start and an end for each RPC attempt and lock wait.
#pragma once

#include <boost/asio/async_result.hpp>
#include <boost/system/error_code.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <type_traits>
#include <utility>

namespace coetcd {

/// What a caller hands through an operation to its spans (a request id, a trace, a logger):
/// opaque to coetcd, kept alive while any span of the operation is open.
using span_context = std::shared_ptr<const void>;

/// One timed piece of a client's work, as span_hooks see it. Two kinds:
/// - an RPC attempt: `name` is the gRPC method ("Range", "Txn", "LeaseGrant", ...), `attempt`
///   counts from 1 (a retry or resend of the same request is a new span), `member` is the
///   endpoint that answered;
/// - a lock wait: `name` is "lock", `key` the lock's name, `attempt` 0; from the call of
///   mutex::async_lock / async_try_lock (and what builds on them) to its completion.
/// The views are valid during the call of the hook only.
struct span {
  std::uint64_t id = 0;      ///< unique within the client, never 0
  std::uint64_t parent = 0;  ///< the lock wait this RPC was sent for, else 0
  std::string_view name;  ///< the gRPC method ("Range", "Txn", ...), or "lock"
  std::string_view key;  ///< the key (a txn's first compared or written key), without the namespace
  int attempt = 0;  ///< an RPC's attempt, from 1; 0 for a lock wait
  std::string_view member;  ///< at the end of an attempt: the member that answered, where gRPC knows
  std::chrono::steady_clock::time_point start;  ///< when the attempt was sent, or the wait began
  std::chrono::nanoseconds duration{0};  ///< at the end
  boost::system::error_code status;      ///< at the end
  /// The context given with with_span_context to the operation this span belongs to, or to the
  /// lock wait it was sent for; null when none.
  const void* context = nullptr;
};

/// Called at the start and at the end of every span, posted to the client's strand (never inside
/// a coetcd call; an end may come after the operation's handler ran). An exception from a hook
/// is swallowed; a hook must not block. Both empty (the default): no span is made, and nothing
/// is timed or allocated for them. A span open when the io_context is destroyed never ends.
struct span_hooks {
  std::function<void(const span&)> on_start;  ///< told of a span's start (`duration`, `status`, `member` empty)
  std::function<void(const span&)> on_end;    ///< told of its end, with everything
  /// Whether either hook is set.
  explicit operator bool() const noexcept { return on_start || on_end; }
};

/// A completion token that gives the operation it starts a span context: every span of that
/// operation (its RPC attempts; for a lock, the lock wait and the RPCs it sends; for with_lock
/// and stm, every call in the body) carries it. As Asio's adapters, it moves the inner token
/// unless it is const.
///   co_await c.async_get("k", coetcd::with_span_context(request, asio::use_awaitable));
template <class Token>
struct span_context_token {
  span_context context;  ///< what the operation's spans carry
  Token token;           ///< the token the operation completes with
};

/// Gives the operation started with the returned token `context` for its spans, and completes it
/// as `token` would.
template <class Token>
span_context_token<std::decay_t<Token>> with_span_context(span_context context, Token&& token) {
  return {std::move(context), std::forward<Token>(token)};
}

namespace detail {
/// Where this thread's work belongs now: the open lock wait (if any) and the caller's context.
struct trace_point {
  std::uint64_t parent = 0;
  const span_context* context = nullptr;
};
trace_point& current_trace() noexcept;  // thread-local

/// While alive, what this thread initiates belongs to `context` (the initiation runs inside it).
class span_context_scope {
 public:
  explicit span_context_scope(const span_context& context) noexcept
      : previous_(std::exchange(current_trace(), trace_point{0, &context})) {}
  ~span_context_scope() { current_trace() = previous_; }
  span_context_scope(const span_context_scope&) = delete;
  span_context_scope& operator=(const span_context_scope&) = delete;

 private:
  trace_point previous_;
};
}  // namespace detail

}  // namespace coetcd

/// @cond INTERNAL
namespace boost::asio {
// The context is set around the inner token's initiation, whenever that runs (at once for a
// callback, at co_await for use_awaitable, at launch for deferred): coetcd reads it there.
template <class Token, class... Signatures>
struct async_result<coetcd::span_context_token<Token>, Signatures...> {
  template <class Initiation, class RawToken, class... Args>
  static auto initiate(Initiation&& init, RawToken&& token, Args&&... args) {
    // As Asio's own adapters (as_tuple): the inner token is moved from unless it is const.
    using inner = std::conditional_t<std::is_const_v<std::remove_reference_t<RawToken>>, const Token, Token>;
    return asio::async_initiate<inner, Signatures...>(
        [context = token.context, init = std::forward<Initiation>(init)](auto&& handler, auto&&... a) mutable {
          coetcd::detail::span_context_scope scope(context);
          std::move(init)(std::forward<decltype(handler)>(handler), std::forward<decltype(a)>(a)...);
        },
        token.token, std::forward<Args>(args)...);
  }
};
}  // namespace boost::asio
/// @endcond
