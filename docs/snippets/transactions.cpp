// The snippets of docs/transactions.md, compiled so they follow the API (scripts/snippets copies them there).
#include <coetcd.hpp>

#include <boost/asio.hpp>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace asio = boost::asio;
using asio::use_awaitable;

struct insufficient_funds : std::runtime_error {
  insufficient_funds() : std::runtime_error("insufficient funds") {}
};

// [stm]
#include <coetcd/stm.hpp>

// Move `amount` from one account to another; runs again if either changed meanwhile.
asio::awaitable<void> pay(coetcd::client& client, std::int64_t amount) {
  auto transfer = [&](coetcd::stm_tx& tx) -> asio::awaitable<void> {
    auto from = std::stoll((co_await tx.get("/bank/alice")).value_or("0"));
    auto to = std::stoll((co_await tx.get("/bank/bob")).value_or("0"));
    if (from < amount) throw insufficient_funds();  // writes nothing
    tx.put("/bank/alice", std::to_string(from - amount));
    tx.put("/bank/bob", std::to_string(to + amount));
  };
  co_await coetcd::stm(client, transfer, {.level = coetcd::isolation::serializable_snapshot});
}
// [stm]

// [counter]
#include <coetcd/counter.hpp>

asio::awaitable<void> count(coetcd::client& client) {
  coetcd::counter hits(client, "/stats/hits");        // one object per key, shared by the process
  auto now = co_await hits.async_add(1, use_awaitable);  // the value after this add
  auto [swapped, found] = co_await hits.async_compare_and_set(now, 0, use_awaitable);
  auto w = co_await hits.async_watch(use_awaitable);  // events' values: counter::parse(ev.kv.value)
}
// [counter]
