// The snippets of docs/observability.md, compiled so they follow the API (scripts/snippets copies them there).
#include <coetcd.hpp>

#include <boost/asio.hpp>

#include <memory>
#include <string>

namespace asio = boost::asio;

struct request_info {
  std::string id;
};

asio::awaitable<void> traced(coetcd::client& c, coetcd::mutex& m) {
  // [span_context]
  auto request = std::make_shared<const request_info>(request_info{"req-17"});
  auto held = co_await m.async_lock(coetcd::with_span_context(request, asio::use_awaitable));
  auto got = co_await c.async_get("k", coetcd::with_span_context(request, asio::use_awaitable));
  co_await held.async_release(asio::use_awaitable);
  // [span_context]
}
