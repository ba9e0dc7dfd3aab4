// coetcd's counters as Prometheus scrapes them, and its events as a log. Four workers share one
// mutex (as the requests of a server would); prometheus-cpp's Exposer answers GET /metrics on
// its own threads with what a Collectable reads from client::stats() (any thread) at each scrape;
// every event of the client is printed as a line.
//   metrics_http ENDPOINT PORT
//   curl localhost:PORT/metrics
// Stops on SIGINT/SIGTERM, releasing what it holds. Built where Debian's prometheus-cpp-dev is.
#include <coetcd.hpp>
#include <coetcd/with_lock.hpp>

#include <boost/asio.hpp>
#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <prometheus/metric_family.h>

#include <deque>
#include <iostream>
#include <iterator>
#include <limits>

namespace asio = boost::asio;
using asio::use_awaitable;
using namespace std::chrono_literals;

// The client's counters are kept by the client: each scrape copies them, as Go's ConstMetric
// does, rather than mirroring them into prometheus-cpp's own Counter objects.
class client_collector : public prometheus::Collectable {
 public:
  explicit client_collector(const coetcd::client& c) : client_(c) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    const auto s = client_.stats();
    // A deque: each family is filled after the next ones are added, so it must not move.
    std::deque<prometheus::MetricFamily> out;
    using prometheus::MetricType;
    auto family = [&](const char* name, MetricType type, const char* help) -> prometheus::MetricFamily& {
      return out.emplace_back(prometheus::MetricFamily{name, help, type, {}});
    };
    auto counter = [](prometheus::MetricFamily& f, std::vector<prometheus::ClientMetric::Label> labels, double v) {
      auto& m = f.metric.emplace_back();
      m.label = std::move(labels);
      m.counter.value = v;
    };
    auto gauge = [](prometheus::MetricFamily& f, std::vector<prometheus::ClientMetric::Label> labels, double v) {
      auto& m = f.metric.emplace_back();
      m.label = std::move(labels);
      m.gauge.value = v;
    };
    struct per_rpc {
      const char* name;
      const char* help;
      std::uint64_t coetcd::rpc_stats::*field;
    };
    for (auto [name, help, field] : {
             per_rpc{"coetcd_rpcs_sent_total", "Unary RPCs put on the wire (each attempt), by gRPC method.", &coetcd::rpc_stats::sent},
             per_rpc{"coetcd_rpcs_failed_total", "Unary RPCs that ended with an error.", &coetcd::rpc_stats::failed},
             per_rpc{"coetcd_rpcs_retried_total", "Attempts sent again after a transient failure.", &coetcd::rpc_stats::retried},
             per_rpc{"coetcd_rpcs_resent_unanswered_total",
                     "Of the retried: attempts cut after resend_after without an answer and sent again.",
                     &coetcd::rpc_stats::resent_unanswered}}) {
      auto& f = family(name, MetricType::Counter, help);
      for (auto& [method, r] : s.rpcs) counter(f, {{"method", method}}, static_cast<double>(r.*field));
    }
    gauge(family("coetcd_rpcs_in_flight", MetricType::Gauge, "Unary RPCs on the wire now."), {}, s.rpcs_in_flight);
    auto& opened = family("coetcd_streams_opened_total", MetricType::Counter, "Shared streams started, by kind.");
    auto& reopened = family("coetcd_streams_reopened_total", MetricType::Counter, "Shared streams started again after a failure.");
    for (auto& [kind, st] : s.streams) {
      counter(opened, {{"stream", kind}}, static_cast<double>(st.opened));
      counter(reopened, {{"stream", kind}}, static_cast<double>(st.reopened));
    }
    gauge(family("coetcd_watchers", MetricType::Gauge, "Watchers on the shared Watch stream."), {}, s.watchers);
    gauge(family("coetcd_leases_kept", MetricType::Gauge, "Leases kept alive."), {}, s.leases_kept);
    counter(family("coetcd_sessions_lost_total", MetricType::Counter, "Sessions whose lease ended without close()."), {},
            static_cast<double>(s.sessions_lost));
    counter(family("coetcd_replies_polled_total", MetricType::Counter,
                   "Completions the event loop's thread polled from gRPC's queue itself (completion_mode)."),
            {}, static_cast<double>(s.replies_polled));

