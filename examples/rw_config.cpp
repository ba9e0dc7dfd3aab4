// A read-write lock around shared configuration: four readers read it together, a writer
// updates it alone, and a reader that comes after the writer queued waits for the update.
//   rw_config [ENDPOINT]
#include <coetcd.hpp>
#include <coetcd/with_lock.hpp>

#include <boost/asio.hpp>

#include <iostream>

namespace asio = boost::asio;
using asio::use_awaitable;
using namespace std::chrono_literals;

asio::awaitable<void> pause(std::chrono::milliseconds d) {
  asio::steady_timer t(co_await asio::this_coro::executor, d);
  co_await t.async_wait(use_awaitable);
}

// Readers of one session share one key ("config/read/<lease hex>"): the three that come while
// the first holds join it without a round trip to etcd.
asio::awaitable<void> reader(coetcd::session& s, coetcd::client& etcd, int id, std::chrono::milliseconds after) {
  co_await pause(after);
  coetcd::rw_mutex rw(s, "config");
  auto reading = co_await rw.async_lock_shared(use_awaitable);
  auto r = co_await etcd.async_get("/config/value", use_awaitable);
  std::cout << "reader " << id << " reads " << (r.kvs.empty() ? "(none)" : r.kvs[0].value) << "\n";
  co_await pause(100ms);
  co_await reading.async_release(use_awaitable);
}

// The writer's key ("config/write/<lease hex>") waits for every older reader and writer; its
// update is fenced, so it is rejected if the lock was lost on the way.
asio::awaitable<void> writer(coetcd::session& s, coetcd::client& etcd) {
  co_await pause(50ms);
  coetcd::rw_mutex rw(s, "config");
  auto update = [&](coetcd::rw_mutex::hold& writing) -> asio::awaitable<void> {
    auto w = co_await etcd.async_txn(
        coetcd::txn().when(writing.fence()).then(coetcd::txn_op::put("/config/value", "v2")), use_awaitable);
    std::cout << "writer: update " << (w.succeeded ? "applied" : "rejected") << "\n";
  };
  co_await coetcd::with_lock(rw, std::move(update));
}

asio::awaitable<void> run(coetcd::client& etcd) {
  co_await etcd.async_put("/config/value", "v1", use_awaitable);
  auto readers = co_await coetcd::session::async_create(etcd, {.ttl = 10s}, use_awaitable);
  auto writers = co_await coetcd::session::async_create(etcd, {.ttl = 10s}, use_awaitable);
  using namespace asio::experimental::awaitable_operators;
  // Readers 1-3 start together and read v1; the writer queues behind them at 50 ms; reader 4
  // comes at 80 ms, behind the writer, and reads v2.
  co_await (reader(readers, etcd, 1, 0ms) && reader(readers, etcd, 2, 0ms) && reader(readers, etcd, 3, 0ms) &&
            writer(writers, etcd) && reader(readers, etcd, 4, 80ms));
  co_await etcd.async_delete("/config/value", use_awaitable);
  co_await readers.async_close(use_awaitable);
  co_await writers.async_close(use_awaitable);
  etcd.close();
}

int main(int argc, char** argv) {
  asio::io_context ioc;
  coetcd::client etcd(ioc, {.endpoints = {argc > 1 ? argv[1] : "127.0.0.1:2379"}});
  int rc = 0;
  asio::co_spawn(ioc, run(etcd), [&](std::exception_ptr e) {
    if (!e) return;
    rc = 1;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      std::cerr << "rw_config failed: " << ex.what() << "\n";
    }
  });
  ioc.run();
  return rc;
}
