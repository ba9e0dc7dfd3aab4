// coetcd's counters as Prometheus scrapes them, and its events as a log. Four workers share one
// mutex (as the requests of a server would); GET /metrics answers with client::stats() in
// Prometheus' text format, served with Beast; every event of the client is printed as a line.
//   metrics_http ENDPOINT PORT
//   curl localhost:PORT/metrics
// Stops on SIGINT/SIGTERM, releasing what it holds.
#include <coetcd.hpp>
#include <coetcd/with_lock.hpp>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <iostream>
#include <sstream>

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::use_awaitable;
using namespace std::chrono_literals;

// A label value in the exposition format: backslash, double quote and newline escaped.
std::string label(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\', out += c;
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string prometheus_text(const coetcd::client_stats& s) {
  std::ostringstream o;
  auto family = [&](const char* name, const char* type, const char* help) {
    o << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n';
  };
  family("coetcd_rpcs_sent_total", "counter", "Unary RPCs put on the wire (each attempt), by gRPC method.");
  for (auto& [m, r] : s.rpcs) o << "coetcd_rpcs_sent_total{method=\"" << m << "\"} " << r.sent << '\n';
  family("coetcd_rpcs_failed_total", "counter", "Unary RPCs that ended with an error.");
  for (auto& [m, r] : s.rpcs) o << "coetcd_rpcs_failed_total{method=\"" << m << "\"} " << r.failed << '\n';
  family("coetcd_rpcs_retried_total", "counter", "Attempts sent again after a transient failure.");
  for (auto& [m, r] : s.rpcs) o << "coetcd_rpcs_retried_total{method=\"" << m << "\"} " << r.retried << '\n';
  family("coetcd_rpcs_resent_unanswered_total", "counter",
         "Of the retried: attempts cut after resend_after without an answer and sent again.");
  for (auto& [m, r] : s.rpcs)
    o << "coetcd_rpcs_resent_unanswered_total{method=\"" << m << "\"} " << r.resent_unanswered << '\n';
  family("coetcd_rpcs_in_flight", "gauge", "Unary RPCs on the wire now.");
  o << "coetcd_rpcs_in_flight " << s.rpcs_in_flight << '\n';
  family("coetcd_streams_opened_total", "counter", "Shared streams started, by kind.");
  for (auto& [k, st] : s.streams) o << "coetcd_streams_opened_total{stream=\"" << k << "\"} " << st.opened << '\n';
  family("coetcd_streams_reopened_total", "counter", "Shared streams started again after a failure.");
  for (auto& [k, st] : s.streams) o << "coetcd_streams_reopened_total{stream=\"" << k << "\"} " << st.reopened << '\n';
  family("coetcd_watchers", "gauge", "Watchers on the shared Watch stream.");
  o << "coetcd_watchers " << s.watchers << '\n';
  family("coetcd_leases_kept", "gauge", "Leases kept alive.");
  o << "coetcd_leases_kept " << s.leases_kept << '\n';
  family("coetcd_sessions_lost_total", "counter", "Sessions whose lease ended without close().");
  o << "coetcd_sessions_lost_total " << s.sessions_lost << '\n';
  family("coetcd_lock_held", "gauge", "Local holders of a lock name.");
  for (auto& l : s.locks) o << "coetcd_lock_held{name=\"" << label(l.name) << "\"} " << l.held << '\n';
  family("coetcd_lock_waiting", "gauge", "Local callers waiting for a lock name.");
  for (auto& l : s.locks) o << "coetcd_lock_waiting{name=\"" << label(l.name) << "\"} " << l.waiting << '\n';
  family("coetcd_lock_acquired_total", "counter", "Successful locks.");
  for (auto& l : s.locks) o << "coetcd_lock_acquired_total{name=\"" << label(l.name) << "\"} " << l.acquired << '\n';
  family("coetcd_lock_handoffs_total", "counter", "Locks handed over between local callers without a round trip.");
  for (auto& l : s.locks) o << "coetcd_lock_handoffs_total{name=\"" << label(l.name) << "\"} " << l.handoffs << '\n';
  family("coetcd_lock_lost_total", "counter", "Holds that ended by losing the key.");
  for (auto& l : s.locks) o << "coetcd_lock_lost_total{name=\"" << label(l.name) << "\"} " << l.lost << '\n';
  family("coetcd_lock_wait_seconds", "histogram", "Time from lock() to holding.");
  for (auto& l : s.locks) {
    std::uint64_t cumulative = 0;
    const auto name = label(l.name);
    for (std::size_t i = 0; i < l.wait.counts.size(); ++i) {
      cumulative += l.wait.counts[i];
      o << "coetcd_lock_wait_seconds_bucket{name=\"" << name << "\",le=\"";
      if (i < l.wait.bounds.size()) o << l.wait.bounds[i];
      else o << "+Inf";
      o << "\"} " << cumulative << '\n';
    }
    o << "coetcd_lock_wait_seconds_sum{name=\"" << name << "\"} " << l.wait.sum_seconds << '\n';
    o << "coetcd_lock_wait_seconds_count{name=\"" << name << "\"} " << l.wait.count << '\n';
  }
  return o.str();
}

asio::awaitable<void> serve(asio::ip::tcp::socket socket, coetcd::client& etcd) {
  beast::tcp_stream stream(std::move(socket));
  beast::flat_buffer buffer;
  http::request<http::string_body> req;
  auto [ec, n] = co_await http::async_read(stream, buffer, req, asio::as_tuple(use_awaitable));
  if (ec) co_return;
  http::response<http::string_body> res(http::status::ok, req.version());
  if (req.target() == "/metrics") {
    res.set(http::field::content_type, "text/plain; version=0.0.4");
    res.body() = prometheus_text(etcd.stats());
  } else {
    res.result(http::status::not_found);
  }
  res.prepare_payload();
  co_await http::async_write(stream, res, asio::as_tuple(use_awaitable));
}

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: metrics_http ENDPOINT PORT\n";
    return 2;
  }
  asio::io_context io;
  coetcd::client_options options{.endpoints = {argv[1]}};
  options.on_event = [](const coetcd::event& e) { std::cout << "event: " << coetcd::to_string(e) << std::endl; };
  coetcd::client etcd(io, options);
  asio::ip::tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(std::stoi(argv[2]))});
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
    stop.async_wait([&](auto, int) {
      stopping = true;
      acceptor.close();
    });
    while (!stopping) {
      auto [ec, socket] = co_await acceptor.async_accept(asio::as_tuple(use_awaitable));
      if (ec) break;
      asio::co_spawn(io, serve(std::move(socket), etcd), asio::detached);
    }
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
    stop.cancel();
    acceptor.close();
    etcd.close();
  });
  io.run();
  return status;
}
