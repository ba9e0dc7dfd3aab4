// Span bookkeeping: ids, the thread's trace, and the calls of the user's span hooks.
#include "spans.hpp"

#include <boost/asio/post.hpp>

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

// The hook's call, posted: what the span's views point at travels with it.
void post_hook(client_impl& c, bool start, span s, std::string key, std::string member, span_context context) {
  asio::post(c.strand_, [c = c.shared_from_this(), start, s, key = std::move(key), member = std::move(member),
                         context = std::move(context)]() mutable {
    const auto& hook = start ? c->options_.spans.on_start : c->options_.spans.on_end;
    if (!hook) return;
    s.key = key;
    s.member = member;
    try {
      hook(s);
    } catch (...) {  // a hook's failure is not the operation's
    }
  });
}

}  // namespace

void open_span::begin(client_impl& c, std::string_view name, std::string_view key, int attempt, const op_trace* from) {
  id_ = ++c.last_span_id_;
  parent_ = from ? from->parent : 0;
  context_ = from ? from->context : nullptr;
  name_ = name;
  key_.assign(key);
  attempt_ = attempt;
  start_ = std::chrono::steady_clock::now();
  if (c.options_.spans.on_start) {
    const span s{.id = id_, .parent = parent_, .name = name_, .attempt = attempt_, .start = start_, .context = context_.get()};
    post_hook(c, true, s, key_, {}, context_);
  }
}

void open_span::end(client_impl& c, std::string_view member, error_code status, std::chrono::steady_clock::time_point at) {
  if (id_ == 0) return;
  if (c.options_.spans.on_end) {
    const span s{.id = id_, .parent = parent_, .name = name_, .attempt = attempt_, .start = start_,
                 .duration = at - start_, .status = status, .context = context_.get()};
    post_hook(c, false, s, std::move(key_), std::string(member), std::move(context_));  // (s read it first)
  }
  id_ = 0;
  context_.reset();
  key_.clear();
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
