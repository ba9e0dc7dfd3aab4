// The trace an operation hands to its later work, and the executor that carries it into the
// coroutines doing that work (span hooks, see span.hpp). Not API.
#pragma once

#include <coetcd/detail/config.hpp>
#include <coetcd/span.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/execution.hpp>
#include <boost/asio/prefer.hpp>
#include <boost/asio/query.hpp>
#include <boost/asio/require.hpp>

namespace coetcd::detail {

/// What the later work of an operation belongs to: its open lock wait (if any) and a copy of the
/// caller's context. Made only while the client has span hooks.
struct op_trace {
  std::uint64_t parent = 0;
  span_context context;
  /// The trace of this thread's work now, or null when it belongs to nothing.
  static std::shared_ptr<const op_trace> current();
};

/// Makes `t` this thread's trace while alive (null: none).
class trace_scope {
 public:
  explicit trace_scope(const op_trace* t) noexcept
      : previous_(std::exchange(current_trace(), t ? trace_point{t->parent, &t->context} : trace_point{})) {}
  ~trace_scope() { current_trace() = previous_; }
  trace_scope(const trace_scope&) = delete;
  trace_scope& operator=(const trace_scope&) = delete;

 private:
  trace_point previous_;
};

/// An executor that makes `trace` the thread's trace while a function it runs runs: a coroutine
/// spawned on it sends each RPC (wherever it resumes) as part of that trace. The library's own
/// coroutines use it only while the client has span hooks; with_lock's and stm's token forms
/// whenever the caller gave a context, hooks or not (they do not see the client's options).
class traced_executor {
 public:
  traced_executor(asio::any_io_executor inner, std::shared_ptr<const op_trace> trace) noexcept
      : inner_(std::move(inner)), trace_(std::move(trace)) {}

  template <class Property>
  auto query(const Property& p) const -> decltype(asio::query(std::declval<const asio::any_io_executor&>(), p)) {
    return asio::query(inner_, p);
  }
  template <class Property>
    requires asio::can_require<const asio::any_io_executor&, const Property&>::value
  traced_executor require(const Property& p) const {
    return traced_executor(asio::require(inner_, p), trace_);
  }
  template <class Property>
    requires asio::can_prefer<const asio::any_io_executor&, const Property&>::value
  traced_executor prefer(const Property& p) const {
    return traced_executor(asio::prefer(inner_, p), trace_);
  }

  template <class F>
  void execute(F&& f) const {
    inner_.execute([t = trace_, f = std::forward<F>(f)]() mutable {
      trace_scope scope(t.get());
      std::move(f)();
    });
  }

  friend bool operator==(const traced_executor& a, const traced_executor& b) noexcept {
    return a.inner_ == b.inner_ && a.trace_ == b.trace_;
  }
  friend bool operator!=(const traced_executor& a, const traced_executor& b) noexcept { return !(a == b); }

 private:
  asio::any_io_executor inner_;
  std::shared_ptr<const op_trace> trace_;
};

/// The completion of a traced coroutine, which may be dispatched inline inside the traced
/// function: the caller's code after it is no part of that trace. The trace is dropped only
/// when it is that coroutine's own: a caller that is itself traced (a body inside a body) has
/// set its own trace by then, through its own executor, and keeps it.
template <class Handler>
struct untraced_handler {
  Handler handler;
  std::shared_ptr<const op_trace> trace;  // the coroutine's
  template <class... Args>
  void operator()(Args&&... args) {
    if (current_trace().context != &trace->context) return std::move(handler)(std::forward<Args>(args)...);
    const trace_scope none(nullptr);
    std::move(handler)(std::forward<Args>(args)...);
  }
};

}  // namespace coetcd::detail

// The handler's executor and cancellation slot; not its allocator (the handler may be a
// type-erased one, whose allocator allocates from its own storage).
namespace boost::asio {
template <class Handler, class Executor>
struct associated_executor<coetcd::detail::untraced_handler<Handler>, Executor> {
  using type = associated_executor_t<Handler, Executor>;
  static type get(const coetcd::detail::untraced_handler<Handler>& h, const Executor& e = Executor()) noexcept {
    return get_associated_executor(h.handler, e);
  }
};
template <class Handler, class CancellationSlot>
struct associated_cancellation_slot<coetcd::detail::untraced_handler<Handler>, CancellationSlot> {
  using type = associated_cancellation_slot_t<Handler, CancellationSlot>;
  static type get(const coetcd::detail::untraced_handler<Handler>& h,
                  const CancellationSlot& s = CancellationSlot()) noexcept {
    return get_associated_cancellation_slot(h.handler, s);
  }
};
}  // namespace boost::asio
