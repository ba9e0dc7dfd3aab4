// One process of the paused-holder check of benchmarks/compare (docs/choosing-a-lock.md): take
// the lock, read a counter kept in etcd, say "read N", wait --gap-ms (the script SIGSTOPs the
// process inside it, past its session's TTL), then write N+1 and say whether the write landed.
// Written plainly, the write lands whoever holds the lock by then: the increment of the process
// that took the lock during the pause is lost. Fenced, it is a txn guarded by the mutex's
// hold's fence() compare, which etcd refuses once the lease (and the key) is gone.
// Go's side of the same check (and the other systems') is go-bench --mode stale_write.
//   stale-write --endpoints E --name N [--fence] [--reset] [--ttl 10] [--gap-ms 2000]
// Prints, one per line: "waited S", "read N", "write applied|rejected|failed: why",
// "unlock ok|failed: why". Exit 0 unless the lock could not be taken.
#include <coetcd.hpp>

#include <boost/asio.hpp>

#include <chrono>
#include <stdexcept>
#include <iostream>
#include <string>

namespace asio = boost::asio;
using asio::use_awaitable;
using namespace std::chrono_literals;

namespace {

struct options {
  std::string endpoint = "127.0.0.1:2379";
  std::string name;
  bool fence = false;
  bool reset = false;
  int ttl = 10;
  std::chrono::milliseconds gap = 2s;
};

void say(const std::string& line) { std::cout << line << std::endl; }  // endl: the script reads as we go

asio::awaitable<int> check(coetcd::client& etcd, options o) {
  const std::string counter = o.name + "/counter";
  if (o.reset) co_await etcd.async_put(counter, "0", use_awaitable);
  auto s = co_await coetcd::session::async_create(etcd, coetcd::session_options{.ttl = std::chrono::seconds(o.ttl)},
                                                  use_awaitable);
  // The lock's keys live under NAME/lock/, apart from the counter: a mutex's name is a prefix.
  coetcd::mutex m(s, o.name + "/lock");
  const auto t0 = std::chrono::steady_clock::now();
  auto held = co_await m.async_lock(use_awaitable);
  say("waited " + std::to_string(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()));
  auto got = co_await etcd.async_get(counter, use_awaitable);
  const long n = got.kvs.empty() ? 0 : std::stol(got.kvs.front().value);
  say("read " + std::to_string(n));
  asio::steady_timer gap(co_await asio::this_coro::executor, o.gap);
  co_await gap.async_wait(use_awaitable);
  coetcd::txn write;
  if (o.fence) write.when(held.fence());
  write.then(coetcd::txn_op::put(counter, std::to_string(n + 1)));
  auto [ec, r] = co_await etcd.async_txn(write, asio::as_tuple(use_awaitable));
  say(ec ? "write failed: " + ec.message() : r.succeeded ? "write applied" : "write rejected");
  auto [uec] = co_await held.async_release(asio::as_tuple(use_awaitable));
  say(uec ? "unlock failed: " + uec.message() : "unlock ok");
  co_await s.async_close(asio::as_tuple(use_awaitable));
  co_return 0;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&] {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return std::string(argv[++i]);
    };
    try {
      if (a == "--endpoints") o.endpoint = value();
      else if (a == "--name") o.name = value();
      else if (a == "--fence") o.fence = true;
      else if (a == "--reset") o.reset = true;
      else if (a == "--ttl") o.ttl = std::stoi(value());
      else if (a == "--gap-ms") o.gap = std::chrono::milliseconds(std::stol(value()));
      else throw std::invalid_argument("unknown argument " + a);
    } catch (const std::exception& e) {
      std::cerr << "stale-write: " << e.what() << "\n";
      return 2;
    }
  }
  if (o.name.empty()) {
    std::cerr << "stale-write: --name is required\n";
    return 2;
  }
  asio::io_context ioc;
  coetcd::client etcd(ioc, {.endpoints = {o.endpoint}, .turn_off_abseil_deadlock_detection = true});
  int rc = 1;
  asio::co_spawn(ioc, check(etcd, o), [&](std::exception_ptr e, int r) {
    etcd.close();
    if (!e) {
      rc = r;
      return;
    }
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      std::cerr << "stale-write: " << ex.what() << "\n";
    }
  });
  ioc.run();
  return rc;
}
