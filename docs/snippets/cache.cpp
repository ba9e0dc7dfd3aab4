// The snippets of docs/cache.md, compiled so they follow the API (scripts/snippets copies them there).
#include <coetcd.hpp>

#include <boost/asio.hpp>

#include <cassert>
#include <optional>

namespace asio = boost::asio;
using asio::use_awaitable;

void on_change(const coetcd::key_value& kv, const std::optional<coetcd::key_value>& prev);

// [cache]
#include <coetcd/cache.hpp>

asio::awaitable<void> follow_config(coetcd::client& client) {
  coetcd::cache config(client.get_executor(), client, "/config/");  // lists the prefix, then follows it
  co_await config.async_wait_synced(use_awaitable);
  auto limit = config.get("/config/rate-limit");      // std::optional<key_value>, no request
  for (auto& kv : config.range()) { /* every key, in key order */ }

  auto r = co_await client.async_put("/config/rate-limit", "200", use_awaitable);
  co_await config.async_wait_for(r.header.revision, use_awaitable);  // read your own write
  assert(config.get("/config/rate-limit")->value == "200");

  for (;;) {                                          // the cache's own reader of changes
    auto update = co_await config.async_next(use_awaitable);
    for (auto& e : update.events)                     // each change once, in revision order
      on_change(e.kv, e.prev_kv);                     // prev_kv: the value it replaced (none: created)
  }
}
// [cache]

asio::awaitable<void> more_readers(coetcd::cache& config) {
  // [cache_reader]
  coetcd::cache_reader audit(config);                 // on the cache's executor: changes after now
  auto copy = config.range();                         // ...and what came before, in the same turn
  auto update = co_await audit.async_next(use_awaitable);
  // [cache_reader]
}
