// Five accounts of 200 in etcd and 50 coroutines moving money between them with coetcd::stm: no
// lock, and no unit lost or made. Each transfer reads two balances and writes both; if another
// transfer changed either meanwhile, it runs again. The 50 run in commit groups: they take turns
// on this client and share txns, so the whole run costs far fewer txns than transfers.
//   bank_stm [ENDPOINT]
#include <coetcd.hpp>
#include <coetcd/stm.hpp>

#include <boost/asio.hpp>

#include <iostream>
#include <stdexcept>
#include <string>

namespace asio = boost::asio;
using asio::use_awaitable;

const std::string accounts = "/bank-stm/";

asio::awaitable<std::int64_t> total(coetcd::client& etcd) {
  auto r = co_await etcd.async_get(accounts, coetcd::get_options{.prefix = true}, use_awaitable);
  std::int64_t sum = 0;
  for (auto& kv : r.kvs) sum += std::stoll(kv.value);
  co_return sum;
}

// Moves `amount` from account `from` to `to`; refuses (writes nothing) when `from` has too little.
asio::awaitable<bool> transfer(coetcd::client& etcd, int from, int to, std::int64_t amount) {
  auto move = [&](coetcd::stm_tx& tx) -> asio::awaitable<bool> {
    const auto a = accounts + std::to_string(from), b = accounts + std::to_string(to);
    const auto have = std::stoll((co_await tx.get(a)).value_or("0"));
    const auto other = std::stoll((co_await tx.get(b)).value_or("0"));
    if (have < amount) co_return false;
    tx.put(a, std::to_string(have - amount));
    tx.put(b, std::to_string(other + amount));
    co_return true;
  };
  co_return co_await coetcd::stm(etcd, move);
}

asio::awaitable<void> run(coetcd::client& etcd) {
  co_await etcd.async_delete(accounts, coetcd::delete_options{.prefix = true}, use_awaitable);
  for (int i = 0; i < 5; ++i) co_await etcd.async_put(accounts + std::to_string(i), "200", use_awaitable);
  std::cout << "before: total " << co_await total(etcd) << " in 5 accounts\n";

  auto ex = co_await asio::this_coro::executor;
  int done = 0, moved = 0, refused = 0;
  bool failed = false;
  for (int w = 0; w < 50; ++w)
    asio::co_spawn(
        ex,
        [](coetcd::client& etcd, int w, int& moved, int& refused) -> asio::awaitable<void> {
          for (int i = 0; i < 10; ++i) {
            const int from = (w + i) % 5, to = (w + 2 * i + 1) % 5;
            if (from == to) continue;
            if (co_await transfer(etcd, from, to, 1 + (w * 7 + i) % 30)) ++moved;
            else ++refused;
          }
        }(etcd, w, moved, refused),
        [&done, &failed](std::exception_ptr e) {
          failed = failed || e != nullptr;
          ++done;
        });
  asio::steady_timer tick(ex);
  while (done < 50) {
    tick.expires_after(std::chrono::milliseconds(10));
    co_await tick.async_wait(use_awaitable);
  }
  if (failed) throw std::runtime_error("a transfer failed");
  const auto txns = etcd.stats().rpcs["Txn"].sent;
  std::cout << moved << " transfers made, " << refused << " refused for want of money, in " << txns << " txns\n";
  std::cout << "after: total " << co_await total(etcd) << " in 5 accounts\n";
  co_await etcd.async_delete(accounts, coetcd::delete_options{.prefix = true}, use_awaitable);
}

int main(int argc, char** argv) {
  asio::io_context ioc;
  coetcd::client etcd(ioc, {.endpoints = {argc > 1 ? argv[1] : "127.0.0.1:2379"}});
  int rc = 0;
  asio::co_spawn(ioc, run(etcd), [&](std::exception_ptr e) {
    etcd.close();
    if (!e) return;
    rc = 1;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      std::cerr << "bank_stm failed: " << ex.what() << "\n";
    }
  });
  ioc.run();
  return rc;
}
