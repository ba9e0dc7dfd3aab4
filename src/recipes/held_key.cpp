// The key watch, loss wait, clean-up and backoff that leader and registration share.
#include "recipes/held_key.hpp"
#include "recipes/queue_ops.hpp"

#include <coetcd/watcher.hpp>

#include <boost/asio/steady_timer.hpp>

namespace coetcd::detail {

bool fatal(const error_code& ec) {
  // Not invalid_auth_token: the client authenticates again, and an auth store that changed
  // twice in quick succession passes.
  return ec == error::client_closed || ec == error::auth_failed || ec == error::auth_required ||
         ec == error::permission_denied || ec == error::invalid_argument || ec == error::empty_key;
}

asio::awaitable<error_code> wait_lost(session& s) {
  auto [ec, why] = co_await s.async_wait_lost(as_result);
  co_return ec ? ec : why.cause;
}

namespace {

bool still_ours(const key_value& kv, std::int64_t rev, std::int64_t lease) {
  return kv.create_revision == rev && kv.lease == lease;
}

// One watch of the key from `from`: `gone` once it is no longer ours, operation_aborted when
// cancelled, empty when the watch failed (`from` then says where to go on).
asio::awaitable<error_code> follow_key(const std::shared_ptr<client_impl>& c, const std::string& key, std::int64_t rev, std::int64_t lease,
                                       error_code gone, std::int64_t& from) {
  error_code out;
  watch_options o;
  o.start_revision = from;
  // With throw_if_cancelled off, a cancel absorbed by an operation that completed anyway is seen
  // only by asking: ask before each new wait, or that wait would never end.
  auto [wec, w] = co_await watch_on(c, key, o);
  while (!wec && !out && !cancelled(co_await asio::this_coro::cancellation_state)) {
    auto [nec, batch] = co_await w.async_next(as_result);
    if (nec) break;
    for (auto& e : batch.events)
      if (e.type == watch_event::kind::del || !still_ours(e.kv, rev, lease)) out = gone;
    // A catch-up batch's header may be past its last event: go on from the events.
    if (!batch.events.empty()) from = std::max(from, batch.events.back().kv.mod_revision + 1);
  }
  if (!out && cancelled(co_await asio::this_coro::cancellation_state)) out = asio::error::operation_aborted;
  co_return out;
}

}  // namespace

asio::awaitable<error_code> wait_key_gone(const std::shared_ptr<client_impl>& c, const std::string& key,
                                          std::int64_t rev, std::int64_t lease, std::int64_t put_rev, error_code gone) {
  co_await asio::this_coro::throw_if_cancelled(false);  // a cancel is answered with operation_aborted
  std::int64_t from = put_rev + 1;
  error_code out;
  for (int attempt = 0; !out; ++attempt) {
    out = co_await follow_key(c, key, rev, lease, gone, from);
    if (out) break;
    auto [gec, r] = co_await get_on(c, key, get_options{});
    if (cancelled(co_await asio::this_coro::cancellation_state)) out = asio::error::operation_aborted;
    else if (!gec && (r.kvs.empty() || !still_ours(r.kvs.front(), rev, lease))) out = gone;
    if (out) break;
    if (!gec) from = r.header.revision + 1;
    if (cancelled(co_await asio::this_coro::cancellation_state)) break;  // out is set below
    asio::steady_timer pause(co_await asio::this_coro::executor, retry_pause(std::min(attempt, 4)));
    co_await pause.async_wait(as_result);
  }
  if (!out) out = asio::error::operation_aborted;
  co_return out;
}

asio::awaitable<error_code> wait_key_event(const std::shared_ptr<client_impl>& c, const std::string& key,
                                           std::int64_t from, watch_event::kind k) {
  const std::int64_t first = from;
  error_code out;
  for (int attempt = 0;; ++attempt) {
    watch_options o;
    o.start_revision = from;
    bool seen = false;
    auto [wec, w] = co_await watch_on(c, key, o);
    while (!wec && !seen) {
      auto [nec, batch] = co_await w.async_next(as_result);
      if (nec) break;
      for (auto& e : batch.events) seen = seen || e.type == k;
      if (!batch.events.empty()) from = std::max(from, batch.events.back().kv.mod_revision + 1);
    }
    if (seen) break;
    auto [gec, r] = co_await get_on(c, key, get_options{});
    if (!gec) {
      bool absent = r.kvs.empty();
      if (k == watch_event::kind::del ? absent : (!absent && r.kvs.front().mod_revision >= first)) break;
      from = r.header.revision + 1;
    } else if (fatal(gec)) {
      out = gec;
      break;
    }
    asio::steady_timer pause(co_await asio::this_coro::executor, retry_pause(std::min(attempt, 4)));
    co_await pause.async_wait(use_awaitable);
  }
  co_return out;
}

asio::awaitable<void> close_whatever_happens(session& s) {
  auto [ec] = co_await s.async_close(unstoppable());
  (void)ec;
}

std::chrono::milliseconds backoff(std::chrono::milliseconds min, std::chrono::milliseconds max, int attempt,
                                  std::minstd_rand& spread) {
  auto base = min;
  for (int i = 0; i < attempt && base < max; ++i) base = base > max / 2 ? max : base * 2;
  base = std::min(base, max);
  std::uniform_real_distribution<double> f(0.5, 1.5);
  return std::chrono::milliseconds(static_cast<std::int64_t>(static_cast<double>(base.count()) * f(spread)));
}

}  // namespace coetcd::detail
