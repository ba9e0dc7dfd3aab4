// Span bookkeeping: ids, the thread's trace, and the calls of the user's span hooks.
#include "spans.hpp"

namespace coetcd::detail {

trace_point& current_trace() noexcept {
  thread_local trace_point point;
  return point;
}

std::shared_ptr<const op_trace> op_trace::current() {
  const auto& p = current_trace();
  if (p.parent == 0 && (!p.context || !*p.context)) return nullptr;
  return std::make_shared<const op_trace>(op_trace{p.parent, p.context ? *p.context : nullptr});
}

namespace {
void call_hook(const std::function<void(const span&)>& hook, const span& s) {
  if (!hook) return;
  try {
    hook(s);
  } catch (...) {  // a hook's failure is not the operation's
  }
}
}  // namespace

void open_span::begin(client_impl& c, std::string_view name, std::string_view key, int attempt, const op_trace* from) {
  id_ = ++c.last_span_id_;
  parent_ = from ? from->parent : 0;
  context_ = from ? from->context : nullptr;
  name_ = name;
  key_ = key;
  attempt_ = attempt;
  start_ = std::chrono::steady_clock::now();
  call_hook(c.options_.spans.on_start, span{.id = id_, .parent = parent_, .name = name_, .key = key_,
                                            .attempt = attempt_, .start = start_, .context = context_.get()});
}

void open_span::end(client_impl& c, std::string_view member, error_code status, std::chrono::steady_clock::time_point at) {
  if (id_ == 0) return;
  call_hook(c.options_.spans.on_end,
            span{.id = id_, .parent = parent_, .name = name_, .key = key_, .attempt = attempt_, .member = member,
                 .start = start_, .duration = at - start_, .status = status, .context = context_.get()});
  id_ = 0;
  context_.reset();
}

asio::any_io_executor op_executor(client_impl& c) {
  if (!c.options_.spans) return c.strand_;
  auto t = op_trace::current();
  if (!t) return c.strand_;
  return traced_executor(c.strand_, std::move(t));
}

std::string_view span_key(const client_impl& c, std::string_view wire_key) noexcept {
  const auto& ns = c.options_.key_prefix;
  if (!ns.empty() && wire_key.substr(0, ns.size()) == ns) wire_key.remove_prefix(ns.size());
  return wire_key;
}

}  // namespace coetcd::detail
