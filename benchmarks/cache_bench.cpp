// coetcd::cache measured: local reads per second on one core, memory against the keys' and
// values' own size, time to the first sync, and how far behind writers at full speed it runs.
//   cache_bench --endpoints E [--keys 10000] [--value-size 100] [--writers 10] [--duration 5s] [--json]
// (--workers is --writers, so benchmarks/run's cell() can run it.)
// Writers put keys of the cached prefix from a second client, each value starting with the
// steady clock's nanoseconds when the put is sent; the cache's reader takes each change and
// records now - then: the lag from a put's sending to the change in the reader's hands, its
// commit (and fsync) included, with the 10 writers and the reader sharing this one thread.
#include <coetcd.hpp>
#include <coetcd/cache.hpp>

#include "bench_support.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <random>
#include <string>
#include <vector>

namespace asio = boost::asio;
using asio::use_awaitable;
using clock_type = std::chrono::steady_clock;

namespace {

struct config {
  std::string endpoint = "127.0.0.1:2379";
  int keys = 10000, value_size = 100, writers = 10;
  std::chrono::microseconds duration = std::chrono::seconds(5);
  bool json = false;
  std::string prefix = "/coetcd-bench/cache-" + std::to_string(::getpid()) + "/";
};

struct result {
  double reads_per_s = 0, memory_ratio = 0, sync_ms = 0, lag_p50_ms = 0, lag_p99_ms = 0, events_per_s = 0;
  std::int64_t writes = 0, events = 0, resets = 0;
  std::size_t data_bytes = 0, cache_bytes = 0;
};

std::string key_of(const config& cfg, int i) { return cfg.prefix + "k" + std::to_string(i); }

std::string stamped_value(int size) {
  auto v = std::to_string(clock_type::now().time_since_epoch().count());
  if (static_cast<int>(v.size()) < size) v.append(size - v.size(), 'x');
  return v;
}

asio::awaitable<void> sleep(std::chrono::milliseconds d) {
  asio::steady_timer t(co_await asio::this_coro::executor, d);
  co_await t.async_wait(use_awaitable);
}

asio::awaitable<void> run(coetcd::client& c, coetcd::client& writer, const config& cfg, result& out) {
  co_await c.async_delete(cfg.prefix, coetcd::delete_options{.prefix = true}, use_awaitable);
  for (int i = 0; i < cfg.keys; i += 100) {  // 100 puts a txn
    coetcd::txn t;
    for (int j = i; j < std::min(cfg.keys, i + 100); ++j) {
      auto k = key_of(cfg, j);
      out.data_bytes += k.size() + static_cast<std::size_t>(cfg.value_size);
      t.then(coetcd::txn_op::put(k, std::string(cfg.value_size, 'v')));
    }
    co_await c.async_txn(t, use_awaitable);
  }

  // Memory: what the heap holds more once the cache has synced (the Range's answer is gone by then).
  const auto before = mallinfo2().uordblks;
  const auto t0 = clock_type::now();
  coetcd::cache k(c.get_executor(), c, cfg.prefix);
  co_await k.async_wait_synced(use_awaitable);
  out.sync_ms = std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
  const auto after = mallinfo2().uordblks;  // the main arena: the loop runs on this thread
  out.cache_bytes = after > before ? after - before : 0;
  out.memory_ratio = double(out.cache_bytes) / double(out.data_bytes);

  // Local reads on this thread: random keys of the prefix, for a second.
  std::mt19937 rng(42);
  std::vector<std::string> keys;
  for (int i = 0; i < cfg.keys; ++i) keys.push_back(key_of(cfg, i));
  std::int64_t reads = 0, found = 0;
  const auto r0 = clock_type::now();
  while (clock_type::now() - r0 < std::chrono::seconds(1)) {
    for (int i = 0; i < 1000; ++i) found += k.get(keys[rng() % keys.size()]).has_value();
    reads += 1000;
  }
  out.reads_per_s = double(reads) / std::chrono::duration<double>(clock_type::now() - r0).count();
  if (found != reads) throw std::runtime_error("a cached key was missing");

  // Lag: writers at full speed from another client; the reader measures each change's age.
  std::vector<double> lags;
  bool writing = true;
  int running = cfg.writers;
  auto ex = co_await asio::this_coro::executor;
  for (int w = 0; w < cfg.writers; ++w)
    asio::co_spawn(
        ex,
        [](coetcd::client& wc, const config& cfg, int w, bool& writing, result& out) -> asio::awaitable<void> {
          for (int i = 0; writing; ++i) {
            co_await wc.async_put(key_of(cfg, (w * 997 + i) % cfg.keys), stamped_value(cfg.value_size), use_awaitable);
            ++out.writes;
          }
        }(writer, cfg, w, writing, out),
        [&running](std::exception_ptr) { --running; });
  const auto l0 = clock_type::now();
  asio::co_spawn(
      ex,
      [](coetcd::cache& k, std::vector<double>& lags, result& out, bool& writing) -> asio::awaitable<void> {
        while (writing) {
          auto u = co_await k.async_next(use_awaitable);
          if (u.reset) ++out.resets;
          const auto now = clock_type::now().time_since_epoch().count();
          for (auto& e : u.events) {
            if (e.kv.value.size() < 20) continue;  // the end marker
            ++out.events;
            const auto then = std::stoll(e.kv.value.substr(0, e.kv.value.find('x')));
            lags.push_back(double(now - then) / 1e6);
          }
        }
      }(k, lags, out, writing),
      asio::detached);
  co_await sleep(std::chrono::duration_cast<std::chrono::milliseconds>(cfg.duration));
  writing = false;
  while (running > 0) co_await sleep(std::chrono::milliseconds(5));
  out.events_per_s = double(out.events) / std::chrono::duration<double>(clock_type::now() - l0).count();
  std::sort(lags.begin(), lags.end());
  if (!lags.empty()) {
    out.lag_p50_ms = lags[lags.size() / 2];
    out.lag_p99_ms = lags[lags.size() * 99 / 100];
  }
  co_await c.async_put(cfg.prefix + "end", "0", use_awaitable);  // wakes the reader, which then stops
  co_await sleep(std::chrono::milliseconds(50));
  co_await c.async_delete(cfg.prefix, coetcd::delete_options{.prefix = true}, use_awaitable);
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
    else if (a == "--keys") cfg.keys = std::stoi(next());
    else if (a == "--value-size") cfg.value_size = std::stoi(next());
    else if (a == "--writers" || a == "--workers") cfg.writers = std::stoi(next());
    else if (a == "--duration") cfg.duration = bench::parse_duration(next());
    else if (a == "--json") cfg.json = true;
    else if (a == "--mode" || a == "--locks") next();  // benchmarks/run's cell() passes these
    else throw std::invalid_argument("unknown argument '" + a + "'");
  }
  if (cfg.keys < 1 || cfg.value_size < 20 || cfg.writers < 1)
    throw std::invalid_argument("--keys and --writers must be >= 1, --value-size >= 20 (the timestamp)");
  return cfg;
}

}  // namespace

