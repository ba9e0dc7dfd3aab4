// Pieces of coetcd-bench that are not about etcd: a latency histogram, duration flags, etcd's
// /metrics counters, process CPU and RSS. The Go peer (peers/go) mirrors the histogram bucket for
// bucket so both report percentiles the same way.
#pragma once

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include <sys/resource.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace bench {

/// Log-linear histogram of microseconds: exact below 128 µs, then 64 buckets per power of two
/// (relative error under 1.6%). Constant memory whatever the sample count.
class histogram {
 public:
  void record(std::uint64_t us) {
    auto i = index(us);
    if (i >= counts_.size()) counts_.resize(i + 1, 0);
    ++counts_[i];
    ++total_;
    max_ = std::max(max_, us);
    sum_ += us;
  }
  std::uint64_t count() const noexcept { return total_; }
  std::uint64_t max() const noexcept { return max_; }
  double mean() const noexcept { return total_ ? double(sum_) / double(total_) : 0.0; }
  /// The value below which a fraction q of the samples lie (bucket midpoint, capped at max).
  double quantile(double q) const {
    if (total_ == 0) return 0;
    auto rank = static_cast<std::uint64_t>(q * double(total_ - 1)) + 1;
    std::uint64_t seen = 0;
    for (std::size_t i = 0; i < counts_.size(); ++i) {
      seen += counts_[i];
      if (seen >= rank) return std::min(double(max_), midpoint(i));
    }
    return double(max_);
  }

  static std::size_t index(std::uint64_t v) {
    if (v < 128) return v;
    int msb = 63 - std::countl_zero(v);
    int shift = msb - 6;
    return 128 + std::size_t(shift - 1) * 64 + std::size_t((v >> shift) - 64);
  }
  static double midpoint(std::size_t i) {
    if (i < 128) return double(i);
    auto shift = (i - 128) / 64 + 1;
    auto low = (std::uint64_t((i - 128) % 64) + 64) << shift;
    return double(low) + double((std::uint64_t(1) << shift) - 1) / 2.0;
  }

 private:
  std::vector<std::uint64_t> counts_;
  std::uint64_t total_ = 0, max_ = 0, sum_ = 0;
};

/// "5s", "250ms", "2m", "1.5s", "90" (seconds).
inline std::chrono::microseconds parse_duration(const std::string& text) {
  std::size_t used = 0;
  double v = std::stod(text, &used);
  std::string unit = text.substr(used);
  double scale = unit.empty() || unit == "s" ? 1e6 : unit == "ms" ? 1e3 : unit == "us" ? 1.0 : unit == "m" ? 60e6 : -1;
  if (scale < 0 || v < 0) throw std::invalid_argument("bad duration '" + text + "' (use e.g. 5s, 250ms, 2m)");
  return std::chrono::microseconds(static_cast<std::int64_t>(v * scale));
}

/// What one read of etcd's /metrics tells: grpc_server_msg_received_total per gRPC method (every
/// unary request and every message on a stream, watch create or keepalive, counts one) and the
/// server process's CPU seconds so far (-1 if not shown).
struct server_metrics {
  std::map<std::string, double> received;
  double cpu_s = -1;
};

inline server_metrics read_server_metrics(const std::string& endpoint) {
  namespace asio = boost::asio;
  std::string hostport = endpoint;
  if (auto p = hostport.find("://"); p != std::string::npos) hostport = hostport.substr(p + 3);
  auto colon = hostport.rfind(':');
  if (colon == std::string::npos) throw std::invalid_argument("endpoint without port: " + endpoint);
  asio::io_context ioc;
  asio::ip::tcp::resolver resolver(ioc);
  asio::ip::tcp::socket sock(ioc);
  asio::connect(sock, resolver.resolve(hostport.substr(0, colon), hostport.substr(colon + 1)));
  std::string request = "GET /metrics HTTP/1.0\r\nHost: " + hostport + "\r\n\r\n";
  asio::write(sock, asio::buffer(request));
  std::string body;
  boost::system::error_code ec;
  asio::read(sock, asio::dynamic_buffer(body), ec);  // HTTP/1.0: the server closes at the end
  server_metrics out;
  const std::string cpu = "\nprocess_cpu_seconds_total ";
  if (auto c = body.find(cpu); c != std::string::npos) {
    c += cpu.size();
    out.cpu_s = std::stod(body.substr(c, body.find('\n', c) - c));
  }
  const std::string metric = "grpc_server_msg_received_total{";
  for (std::size_t pos = 0; (pos = body.find(metric, pos)) != std::string::npos;) {
    auto eol = body.find('\n', pos);
    std::string line = body.substr(pos, eol - pos);
    pos = eol;
    auto m = line.find("grpc_method=\"");
    auto sp = line.rfind(' ');
    if (m == std::string::npos || sp == std::string::npos) continue;
    m += 13;
    out.received[line.substr(m, line.find('"', m) - m)] += std::stod(line.substr(sp + 1));
  }
  return out;
}

/// User + system CPU seconds of this process so far (all threads).
inline double cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/// Peak resident set size of this process, in MB.
inline double peak_rss_mb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_maxrss) / 1024.0;
}

/// `s` as a JSON string literal (control characters dropped).
inline std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    if (static_cast<unsigned char>(ch) < 0x20) continue;
    out += ch;
  }
  return out + "\"";
}

}  // namespace bench
