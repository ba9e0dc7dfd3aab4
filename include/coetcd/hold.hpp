// coetcd::hold: the concept every hold of the lock family meets (mutex::hold, semaphore::hold, ...).
#pragma once

#include <coetcd/detail/config.hpp>
#include <coetcd/loss_reason.hpp>

#include <boost/asio/deferred.hpp>

#include <concepts>

namespace coetcd {

/// What the holds handed back by the lock family's acquisitions share: mutex::hold,
/// rw_mutex::hold, rw_mutex::shared_hold, semaphore::hold, multi_lock::hold and election::hold.
/// Move-only (one owner); `bool(h)` says whether it still holds; async_release() gives it up,
/// completing with `void(error_code)`; async_wait_lost() completes with
/// `void(error_code, loss_reason)` when it is lost; destroying one that still holds releases it in
/// the background. Generic code (with_lock, say) needs no more. What differs stays on each type:
/// fencing_token() where holders are ordered, proclaim on a leadership, one fence per part on a
/// multi_lock hold.
template <class H>
concept hold = std::movable<H> && !std::copyable<H> && std::default_initializable<H> && requires(H& h, const H& c) {
  { static_cast<bool>(c) } -> std::same_as<bool>;
  { c.get_executor() } -> std::convertible_to<asio::any_io_executor>;
  h.async_release(asio::deferred);
  h.async_wait_lost(asio::deferred);
};

}  // namespace coetcd
