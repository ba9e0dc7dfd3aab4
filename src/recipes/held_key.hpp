// What leader and registration share: a key held under a session, watched until it is no longer
// ours, the failures no retry mends, and the clean-up that no cancellation cuts short.
#pragma once

#include "core/coro.hpp"
#include "core/session_state.hpp"

#include <coetcd/session.hpp>
#include <coetcd/watch.hpp>

#include <chrono>
#include <random>

namespace coetcd::detail {

/// A failure no retry mends: a run ends with it (client closed, credentials, permission, input).
bool fatal(const error_code& ec);

/// An as_tuple(use_awaitable) token whose handler has no cancellation slot: clean-ups run to
/// their end whatever is cancelled meanwhile.
inline auto unstoppable() { return asio::bind_cancellation_slot(asio::cancellation_slot(), as_result); }

/// Whether a coroutine was cancelled (an operation that completed anyway does not say so):
/// `cancelled(co_await asio::this_coro::cancellation_state)`, which never throws, where a
/// `co_await` of an awaitable would throw operation_aborted while throw_if_cancelled is on.
inline bool cancelled(const asio::cancellation_state& s) { return s.cancelled() != asio::cancellation_type::none; }

/// session::async_create on the client's state (see start_session_create).
inline auto create_session_on(const std::shared_ptr<client_impl>& c, session_options o) {
  auto init = [c](asio::any_completion_handler<void(error_code, session)> h, session_options o) {
    start_session_create(c, o, std::move(h));
  };
  return asio::async_initiate<decltype(as_result), void(error_code, session)>(init, as_result, o);
}

/// Completes when `s` is lost, with why (never an empty code).
asio::awaitable<error_code> wait_lost(session& s);

/// Completes with `gone` once `key` is deleted, or put again other than by us (another create
/// revision than `rev`, or another lease than `lease`), after `put_rev`, the revision of our last
/// put of it: what the session alone never tells (a key deleted by hand). The events before
/// `put_rev` are not looked at: a key put over by someone else and then by us again keeps its
/// create revision, and that older put must not count. A watch that fails is followed by a read
/// of the key and a new watch from the read's revision. operation_aborted when cancelled.
asio::awaitable<error_code> wait_key_gone(const std::shared_ptr<client_impl>& c, const std::string& key, std::int64_t rev, std::int64_t lease,
                                          std::int64_t put_rev, error_code gone);

/// Waits until `key` is deleted (kind::del) or put (kind::put) at revision `from` or later, as
/// Go's recipe.WaitEvents. A watch that fails is followed by a read (an absent key, or one put
/// since `from`, ends the wait) and a new watch. Cancellation throws, as use_awaitable does.
asio::awaitable<error_code> wait_key_event(const std::shared_ptr<client_impl>& c, const std::string& key,
                                           std::int64_t from, watch_event::kind k);

/// Closes `s` (revoking its lease deletes its keys), whatever is cancelled meanwhile. The caller
/// must not throw when cancelled (throw_if_cancelled(false)), or this would not even start.
/// A close that fails leaves the keys to the lease's TTL.
asio::awaitable<void> close_whatever_happens(session& s);

/// `min` doubling per failed attempt up to `max`, drawn from 0.5x to 1.5x: callers that failed
/// together (an outage) do not all come back together.
std::chrono::milliseconds backoff(std::chrono::milliseconds min, std::chrono::milliseconds max, int attempt,
                                  std::minstd_rand& spread);

}  // namespace coetcd::detail
