// Round-trip time of a single-key get through coetcd (completion-queue thread -> strand ->
// coroutine) against gRPC's own blocking stub on the same server, in the same run.
//   get_latency ENDPOINT [COUNT] [ROUNDS]
// The three clients take turns for ROUNDS rounds (default 3) of COUNT gets each; each column is
// the median of the rounds, so a slow spell of the machine does not sink one client.
#include <coetcd.hpp>

#include "etcd/etcdserver/etcdserverpb/rpc.grpc.pb.h"

#include <grpcpp/grpcpp.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

namespace asio = boost::asio;
using clock_type = std::chrono::steady_clock;

struct stats {
  double p50_us, p99_us, per_s;
};

stats summarize(std::vector<double> us, double total_s) {
  std::sort(us.begin(), us.end());
  return {us[us.size() / 2], us[us.size() * 99 / 100], us.size() / total_s};
}

stats run_coetcd(const std::string& endpoint, int count, coetcd::completion_mode mode) {
  asio::io_context ioc;
  coetcd::client_options o;
  o.endpoints = {endpoint};
  o.completions = mode;
  o.turn_off_abseil_deadlock_detection = true;  // as every benchmark here: see client_options
  coetcd::client c(ioc, o);
  std::vector<double> us;
  double total = 0;
  asio::co_spawn(ioc, [&]() -> asio::awaitable<void> {
    co_await c.async_put("/bench/get", "value", asio::use_awaitable);
    for (int i = 0; i < 200; ++i) co_await c.async_get("/bench/get", asio::use_awaitable);  // warm-up
    auto start = clock_type::now();
    for (int i = 0; i < count; ++i) {
      auto t0 = clock_type::now();
      co_await c.async_get("/bench/get", asio::use_awaitable);
      us.push_back(std::chrono::duration<double, std::micro>(clock_type::now() - t0).count());
    }
    total = std::chrono::duration<double>(clock_type::now() - start).count();
    c.close();
  }, asio::detached);
  ioc.run();
  return summarize(std::move(us), total);
}

stats run_blocking_grpc(const std::string& endpoint, int count) {
  auto stub = etcdserverpb::KV::NewStub(grpc::CreateChannel(endpoint, grpc::InsecureChannelCredentials()));
  etcdserverpb::RangeRequest req;
  req.set_key("/bench/get");
  etcdserverpb::RangeResponse resp;
  auto once = [&] {
    grpc::ClientContext ctx;
    if (!stub->Range(&ctx, req, &resp).ok()) std::abort();
  };
  for (int i = 0; i < 200; ++i) once();
  std::vector<double> us;
  auto start = clock_type::now();
  for (int i = 0; i < count; ++i) {
    auto t0 = clock_type::now();
    once();
    us.push_back(std::chrono::duration<double, std::micro>(clock_type::now() - t0).count());
  }
  return summarize(std::move(us), std::chrono::duration<double>(clock_type::now() - start).count());
}

stats median(std::vector<stats> v) {
  auto pick = [&](double stats::*f) {
    std::vector<double> x;
    for (auto& s : v) x.push_back(s.*f);
    std::sort(x.begin(), x.end());
    return x[(x.size() - 1) / 2];
  };
  return {pick(&stats::p50_us), pick(&stats::p99_us), pick(&stats::per_s)};
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: get_latency ENDPOINT [COUNT] [ROUNDS]\n");
    return 2;
  }
  int count = argc > 2 ? std::stoi(argv[2]) : 5000;
  int rounds = argc > 3 ? std::max(1, std::stoi(argv[3])) : 3;
  std::vector<stats> bases, threads, polls, adaptives;
  for (int r = 0; r < rounds; ++r) {
    bases.push_back(run_blocking_grpc(argv[1], count));
    threads.push_back(run_coetcd(argv[1], count, coetcd::completion_mode::thread));
    polls.push_back(run_coetcd(argv[1], count, coetcd::completion_mode::poll));
    adaptives.push_back(run_coetcd(argv[1], count, coetcd::completion_mode::adaptive));
  }
  auto base = median(bases);
  std::printf("| client (median of %d rounds of %d gets) | gets/s | p50 µs | p99 µs |\n|---|---:|---:|---:|\n", rounds,
              count);
  std::printf("| gRPC blocking stub (baseline) | %.0f | %.1f | %.1f |\n", base.per_s, base.p50_us, base.p99_us);
  auto row = [&](const char* name, const stats& s) {
    std::printf("| %s | %.0f | %.1f | %.1f |\n", name, s.per_s, s.p50_us, s.p99_us);
    std::printf("| ratio to baseline | %.2f× | %.2f× | %.2f× |\n", s.per_s / base.per_s, s.p50_us / base.p50_us,
                s.p99_us / base.p99_us);
  };
  row("coetcd `co_await async_get` (completions: thread)", median(threads));
  row("coetcd `co_await async_get` (completions: poll)", median(polls));
  row("coetcd `co_await async_get` (completions: adaptive)", median(adaptives));
}
