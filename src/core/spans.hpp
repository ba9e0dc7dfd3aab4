// Spans inside the client: an open span, the trace an operation hands to its later work, and the
// executor that carries that trace into the coroutines doing the work.
#pragma once

#include "client_impl.hpp"

#include <coetcd/span.hpp>

#include <boost/asio/any_io_executor.hpp>
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

/// One span between its start and its end; on the strand. The views given to begin() must stay
/// valid until end().
class open_span {
 public:
  bool is_open() const noexcept { return id_ != 0; }
  std::uint64_t id() const noexcept { return id_; }
  void begin(client_impl& c, std::string_view name, std::string_view key, int attempt, const op_trace* from);
  /// Tells on_end and closes the span; `at`: when it ended, if not now.
  void end(client_impl& c, std::string_view member, error_code status,
           std::chrono::steady_clock::time_point at = std::chrono::steady_clock::now());

 private:
  std::uint64_t id_ = 0;
  std::uint64_t parent_ = 0;
  std::string_view name_, key_;
  int attempt_ = 0;
  span_context context_;
  std::chrono::steady_clock::time_point start_;
};

/// An executor that makes `trace` the thread's trace while a function it runs runs: a coroutine
/// spawned on it sends each RPC (wherever it resumes) as part of that trace. Used only while the
/// client has span hooks, so an untraced client's coroutines run on the strand as they are.
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

/// Where an operation's coroutine runs: the strand, or the strand carrying this thread's trace
/// when the client has span hooks and the operation belongs to one.
asio::any_io_executor op_executor(client_impl& c);

/// The key a span shows: without the client's namespace.
std::string_view span_key(const client_impl& c, std::string_view wire_key) noexcept;

}  // namespace coetcd::detail
