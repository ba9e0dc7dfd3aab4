// Spans inside the client: an open span and where an operation's coroutine runs.
#pragma once

#include "client_impl.hpp"

#include <coetcd/detail/trace.hpp>

namespace coetcd::detail {

/// One span between its start and its end; on the strand. The hooks are posted to the strand,
/// never called inside the call that starts or ends the span (which may be the user's own call).
class open_span {
 public:
  bool is_open() const noexcept { return id_ != 0; }
  std::uint64_t id() const noexcept { return id_; }
  /// `name` must be a string that lives for ever (a method's name, "lock").
  void begin(client_impl& c, std::string_view name, std::string_view key, int attempt, const op_trace* from);
  /// Tells on_end and closes the span; `at`: when it ended, if not now.
  void end(client_impl& c, std::string_view member, error_code status,
           std::chrono::steady_clock::time_point at = std::chrono::steady_clock::now());

 private:
  std::uint64_t id_ = 0;
  std::uint64_t parent_ = 0;
  std::string_view name_;
  std::string key_;
  int attempt_ = 0;
  span_context context_;
  std::chrono::steady_clock::time_point start_;
};

/// Where an operation's coroutine runs: the strand, or the strand carrying this thread's trace
/// when the client has span hooks and the operation belongs to one.
asio::any_io_executor op_executor(client_impl& c);

/// The key a span shows: without the client's namespace.
std::string_view span_key(const client_impl& c, std::string_view wire_key) noexcept;

}  // namespace coetcd::detail
