// The async_wait_lost callers of one hold (lock, permits, leadership): told its session's loss with
// success and a loss_reason, or operation_aborted when the hold ends first.
#pragma once

#include "session_state.hpp"

#include <map>
#include <memory>
#include <optional>

namespace coetcd::detail {

/// Made by a hold at its first async_wait_lost (most holds are never waited on); all on the strand.
/// One session listener serves every caller while any waits.
class loss_waits : public std::enable_shared_from_this<loss_waits> {
 public:
  explicit loss_waits(std::shared_ptr<session_state> s) : session_(std::move(s)) {}
  loss_waits(const loss_waits&) = delete;
  loss_waits& operator=(const loss_waits&) = delete;
  /// A hold dropped with callers waiting (its grant never reached anyone): they are aborted.
  ~loss_waits() { abort_all(); }

  /// Adds a caller; completes it at once (posted) when the hold is over or the session lost.
  /// `cancel`: its cancellation, taken in the initiating function.
  void wait(handler<loss_reason> h, const std::shared_ptr<early_cancel>& cancel);
  /// The hold is over (released, given back): every caller, and each later one, gets operation_aborted.
  void end();
  /// The hold is lost for a reason of its own (its key gone): every caller, and each later one,
  /// gets success and `why`.
  void lose(loss_reason why);

 private:
  void abort_all();
  std::shared_ptr<session_state> session_;
  std::map<std::uint64_t, handler<loss_reason>> waiters_;
  std::optional<std::uint64_t> listener_;
  std::uint64_t next_ = 0;
  bool ended_ = false;
  std::optional<loss_reason> lost_;
};

/// The initiating part of a hold's async_wait_lost, on any thread: takes the caller's cancellation,
/// then on the strand makes `slot` (the hold's loss_waits, on the strand) if needed, ends it when
/// `over()` says the hold is over, and adds the caller.
template <class Over>
void wait_hold_lost(const std::shared_ptr<session_state>& s, std::shared_ptr<loss_waits>& slot, Over over,
                    handler<loss_reason> h, std::shared_ptr<void> keep) {
  auto cancel = early_cancel::take(asio::get_associated_cancellation_slot(h), s->impl->strand_);
  asio::dispatch(s->impl->strand_, [s, &slot, over = std::move(over), h = std::move(h), cancel, keep = std::move(keep)]() mutable {
    if (!slot) slot = std::make_shared<loss_waits>(s);
    if (over()) slot->end();
    slot->wait(std::move(h), cancel);
  });
}

}  // namespace coetcd::detail