int main(int argc, char** argv) {
  config cfg;
  try {
    cfg = parse(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "cache_bench: " << e.what() << "\n";
    return 2;
  }
  asio::io_context ioc;
  coetcd::client c(ioc, {.endpoints = {cfg.endpoint}, .turn_off_abseil_deadlock_detection = true});
  coetcd::client writer(ioc, {.endpoints = {cfg.endpoint}, .turn_off_abseil_deadlock_detection = true});
  result out;
  bool failed = false;
  asio::co_spawn(ioc, run(c, writer, cfg, out), [&](std::exception_ptr e) {
    if (e) {
      failed = true;
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& x) {
        std::cerr << "cache_bench: " << x.what() << "\n";
      }
    }
    c.close();
    writer.close();
  });
  ioc.run();
  if (failed) return 1;
  if (cfg.json) {
    std::printf(
        "{\"impl\":\"coetcd\",\"mode\":\"cache\",\"workers\":%d,\"locks\":1,\"keys\":%d,\"value_size\":%d,"
        "\"seconds\":%.3f,\"acquisitions_per_s\":%.1f,\"reads_per_s\":%.0f,\"memory_ratio\":%.3f,\"cache_bytes\":%zu,"
        "\"data_bytes\":%zu,\"sync_ms\":%.1f,\"writes\":%lld,\"events\":%lld,\"events_per_s\":%.1f,\"lag_p50_ms\":%.3f,"
        "\"lag_p99_ms\":%.3f,\"resets\":%lld,\"errors\":0,\"violations\":0}\n",
        cfg.writers, cfg.keys, cfg.value_size, cfg.duration.count() / 1e6, out.events_per_s, out.reads_per_s,
        out.memory_ratio, out.cache_bytes, out.data_bytes, out.sync_ms, static_cast<long long>(out.writes),
        static_cast<long long>(out.events), out.events_per_s, out.lag_p50_ms, out.lag_p99_ms,
        static_cast<long long>(out.resets));
  } else {
    std::printf("cache of %d keys (%d-byte values): %.0f local reads/s, memory %.2fx the data (%zu / %zu bytes), synced in "
                "%.1f ms; %d writers: %lld writes, %lld changes seen (%.0f/s), lag p50 %.2f ms p99 %.2f ms, %lld resets\n",
                cfg.keys, cfg.value_size, out.reads_per_s, out.memory_ratio, out.cache_bytes, out.data_bytes, out.sync_ms,
                cfg.writers, static_cast<long long>(out.writes), static_cast<long long>(out.events), out.events_per_s,
                out.lag_p50_ms, out.lag_p99_ms, static_cast<long long>(out.resets));
  }
  return 0;
}
