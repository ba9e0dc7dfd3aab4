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

/// A txn whose effect is the same applied once or twice (a put-if-absent of our own key, a
/// delete guarded by its create revision): resent on UNAVAILABLE, "no leader" or a leader
/// change within the request deadline, so a leader election shows as a delay, not an error.
/// `resent`, when given, is set if it was sent more than once.
inline asio::awaitable<std::tuple<error_code, txn_result>> idempotent_txn(client& c, txn t,
                                                                          std::shared_ptr<bool> resent = {}) {
  return asio::async_initiate<decltype(as_result), void(error_code, txn_result)>(
      [impl = c.impl()](auto h, txn t, std::shared_ptr<bool> resent) {
        start_txn(impl, std::move(t), handler<txn_result>(std::move(h)),
                  call_options{.idempotent = true, .needs_token = true, .resent = std::move(resent)});
      },
      as_result, std::move(t), std::move(resent));
}

/// A delete of one key of our own, resent like idempotent_txn: deleting it twice leaves it
/// deleted. Only for keys nothing else re-creates while the delete is in flight. Completes
/// with whether the key was there to delete.
inline asio::awaitable<std::tuple<error_code, bool>> idempotent_delete(client& c, std::string key,
                                                                       std::shared_ptr<bool> resent = {}) {
  // Named, not a temporary in the co_await: g++ 12.2 would destroy its shared_ptr twice.
  auto initiation = [impl = c.impl()](auto h, std::string key, std::shared_ptr<bool> resent) {
    start_delete(impl, std::move(key), {}, {}, handler<delete_result>(std::move(h)),
                 call_options{.idempotent = true, .needs_token = true, .resent = std::move(resent)});
  };
  auto [ec, r] = co_await asio::async_initiate<decltype(as_result), void(error_code, delete_result)>(
      initiation, as_result, std::move(key), std::move(resent));
  co_return std::tuple(ec, !ec && r.deleted > 0);
}

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

inline asio::awaitable<bool> cancellation_requested() {
  auto cs = co_await asio::this_coro::cancellation_state;
  co_return cs.cancelled() != asio::cancellation_type::none;
}

}  // namespace coetcd::detail
