// Operation bodies written as coroutines: run on the client's strand, complete a type-erased
// user handler (posted, never inline), and take per-operation cancellation from it.
#pragma once

#include "client_impl.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>

namespace coetcd::detail {

using asio::use_awaitable;
inline constexpr auto as_result = asio::as_tuple(asio::use_awaitable);

inline error_code exception_to_error(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const boost::system::system_error& se) {
    return se.code();
  } catch (...) {
    return make_error_code(boost::system::errc::state_not_recoverable);
  }
}

/// Runs `body` (returning error_code) and completes `h` with it.
inline void spawn_op(const std::shared_ptr<client_impl>& c, asio::awaitable<error_code> body,
                     asio::any_completion_handler<void(error_code)> h) {
  auto slot = asio::get_associated_cancellation_slot(h);
  asio::co_spawn(c->strand_, std::move(body),
                 asio::bind_cancellation_slot(slot, [c, h = std::move(h)](std::exception_ptr e, error_code ec) mutable {
                   c->complete(std::move(h), e ? exception_to_error(e) : ec);
                 }));
}

/// Lets the body see terminal, partial and total cancellation and handle it itself (cleanup
/// before completing) instead of throwing at the next co_await.
inline asio::awaitable<void> handle_cancellation_manually() {
  co_await asio::this_coro::reset_cancellation_state(asio::enable_total_cancellation());
  co_await asio::this_coro::throw_if_cancelled(false);
}

/// Whether anyone can cancel this operation: its handler came with a connected cancellation slot.
inline asio::awaitable<bool> can_be_cancelled() {
  auto cs = co_await asio::this_coro::cancellation_state;
  co_return cs.slot().is_connected();
}

inline asio::awaitable<bool> cancellation_requested() {
  auto cs = co_await asio::this_coro::cancellation_state;
  co_return cs.cancelled() != asio::cancellation_type::none;
}

}  // namespace coetcd::detail
