// Two build slots shared by every process of a fleet: a semaphore of 2 permits. Small jobs take
// one slot, a release build takes both. Slots are handed out in arrival order, so the release
// build is not overtaken by a small job that comes after it, even while one slot is free.
//   job_slots [ENDPOINT]
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

int in_use = 0;  // slots held in this process, to show the count never passes 2

// Each job is its own acquisition: key "build-slots/<lease hex>_<n>", value "<slots>/2", under
// its session's lease, so a crashed process gives its slots back when its TTL runs out.
asio::awaitable<void> job(coetcd::session& s, std::string name, std::int64_t slots, std::chrono::milliseconds after) {
  co_await pause(after);
  coetcd::semaphore pool(s, "build-slots", 2);
  auto work = [&]() -> asio::awaitable<void> {
    in_use += slots;
    std::cout << name << " runs (" << in_use << " of 2 slots in use)\n";
    co_await pause(150ms);
    in_use -= slots;
  };
  co_await coetcd::with_permits(pool, slots, std::move(work));
}

asio::awaitable<void> run(coetcd::client& etcd) {
  // Two sessions, as two processes of the fleet would have.
  auto a = co_await coetcd::session::async_create(etcd, {.ttl = 10s}, use_awaitable);
  auto b = co_await coetcd::session::async_create(etcd, {.ttl = 10s}, use_awaitable);
  using namespace asio::experimental::awaitable_operators;
  // small 1 and 2 fill the slots; the release build queues at 20 ms for both; small 3 comes at
  // 40 ms and waits behind it, although a slot frees before the release build can start.
  co_await (job(a, "small 1", 1, 0ms) && job(b, "small 2", 1, 10ms) && job(a, "release", 2, 20ms) &&
            job(b, "small 3", 1, 40ms));
  co_await a.async_close(use_awaitable);
  co_await b.async_close(use_awaitable);
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
      std::cerr << "job_slots failed: " << ex.what() << "\n";
    }
  });
  ioc.run();
  return rc;
}
