// The snippets of docs/how-it-works.md, compiled so they follow the API (scripts/snippets copies them there).
#include <coetcd.hpp>
#include <coetcd/with_lock.hpp>

#include <boost/asio.hpp>

#include <memory>

namespace asio = boost::asio;

struct state;
asio::awaitable<void> use(state& s);

asio::awaitable<void> named_lambda(coetcd::mutex& m, std::shared_ptr<state> p) {
  // [named_lambda]
  auto body = [p]() -> asio::awaitable<void> { co_await use(*p); };
  co_await coetcd::with_lock(m, std::move(body));   // fine on g++ 12 and clang++
  // [named_lambda]
}
