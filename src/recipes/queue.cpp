// queue and priority_queue: the objects' side (construction, close, the operations' entry onto
// the client's strand with their cancellation).
#include "recipes/item_queue.hpp"
#include "recipes/queue_ops.hpp"

#include <coetcd/priority_queue.hpp>

#include <atomic>
#include <cstdio>
#include <random>

namespace coetcd::detail {

std::shared_ptr<queue_state> make_queue(session& s, std::string_view name, bool priority, queue_options o) {
  auto fail = [](error e) { throw boost::system::system_error(make_error_code(e), "coetcd::queue"); };
  if (name.empty()) fail(error::empty_key);
  if (!detail::access::state(s) || s.lost()) fail(error::session_lost);
  if (o.max_batch == 0 || o.max_batch > 100) fail(error::invalid_argument);
  auto q = std::make_shared<queue_state>();
  q->session = detail::access::state(s);
  q->impl = detail::access::state(s)->impl;
  q->name = std::string(name);
  q->prefix = q->name + "/";
  q->priority = priority;
  q->options = o;
  // One receipt pair per object: objects sharing a lease, even in other processes, never share one.
  static std::atomic<std::uint64_t> objects{0};
  std::random_device random;
  char id[40];
  std::snprintf(id, sizeof id, "%08x%08x.%llu", random(), random(), static_cast<unsigned long long>(++objects));
  const auto base = "__coetcd-queue/" + q->name + "/" + lease_hex(q->session->lease) + "." + id;
  q->puts.receipt = base + "/in";
  q->takes.receipt = base + "/out";
  asio::dispatch(q->impl->strand_, [q] { q->start(); });
  return q;
}

void close_queue(std::shared_ptr<queue_state>& q) noexcept {
  if (!q) return;
  auto s = std::move(q);
  asio::dispatch(s->impl->strand_, [s] { s->close(); });
}

namespace {
// Terminal, partial or total cancellation removes a waiting operation; one that has left in a
// txn runs to its outcome (a dequeue's `cancelled` flag then says what to do with its item).
template <class Remove>
void on_cancel(const std::shared_ptr<queue_state>& q, const std::shared_ptr<handler<std::string>>& shared,
               std::shared_ptr<std::atomic<bool>> cancelled, Remove remove) {
  auto slot = asio::get_associated_cancellation_slot(*shared);
  if (!slot.is_connected()) return;
  slot.assign([q, w = std::weak_ptr<handler<std::string>>(shared), cancelled, remove](asio::cancellation_type) {
    if (cancelled) *cancelled = true;
    asio::dispatch(q->impl->strand_, [q, w, remove] {
      auto h = w.lock();
      if (!h || !*h || !remove(*q, h)) return;
      q->complete(h, asio::error::operation_aborted, {});
      if (q->takers.empty() && q->wake) q->wake->cancel();  // stop waiting for puts nobody takes
    });
  });
}
}  // namespace

void start_enqueue(const std::shared_ptr<queue_state>& q, std::string value, int priority, handler<std::string> h) {
  if (!q) return fail_empty(std::move(h));
  auto shared = std::make_shared<handler<std::string>>(std::move(h));
  on_cancel(q, shared, nullptr, [](queue_state& s, const std::shared_ptr<handler<std::string>>& h) {
    auto at = std::find_if(s.waiting_puts.begin(), s.waiting_puts.end(), [&](auto& p) { return p.h == h; });
    if (at == s.waiting_puts.end()) return false;
    s.waiting_puts.erase(at);
    return true;
  });
  asio::dispatch(q->impl->strand_, [q, shared, value = std::move(value), priority]() mutable {
    q->enqueue(queued_put{std::move(value), priority, {}, shared});
  });
}

void start_dequeue(const std::shared_ptr<queue_state>& q, handler<std::string> h) {
  if (!q) return fail_empty(std::move(h));
  auto shared = std::make_shared<handler<std::string>>(std::move(h));
  auto cancelled = std::make_shared<std::atomic<bool>>(false);
  on_cancel(q, shared, cancelled, [](queue_state& s, const std::shared_ptr<handler<std::string>>& h) {
    auto at = std::find_if(s.takers.begin(), s.takers.end(), [&](auto& t) { return t.h == h; });
    if (at == s.takers.end()) return false;
    s.takers.erase(at);
    return true;
  });
  asio::dispatch(q->impl->strand_, [q, shared, cancelled] { q->dequeue(taker{shared, cancelled}); });
}

asio::any_io_executor queue_executor(const std::shared_ptr<queue_state>& q) noexcept {
  return q ? q->impl->io_ex_ : asio::any_io_executor();
}
const std::string& queue_name(const std::shared_ptr<queue_state>& q) noexcept { return q ? q->name : empty_string(); }

}  // namespace coetcd::detail
