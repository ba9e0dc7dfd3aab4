// Counters incremented by many coroutines of one client: coetcd::stm (as Go's concurrency.NewSTM
// in go-bench --mode stm) or coetcd::counter. Worker i increments counter i % --locks until
// --duration passes; "acquisitions" are commits, and at the end the counters' sum must equal
// them ("lost_updates" says by how much it does not).
//   stm_bench --endpoints E --mode stm|counter --workers 100 --locks 10 --duration 5s [--json]
//             [--level serializable_snapshot|serializable|repeatable_reads] [--alone]
// --alone: stm without commit groups (each call commits on its own, as Go's STM).
#include <coetcd.hpp>
#include <coetcd/counter.hpp>
#include <coetcd/stm.hpp>

#include "bench_support.hpp"

#include <boost/asio/co_spawn.hpp>
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
  std::string endpoint = "127.0.0.1:2379", mode = "stm", level = "serializable_snapshot";
  int workers = 100, locks = 10;
  std::chrono::microseconds duration = std::chrono::seconds(5);
  bool json = false;
  bool alone = false;
  std::string prefix = "/coetcd-bench/stm-" + std::to_string(::getpid()) + "/";
};

struct totals {
  std::int64_t commits = 0, runs = 0, errors = 0;
  std::string first_error;
};

coetcd::isolation level_of(const std::string& name) {
  static const std::map<std::string, coetcd::isolation> levels = {
      {"serializable_snapshot", coetcd::isolation::serializable_snapshot},
      {"serializable", coetcd::isolation::serializable},
      {"repeatable_reads", coetcd::isolation::repeatable_reads}};
  auto it = levels.find(name);
  if (it == levels.end()) throw std::invalid_argument("unknown --level '" + name + "'");
  return it->second;
}

asio::awaitable<void> worker(coetcd::client& c, const config& cfg, int index, clock_type::time_point until, totals& t,
                             coetcd::counter& ctr) {
  const std::string key = ctr.key();
  const coetcd::stm_options options{.level = level_of(cfg.level), .max_attempts = 1000, .group_commit = !cfg.alone};
  try {
    while (clock_type::now() < until) {
      if (cfg.mode == "counter") {
        co_await ctr.async_add(1, use_awaitable);
        ++t.runs;
      } else {
        auto increment = [&key, &t](coetcd::stm_tx& tx) -> asio::awaitable<void> {
          ++t.runs;
          auto v = co_await tx.get(key);
          tx.put(key, std::to_string((v ? std::stoll(*v) : 0) + 1));
        };
        co_await coetcd::stm(c, increment, options);
      }
      ++t.commits;
    }
  } catch (const std::exception& e) {
    if (t.errors++ == 0) t.first_error = e.what();
  }
}

asio::awaitable<void> run(coetcd::client& c, const config& cfg, totals& t, double& elapsed, std::int64_t& sum) {
  co_await c.async_delete(cfg.prefix, coetcd::delete_options{.prefix = true}, use_awaitable);
  auto ex = co_await asio::this_coro::executor;
  const auto start = clock_type::now();
  const auto until = start + cfg.duration;
  // One counter object per key, shared by its workers, as a server shares one per key.
  std::vector<std::unique_ptr<coetcd::counter>> counters;
  for (int k = 0; k < cfg.locks; ++k)
    counters.push_back(std::make_unique<coetcd::counter>(c, cfg.prefix + "counter-" + std::to_string(k)));
  int running = cfg.workers;
  for (int i = 0; i < cfg.workers; ++i)
    asio::co_spawn(ex, worker(c, cfg, i, until, t, *counters[i % cfg.locks]), [&running](std::exception_ptr) { --running; });
  asio::steady_timer tick(ex);
  while (running > 0) {
    tick.expires_after(std::chrono::milliseconds(5));
    co_await tick.async_wait(use_awaitable);
  }
  elapsed = std::chrono::duration<double>(clock_type::now() - start).count();
  auto r = co_await c.async_get(cfg.prefix, coetcd::get_options{.prefix = true}, use_awaitable);
  for (auto& kv : r.kvs) sum += std::stoll(kv.value);
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
    else if (a == "--mode") cfg.mode = next();
    else if (a == "--workers") cfg.workers = std::stoi(next());
    else if (a == "--locks") cfg.locks = std::stoi(next());
    else if (a == "--duration") cfg.duration = bench::parse_duration(next());
    else if (a == "--level") cfg.level = next();
    else if (a == "--json") cfg.json = true;
    else if (a == "--alone") cfg.alone = true;
    else throw std::invalid_argument("unknown argument '" + a + "'");
  }
  if (cfg.mode != "stm" && cfg.mode != "counter") throw std::invalid_argument("--mode is stm or counter");
  if (cfg.workers < 1 || cfg.locks < 1) throw std::invalid_argument("--workers and --locks must be >= 1");
  level_of(cfg.level);
  return cfg;
}

}  // namespace

int main(int argc, char** argv) {
  config cfg;
  try {
    cfg = parse(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "stm_bench: " << e.what() << "\n";
    return 2;
  }
  asio::io_context ioc;
  coetcd::client c(ioc, {.endpoints = {cfg.endpoint}, .turn_off_abseil_deadlock_detection = true});
  totals t;
  double elapsed = 0;
  std::int64_t sum = 0;
  bool failed = false;
  asio::co_spawn(ioc, run(c, cfg, t, elapsed, sum), [&](std::exception_ptr e) {
    if (e) {
      failed = true;
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& x) {
        std::cerr << "stm_bench: " << x.what() << "\n";
      }
    }
    c.close();
  });
  ioc.run();
  if (failed) return 1;
  const double per_run = t.commits ? double(t.runs) / double(t.commits) : 0;
  const std::string impl = cfg.mode == "counter" ? "coetcd-counter" : cfg.alone ? "coetcd-alone" : "coetcd";
  if (cfg.json) {
    std::printf(
        "{\"impl\":\"%s\",\"mode\":\"stm\",\"level\":\"%s\",\"workers\":%d,\"locks\":%d,\"clients\":1,\"seconds\":%.3f,"
        "\"acquisitions\":%lld,\"acquisitions_per_s\":%.1f,\"runs_per_commit\":%.3f,\"lost_updates\":%lld,"
        "\"errors\":%lld,\"first_error\":%s,\"violations\":0,\"cpu_s_per_1000\":%.4f,\"peak_rss_mb\":%.1f}\n",
        impl.c_str(), cfg.level.c_str(), cfg.workers, cfg.locks, elapsed, static_cast<long long>(t.commits),
        t.commits / elapsed, per_run, static_cast<long long>(t.commits - sum), static_cast<long long>(t.errors),
        bench::json_string(t.first_error).c_str(), t.commits ? bench::cpu_seconds() * 1000.0 / double(t.commits) : 0.0, bench::peak_rss_mb());
  } else {
    std::printf("%s %s: %lld commits in %.1f s (%.0f/s), %.2f runs per commit, lost %lld, errors %lld %s\n", impl.c_str(),
                cfg.level.c_str(), static_cast<long long>(t.commits), elapsed, t.commits / elapsed, per_run,
                static_cast<long long>(t.commits - sum), static_cast<long long>(t.errors), t.first_error.c_str());
  }
  return t.errors == 0 && t.commits == sum ? 0 : 1;
}
