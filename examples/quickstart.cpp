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

  // A named lock: a session (a lease kept alive), a mutex, and a write that lands only while held.
  auto s = co_await coetcd::session::async_create(etcd, use_awaitable);
  coetcd::mutex m(s, "/locks/config");
  auto held = co_await m.async_lock(use_awaitable);  // waits its turn, behind other processes too
  auto fenced = coetcd::txn().when(held.fence()).then(coetcd::txn_op::put("/config/mode", "locked"));
  auto r = co_await etcd.async_txn(fenced, use_awaitable);
  std::cout << "written under the lock: " << (r.succeeded ? "yes" : "no") << "\n";
  co_await held.async_release(use_awaitable);
  co_await s.async_close(use_awaitable);
  etcd.close();
}

int main(int argc, char** argv) {
  asio::io_context ioc;
  coetcd::client etcd(ioc, {.endpoints = {argc > 1 ? argv[1] : "127.0.0.1:2379"}});
  // An error ends run() with an exception; rethrown here, it leaves ioc.run() and the program.
  asio::co_spawn(ioc, run(etcd), [](std::exception_ptr e) { if (e) std::rethrow_exception(e); });
  ioc.run();
}
