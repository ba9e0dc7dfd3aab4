// The key watch, loss wait, clean-up and backoff that leader and registration share.
#include "recipes/held_key.hpp"
#include "recipes/queue_ops.hpp"

#include <coetcd/watcher.hpp>

#include <boost/asio/steady_timer.hpp>

namespace coetcd::detail {

bool fatal(const error_code& ec) {
  return ec == error::client_closed || ec == error::auth_failed || ec == error::auth_required ||
         ec == error::invalid_auth_token || ec == error::permission_denied || ec == error::invalid_argument ||
         ec == error::empty_key;
}

asio::awaitable<bool> cancelled() {
  auto state = co_await asio::this_coro::cancellation_state;
  co_return state.cancelled() != asio::cancellation_type::none;
}

asio::awaitable<error_code> wait_lost(session& s) {
  auto [ec] = co_await s.async_wait_lost(as_result);
  co_return ec ? ec : make_error_code(error::session_lost);
}

namespace {

bool still_ours(const key_value& kv, std::int64_t rev, std::int64_t lease) {
  return kv.create_revision == rev && kv.lease == lease;
}

// One watch of the key from `from`: `gone` once it is no longer ours, operation_aborted when
// cancelled, empty when the watch failed (`from` then says where to go on).
asio::awaitable<error_code> follow_key(client& c, const std::string& key, std::int64_t rev, std::int64_t lease,
                                       error_code gone, std::int64_t& from) {
  error_code out;
  watch_options o;
  o.start_revision = from;
  auto [wec, w] = co_await c.async_watch(key, o, as_result);
  while (!wec && !out) {
    auto [nec, batch] = co_await w.async_next(as_result);
    if (nec) break;
    for (auto& e : batch.events)
      if (e.type == watch_event::kind::del || !still_ours(e.kv, rev, lease)) out = gone;
    from = std::max(from, batch.header.revision + 1);
  }
  if (!out && co_await cancelled()) out = asio::error::operation_aborted;
  co_return out;
}

}  // namespace

asio::awaitable<error_code> wait_key_gone(client& c, const std::string& key, std::int64_t rev, std::int64_t lease,
                                          error_code gone) {
  std::int64_t from = rev + 1;
  error_code out;
  for (int attempt = 0; !out; ++attempt) {
    out = co_await follow_key(c, key, rev, lease, gone, from);
    if (out) break;
    auto [gec, r] = co_await c.async_get(key, as_result);
    if (co_await cancelled()) out = asio::error::operation_aborted;
    else if (!gec && (r.kvs.empty() || !still_ours(r.kvs.front(), rev, lease))) out = gone;
    if (out) break;
    if (!gec) from = r.header.revision + 1;
    asio::steady_timer pause(co_await asio::this_coro::executor, retry_pause(std::min(attempt, 4)));
    co_await pause.async_wait(as_result);
  }
  co_return out;
}

asio::awaitable<bool> close_whatever_happens(session& s) {
  bool was_cancelled = co_await cancelled();
  co_await asio::this_coro::reset_cancellation_state();
  co_await asio::this_coro::throw_if_cancelled(false);
  auto [ec] = co_await s.async_close(unstoppable());
  (void)ec;
  co_await asio::this_coro::throw_if_cancelled(true);
  co_return was_cancelled;
}

std::chrono::milliseconds backoff(std::chrono::milliseconds min, std::chrono::milliseconds max, int attempt,
                                  std::minstd_rand& spread) {
  auto base = min;
  for (int i = 0; i < attempt && base < max; ++i) base *= 2;
  base = std::min(base, max);
  std::uniform_real_distribution<double> f(0.5, 1.5);
  return std::chrono::milliseconds(static_cast<std::int64_t>(static_cast<double>(base.count()) * f(spread)));
}

}  // namespace coetcd::detail
