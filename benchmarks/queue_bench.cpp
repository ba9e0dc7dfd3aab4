// Producers and consumers on one coetcd::queue, as go-bench --mode queue does with Go's
// recipe.Queue: --workers producer coroutines and as many consumers on one client and one queue
// object; producers enqueue until --duration passes, consumers dequeue all along. "acquisitions"
// are the items taken while the producers ran (the rate: over --duration); then the consumers
// drain the queue for up to 20 s more: "left" counts items put and not taken by then, and
// "duplicated" items taken twice.
//   queue_bench --endpoints E --workers 10 --duration 5s [--json]
#include <coetcd.hpp>
#include <coetcd/queue.hpp>

#include "bench_support.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <cstdio>
#include <iostream>
#include <map>
#include <string>

#include <unistd.h>

namespace asio = boost::asio;
using asio::use_awaitable;
using clock_type = std::chrono::steady_clock;

namespace {

struct config {
  std::string endpoint = "127.0.0.1:2379";
  int workers = 10;
  std::chrono::microseconds duration = std::chrono::seconds(5);
  bool json = false;
  std::string name = "/coetcd-bench/queue-" + std::to_string(::getpid()) + "/q";
};

struct totals {
  std::int64_t put = 0, taken = 0, errors = 0, in_window = 0;
  std::map<std::string, int> seen;
  std::string first_error;
  void fail(const std::string& what) {
    if (errors++ == 0) first_error = what;
  }
};

asio::awaitable<void> producer(coetcd::queue& q, int w, clock_type::time_point until, totals& t) {
  for (int i = 0; clock_type::now() < until; ++i) {
    const auto value = "p" + std::to_string(w) + "-" + std::to_string(i);
    auto [ec, key] = co_await q.async_enqueue(value, asio::as_tuple(use_awaitable));
    if (ec) {
      t.fail(ec.message());
      break;
    }
    ++t.put;
  }
}

asio::awaitable<void> consumer(coetcd::queue& q, totals& t) {
  for (;;) {
    auto [ec, v] = co_await q.async_dequeue(asio::as_tuple(use_awaitable));
    if (ec) {
      if (ec != asio::error::operation_aborted) t.fail(ec.message());
      break;
    }
    ++t.seen[v];
    ++t.taken;
  }
}

asio::awaitable<void> run(coetcd::client& c, const config& cfg, totals& t, double& elapsed) {
  auto ex = co_await asio::this_coro::executor;
  auto s = co_await coetcd::session::async_create(c, use_awaitable);
  {
    coetcd::queue q(s, cfg.name);
    const auto start = clock_type::now();
    const auto until = start + cfg.duration;
    int producing = cfg.workers;
    for (int w = 0; w < cfg.workers; ++w)
      asio::co_spawn(ex, producer(q, w, until, t), [&producing](std::exception_ptr) { --producing; });
    for (int w = 0; w < cfg.workers; ++w) asio::co_spawn(ex, consumer(q, t), asio::detached);
    asio::steady_timer tick(ex, until);
    co_await tick.async_wait(use_awaitable);
    t.in_window = t.taken;
    elapsed = std::chrono::duration<double>(clock_type::now() - start).count();
    const auto limit = until + std::chrono::seconds(20);
    while ((producing > 0 || t.taken < t.put) && clock_type::now() < limit) {
      tick.expires_after(std::chrono::milliseconds(5));
      co_await tick.async_wait(use_awaitable);
    }
  }  // the queue goes: waiting consumers end with operation_aborted
  co_await c.async_delete(cfg.name, coetcd::delete_options{.prefix = true}, use_awaitable);
  co_await s.async_close(use_awaitable);
}

config parse(int argc, char** argv) {
  config cfg;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--endpoints") cfg.endpoint = next();
    else if (a == "--workers") cfg.workers = std::stoi(next());
    else if (a == "--duration") cfg.duration = bench::parse_duration(next());
    else if (a == "--json") cfg.json = true;
    else if (a == "--mode" || a == "--locks") next();  // benchmarks/run passes them to every binary
    else throw std::invalid_argument("unknown argument '" + a + "'");
  }
  if (cfg.workers < 1) throw std::invalid_argument("--workers must be >= 1");
  return cfg;
}

}  // namespace

int main(int argc, char** argv) {
  config cfg;
  try {
    cfg = parse(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "queue_bench: " << e.what() << "\n";
    return 2;
  }
  asio::io_context ioc;
  coetcd::client c(ioc, {.endpoints = {cfg.endpoint}, .turn_off_abseil_deadlock_detection = true});
  totals t;
  double elapsed = 0;
  bool failed = false;
  asio::co_spawn(ioc, run(c, cfg, t, elapsed), [&](std::exception_ptr e) {
    if (e) {
      failed = true;
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& x) {
        std::cerr << "queue_bench: " << x.what() << "\n";
      }
    }
    c.close();
  });
  ioc.run();
  if (failed) return 1;
  std::int64_t duplicated = 0;
  for (auto& [v, n] : t.seen) duplicated += n - 1;
  const std::int64_t left = t.put - static_cast<std::int64_t>(t.seen.size());
  if (cfg.json) {
    std::printf(
        "{\"impl\":\"coetcd\",\"mode\":\"queue\",\"workers\":%d,\"locks\":1,\"clients\":1,\"seconds\":%.3f,"
        "\"acquisitions\":%lld,\"acquisitions_per_s\":%.1f,\"put\":%lld,\"left\":%lld,\"duplicated\":%lld,"
        "\"errors\":%lld,\"first_error\":%s,\"violations\":%lld,\"cpu_s_per_1000\":%.4f,\"peak_rss_mb\":%.1f}\n",
        cfg.workers, elapsed, static_cast<long long>(t.in_window), t.in_window / elapsed, static_cast<long long>(t.put),
        static_cast<long long>(left), static_cast<long long>(duplicated), static_cast<long long>(t.errors),
        bench::json_string(t.first_error).c_str(), static_cast<long long>(duplicated),
        t.taken ? bench::cpu_seconds() * 1000.0 / double(t.taken) : 0.0, bench::peak_rss_mb());
  } else {
    std::printf("coetcd queue: %lld items taken in %.1f s (%.0f/s), left %lld, duplicated %lld, errors %lld %s\n",
                static_cast<long long>(t.in_window), elapsed, t.in_window / elapsed, static_cast<long long>(left),
                static_cast<long long>(duplicated), static_cast<long long>(t.errors), t.first_error.c_str());
  }
  // Left behind after 20 s of draining is a failure here: coetcd drains in well under a second.
  return t.errors == 0 && left == 0 && duplicated == 0 ? 0 : 1;
}
