// A mutex excludes callers, not sessions. The callers of one session on one name queue locally
// (mutex_queue, FIFO) behind one etcd key of that session, laid out as Go's: the key exists while
// any of them holds or waits, and a hand-off between two of them is a completion posted to the
// executor. A driver task takes the key for the queue (acquire txn, then wait for its turn on the
// shared view). Each grant makes a hold (hold_state), owned by the caller's mutex::hold; its
// release passes the lock to the next local caller, or releases the key. When the
// name's view shows another session waiting, the session releases after a bounded number of
// further local hand-offs or a bounded time, and queues its remaining callers again behind it.
// A holder that asked for a fence (fence(), fencing_token()) makes the next local hand-off put
// the key again first, so that its compares fail under the next holder.
//
// This file holds the public class and the entry points; the queue itself is in
// mutex_queue.cpp (acquiring, clean-ups, release) and mutex_handoff.cpp (grants and hand-offs),
// the holds in lock_hold.cpp.
#include "mutex_queue.hpp"

#include <coetcd/mutex.hpp>

namespace coetcd::detail {
namespace {

// A lock's handler that ends the lock wait's span when it runs: the span ends on the strand, just
// after the handler is called, with the time at the call.
struct lock_span_handler {
  lock_handler handler;
  std::shared_ptr<client_impl> client;
  std::shared_ptr<open_span> span;
  std::shared_ptr<mutex_state> by;  // holds the name the span shows

  void operator()(error_code ec, lock_hold hold) {
    const auto at = std::chrono::steady_clock::now();
    asio::dispatch(client->strand_, [c = client, s = std::move(span), by = std::move(by), ec, at] { s->end(*c, {}, ec, at); });
    std::move(handler)(ec, std::move(hold));
  }
};

}  // namespace
}  // namespace coetcd::detail

// The user's executor and cancellation slot, not its allocator: the wrapper goes into an
// any_completion_handler of its own, whose storage must not be freed through the inner one's
// (destroyed first when the handler is dropped unrun).
namespace boost::asio {
template <class Executor>
struct associated_executor<coetcd::detail::lock_span_handler, Executor> {
  using type = associated_executor_t<coetcd::detail::lock_handler, Executor>;
  static type get(const coetcd::detail::lock_span_handler& h, const Executor& e = Executor()) noexcept {
    return get_associated_executor(h.handler, e);
  }
};
template <class CancellationSlot>
struct associated_cancellation_slot<coetcd::detail::lock_span_handler, CancellationSlot> {
  using type = associated_cancellation_slot_t<coetcd::detail::lock_handler, CancellationSlot>;
  static type get(const coetcd::detail::lock_span_handler& h, const CancellationSlot& s = CancellationSlot()) noexcept {
    return get_associated_cancellation_slot(h.handler, s);
  }
};
}  // namespace boost::asio

namespace coetcd::detail {

void start_lock(const std::shared_ptr<mutex_state>& m, bool try_only, lock_handler h) {
  auto slot = asio::get_associated_cancellation_slot(h);
  const bool cancellable = slot.is_connected();
  auto& impl = m->session->impl;
  auto& strand = impl->strand_;
  auto cancel = cancellable ? early_cancel::take(slot, strand) : nullptr;
  if (!impl->options_.spans) {
    return asio::dispatch(strand, [m, try_only, cancellable, cancel, h = std::move(h)]() mutable {
      queue_of(m)->lock(m, try_only, cancellable, std::move(cancel), std::move(h));
    });
  }
  // The wait is a span; the driver's RPCs for it (spawned inside lock()) are its children.
  asio::dispatch(strand, [m, try_only, cancellable, cancel, from = op_trace::current(), h = std::move(h)]() mutable {
    auto& c = m->session->impl;
    auto span = std::make_shared<open_span>();
    span->begin(*c, "lock", m->name, 0, from.get());
    const op_trace mine{span->id(), from ? from->context : nullptr};
    trace_scope scope(&mine);
    queue_of(m)->lock(m, try_only, cancellable, std::move(cancel), lock_span_handler{std::move(h), c, std::move(span), m});
  });
}

void orphan(std::shared_ptr<mutex_state> m) {
  // On the strand: the object's pending locks complete now with operation_aborted, as an Asio
  // object's operations do when it is destroyed, and a grant on its way is given back. Its holds
  // are their owners' to release.
  auto& strand = m->session->impl->strand_;
  m->orphaned = true;
  asio::dispatch(strand, [m = std::move(m)]() mutable {
    if (m->queue) m->queue->abort_waiters_of(*m);
  });
}

}  // namespace coetcd::detail

namespace coetcd {

mutex::mutex(session& s, std::string_view name, mutex_options options)
    : state_(std::make_shared<detail::mutex_state>()) {
  if (name.empty()) throw boost::system::system_error(make_error_code(error::empty_key), "coetcd: mutex name");
  if (!detail::access::state(s)) throw boost::system::system_error(make_error_code(error::session_lost), "coetcd: mutex session");
  state_->session = detail::access::state(s);
  state_->name = std::string(name);
  state_->prefix = state_->name + "/";
  state_->key = state_->prefix + detail::lease_hex(s.lease());
  state_->options = options;
}

mutex::~mutex() {
  if (state_) detail::orphan(std::move(state_));
}

mutex& mutex::operator=(mutex&& other) noexcept {
  if (this != &other) {
    if (state_) detail::orphan(std::move(state_));
    state_ = std::move(other.state_);
  }
  return *this;
}

void mutex::start_lock(const std::shared_ptr<detail::mutex_state>& m, bool try_only, detail::lock_handler h) {
  if (!m) return detail::fail_empty(std::move(h));
  detail::start_lock(m, try_only, std::move(h));
}

mutex::executor_type mutex::get_executor() const noexcept {
  return state_ ? state_->session->impl->io_ex_ : executor_type();
}
const std::string& mutex::name() const noexcept { return state_ ? state_->name : detail::empty_string(); }
const std::string& mutex::key() const noexcept { return state_ ? state_->key : detail::empty_string(); }

}  // namespace coetcd
