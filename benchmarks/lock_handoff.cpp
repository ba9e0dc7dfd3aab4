// Lock hand-offs under contention: N workers (coroutines, each with its own session) take turns
// on one coetcd mutex for a fixed time. Prints acquisitions/s and lock-wait percentiles.
//   lock_handoff ENDPOINT WORKERS [SECONDS]
#include <coetcd.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace asio = boost::asio;
using asio::use_awaitable;
using clock_type = std::chrono::steady_clock;

struct run_state {
  clock_type::time_point end;
  std::vector<double> waits_ms;
  bool inside = false;
  int violations = 0;
  int running = 0;
};

asio::awaitable<void> worker(coetcd::client& c, std::shared_ptr<run_state> st) {
  auto s = co_await coetcd::session::async_create(c, use_awaitable);
  coetcd::mutex m(s, "bench-handoff");
  while (clock_type::now() < st->end) {
    auto t0 = clock_type::now();
    auto held = co_await m.async_lock(use_awaitable);
    st->waits_ms.push_back(std::chrono::duration<double, std::milli>(clock_type::now() - t0).count());
    if (st->inside) ++st->violations;
    st->inside = true;
    st->inside = false;
    co_await held.async_release(use_awaitable);
  }
  co_await s.async_close(use_awaitable);
  --st->running;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: lock_handoff ENDPOINT WORKERS [SECONDS]\n");
    return 2;
  }
  int workers = std::stoi(argv[2]);
  double seconds = argc > 3 ? std::stod(argv[3]) : 5.0;
  asio::io_context ioc;
  coetcd::client_options o;
  o.endpoints = {argv[1]};
  o.turn_off_abseil_deadlock_detection = true;  // as every benchmark here: see client_options
  coetcd::client c(ioc, o);
  auto st = std::make_shared<run_state>();
  auto start = clock_type::now();
  st->end = start + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(seconds));
  st->running = workers;
  for (int i = 0; i < workers; ++i) asio::co_spawn(ioc, worker(c, st), asio::detached);
  asio::co_spawn(ioc, [&]() -> asio::awaitable<void> {
    asio::steady_timer t(ioc);
    while (st->running > 0) {
      t.expires_after(std::chrono::milliseconds(20));
      co_await t.async_wait(use_awaitable);
    }
    c.close();
  }, asio::detached);
  ioc.run();
  double elapsed = std::chrono::duration<double>(st->end - start).count();
  auto& w = st->waits_ms;
  std::sort(w.begin(), w.end());
  auto pct = [&](double p) { return w.empty() ? 0.0 : w[std::min(w.size() - 1, std::size_t(p * w.size()))]; };
  std::printf("| workers | acquisitions/s | p50 wait ms | p99 wait ms | max ms | violations |\n|---|---|---|---|---|---|\n");
  std::printf("| %d | %.0f | %.2f | %.2f | %.2f | %d |\n", workers, w.size() / elapsed, pct(0.5), pct(0.99),
              w.empty() ? 0.0 : w.back(), st->violations);
  return st->violations == 0 ? 0 : 1;
}