    auto& held = family("coetcd_lock_held", MetricType::Gauge, "Local holders of a lock name.");
    auto& waiting = family("coetcd_lock_waiting", MetricType::Gauge, "Local callers waiting for a lock name.");
    auto& acquired = family("coetcd_lock_acquired_total", MetricType::Counter, "Successful locks.");
    auto& handoffs = family("coetcd_lock_handoffs_total", MetricType::Counter,
                            "Locks handed over between local callers without a round trip.");
    auto& lost = family("coetcd_lock_lost_total", MetricType::Counter, "Holds that ended by losing the key.");
    auto& wait = family("coetcd_lock_wait_seconds", MetricType::Histogram, "Time from lock() to holding.");
    for (auto& l : s.locks) {
      const std::vector<prometheus::ClientMetric::Label> name{{"name", l.name}};
      gauge(held, name, l.held);
      gauge(waiting, name, l.waiting);
      counter(acquired, name, static_cast<double>(l.acquired));
      counter(handoffs, name, static_cast<double>(l.handoffs));
      counter(lost, name, static_cast<double>(l.lost));
      auto& m = wait.metric.emplace_back();
      m.label = name;
      m.histogram.sample_count = l.wait.count;
      m.histogram.sample_sum = l.wait.sum_seconds;
      std::uint64_t cumulative = 0;
      for (std::size_t i = 0; i < l.wait.counts.size(); ++i) {
        cumulative += l.wait.counts[i];
        const double bound = i < l.wait.bounds.size() ? l.wait.bounds[i] : std::numeric_limits<double>::infinity();
        m.histogram.bucket.push_back({cumulative, bound});
      }
    }
    return {std::make_move_iterator(out.begin()), std::make_move_iterator(out.end())};
  }

 private:
  const coetcd::client& client_;
};

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: metrics_http ENDPOINT PORT\n";
    return 2;
  }
  asio::io_context io;
  coetcd::client_options options{.endpoints = {argv[1]}};
  options.on_event = [](const coetcd::event& e) { std::cout << "event: " << coetcd::to_string(e) << std::endl; };
  coetcd::client etcd(io, options);
  // Registered as a weak_ptr: the collector is dropped from the Exposer before the client goes.
  auto collector = std::make_shared<client_collector>(etcd);
  prometheus::Exposer exposer(std::string("127.0.0.1:") + argv[2]);
  exposer.RegisterCollectable(collector);
  asio::signal_set stop(io, SIGINT, SIGTERM);
  bool stopping = false;
  int status = 0;

  asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    auto session = co_await coetcd::session::async_create(etcd, use_awaitable);
    coetcd::mutex jobs(session, "metrics_http/jobs");
    int running = 4;
    for (int w = 0; w < 4; ++w) {
      asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        asio::steady_timer work(io);
        // Named first: see docs/how-it-works.md on g++ 12.2 and lambdas inside a co_await expression.
        auto job = [&]() -> asio::awaitable<void> {
          work.expires_after(2ms);
          co_await work.async_wait(use_awaitable);
        };
        while (!stopping) {
          co_await coetcd::with_lock(jobs, job);
          work.expires_after(5ms);
          co_await work.async_wait(use_awaitable);
        }
        --running;
      }, asio::detached);
    }
    std::cout << "listening on 127.0.0.1:" << argv[2] << std::endl;
    co_await stop.async_wait(use_awaitable);
    stopping = true;
    asio::steady_timer tick(io);
    while (running > 0) {
      tick.expires_after(5ms);
      co_await tick.async_wait(use_awaitable);
    }
    co_await session.async_close(use_awaitable);
    etcd.close();
  }, [&](std::exception_ptr e) {
    if (!e) return;
    try { std::rethrow_exception(e); } catch (const std::exception& x) { std::cerr << "metrics_http: " << x.what() << '\n'; }
    status = 1;
    stopping = true;
    stop.cancel();
    etcd.close();
  });
  io.run();
  exposer.RemoveCollectable(collector);
  return status;
}
