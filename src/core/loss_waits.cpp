// loss_waits: the async_wait_lost callers of one hold, and the session listener that tells them.
#include "loss_waits.hpp"

namespace coetcd::detail {

void loss_waits::wait(handler<loss_reason> h, const std::shared_ptr<early_cancel>& cancel) {
  const auto aborted = make_error_code(asio::error::operation_aborted);
  if (lost_) return session_->impl->complete(std::move(h), error_code{}, *lost_);
  if (ended_) return session_->impl->complete(std::move(h), aborted, loss_reason{});
  if (session_->lost) return session_->impl->complete(std::move(h), error_code{}, session_->loss());
  auto id = next_++;
  if (cancel->registered([w = weak_from_this(), id] {
        auto self = w.lock();
        if (!self) return;
        auto it = self->waiters_.find(id);
        if (it == self->waiters_.end()) return;
        auto h = std::move(it->second);
        self->waiters_.erase(it);
        self->session_->impl->complete(std::move(h), make_error_code(asio::error::operation_aborted), loss_reason{});
      }))
    return session_->impl->complete(std::move(h), aborted, loss_reason{});
  waiters_.emplace(id, std::move(h));
  if (listener_) return;
  // Weak: the hold owns this; its end (or its drop) ends the waits.
  listener_ = session_->listen([w = weak_from_this()] {
    auto self = w.lock();
    if (!self) return;
    self->listener_.reset();
    auto& s = *self->session_;
    for (auto& [id, h] : std::exchange(self->waiters_, {})) s.impl->complete(std::move(h), error_code{}, s.loss());
  });
}

void loss_waits::end() {
  ended_ = true;
  if (listener_) session_->unlisten(*std::exchange(listener_, std::nullopt));
  abort_all();
}

void loss_waits::lose(loss_reason why) {
  lost_ = why;
  if (listener_) session_->unlisten(*std::exchange(listener_, std::nullopt));
  for (auto& [id, h] : std::exchange(waiters_, {})) session_->impl->complete(std::move(h), error_code{}, why);
}

void loss_waits::abort_all() {
  for (auto& [id, h] : std::exchange(waiters_, {}))
    session_->impl->complete(std::move(h), make_error_code(asio::error::operation_aborted), loss_reason{});
}

}  // namespace coetcd::detail
