// The holds of the mutex family (detail::lock_hold, which mutex::hold, rw_mutex::hold and
// rw_mutex::shared_hold are): accessors, release, the wait for a loss, and a hold dropped while held.
#include "mutex_queue.hpp"

namespace coetcd::detail {

bool hold_state::holds_now() const { return held && !queue->session->counts_as_lost(); }

void hold_state::end_waits() {
  if (losses) losses->end();
}

lock_hold::operator bool() const noexcept { return state_ && state_->holds_now(); }

std::int64_t lock_hold::fencing_token() noexcept {
  hold_state::fence_read f;
  if (!state_ || !state_->read_fence(f)) return 0;
  return f.token;
}

compare lock_hold::fence() {
  if (!state_) throw_empty("coetcd: fence() of an empty hold");
  const auto& key = state_->queue->key;
  const bool by_create = state_->kind == hold_state::fence_by::create_revision;
  hold_state::fence_read f;
  // Over: a revision no key can have (an absent key's is 0), so the compare never holds.
  if (!state_->read_fence(f)) return by_create ? compare::create_revision(key) == -1 : compare::mod_revision(key) == -1;
  return by_create ? compare::create_revision(key) == f.rev : compare::mod_revision(key) == f.mod_rev;
}

void lock_hold::drop(std::shared_ptr<hold_state> s) noexcept {
  // `held` goes false only on the strand: one seen false here is over for good. One seen true may
  // be ending there now; the strand's unlock then finds it over and does nothing.
  if (!s->held.load()) return;
  auto& strand = s->queue->session->impl->strand_;
  asio::dispatch(strand, [s = std::move(s)] { s->queue->unlock(s, [](error_code) {}); });
}

void lock_hold::start_release(const std::shared_ptr<hold_state>& s, asio::any_completion_handler<void(error_code)> h) {
  if (!s) return fail_empty(std::move(h));
  asio::dispatch(s->queue->session->impl->strand_, [s, h = std::move(h)]() mutable { s->queue->unlock(s, std::move(h)); });
}

void lock_hold::start_wait_lost(const std::shared_ptr<hold_state>& s,
                                asio::any_completion_handler<void(error_code, loss_reason)> h) {
  if (!s) return fail_empty(std::move(h));
  wait_hold_lost(s->queue->session, s->losses, [s] { return !s->held; }, std::move(h), s);
}

lock_hold::executor_type lock_hold::get_executor() const noexcept {
  return state_ ? state_->queue->session->impl->io_ex_ : executor_type();
}
const std::string& lock_hold::key() const noexcept { return state_ ? state_->queue->key : empty_string(); }
std::uint64_t lock_hold::local_sequence() const noexcept { return state_ ? state_->sequence : 0; }
response_header lock_hold::header() const noexcept { return state_ ? state_->header.load() : response_header{}; }

}  // namespace coetcd::detail
