// The README's example, built with the project so it cannot drift from the API.
#include <coetcd.hpp>
#include <boost/asio.hpp>
#include <iostream>

namespace asio = boost::asio;
using asio::use_awaitable;

asio::awaitable<void> run(coetcd::client& etcd) {
  co_await etcd.async_put("/config/mode", "fast", use_awaitable);
  auto got = co_await etcd.async_get("/config/", {.prefix = true}, use_awaitable);
  for (auto& kv : got.kvs) std::cout << kv.key << " = " << kv.value << "\n";

  auto w = co_await etcd.async_watch("/config/", {.prefix = true}, use_awaitable);
  auto t = coetcd::txn()
               .when(coetcd::compare::value("/config/mode") == "fast")
               .then(coetcd::txn_op::put("/config/mode", "safe"));
  co_await etcd.async_txn(t, use_awaitable);
  auto batch = co_await w.async_next(use_awaitable);  // the txn's PUT
  std::cout << batch.events.at(0).kv.value << "\n";
  etcd.close();
}

int main(int argc, char** argv) {
  asio::io_context ioc;
  coetcd::client etcd(ioc, {.endpoints = {argc > 1 ? argv[1] : "127.0.0.1:2379"}});
  asio::co_spawn(ioc, run(etcd), asio::detached);
  ioc.run();
}
