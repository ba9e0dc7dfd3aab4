// Parsing of endpoint strings (host:port, IPv4, IPv6, names) and the gRPC target built from them.
#include "client_impl.hpp"

#include <boost/system/system_error.hpp>

#include <netdb.h>
#include <arpa/inet.h>

#include <cctype>
#include <charconv>

namespace coetcd::detail {
namespace {

[[noreturn]] void bad_endpoint(const std::string& ep, const char* why) {
  throw boost::system::system_error(make_error_code(error::invalid_endpoint),
                                    "coetcd: endpoint '" + ep + "': " + why);
}

bool is_ipv4(const std::string& h) {
  in_addr a{};
  return inet_pton(AF_INET, h.c_str(), &a) == 1;
}
bool is_ipv6(const std::string& h) {
  in6_addr a{};
  return inet_pton(AF_INET6, h.c_str(), &a) == 1;
}

std::string join(const std::vector<endpoint>& eps, bool v6) {
  std::string out;
  for (const auto& e : eps) {
    if (!out.empty()) out += ',';
    out += v6 ? "[" + e.host + "]" : e.host;
    out += ':' + std::to_string(e.port);
  }
  return out;
}

}  // namespace

std::vector<endpoint> parse_endpoints(const std::vector<std::string>& in) {
  if (in.empty()) bad_endpoint("", "no endpoints given");
  std::vector<endpoint> out;
  for (const auto& raw : in) {
    endpoint e;
    std::string_view s = raw;
    if (auto p = s.find("://"); p != std::string_view::npos) {
      auto scheme = s.substr(0, p);
      if (scheme == "https") e.tls = true;
      else if (scheme != "http") bad_endpoint(raw, "scheme must be http or https");
      s.remove_prefix(p + 3);
    }
    if (!s.empty() && s.back() == '/') s.remove_suffix(1);
    if (s.find('/') != std::string_view::npos) bad_endpoint(raw, "unexpected path after host:port");
    std::string_view port;
    if (!s.empty() && s.front() == '[') {
      auto close = s.find(']');
      if (close == std::string_view::npos || close + 1 >= s.size() || s[close + 1] != ':')
        bad_endpoint(raw, "expected [ipv6]:port");
      e.host = std::string(s.substr(1, close - 1));
      port = s.substr(close + 2);
      if (!is_ipv6(e.host)) bad_endpoint(raw, "not an IPv6 address inside []");
    } else {
      auto colon = s.rfind(':');
      if (colon == std::string_view::npos) bad_endpoint(raw, "missing :port");
      e.host = std::string(s.substr(0, colon));
      port = s.substr(colon + 1);
      if (e.host.empty()) bad_endpoint(raw, "missing host");
      for (char c : e.host)
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_'))
          bad_endpoint(raw, "host has characters a host name cannot have");
    }
    unsigned value = 0;
    auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (port.empty() || ec != std::errc() || ptr != port.data() + port.size() || value == 0 || value > 65535)
      bad_endpoint(raw, "port must be a number from 1 to 65535");
    e.port = static_cast<std::uint16_t>(value);
    if (!out.empty() && out.front().tls != e.tls) bad_endpoint(raw, "http and https endpoints mixed");
    out.push_back(std::move(e));
  }
  return out;
}

std::string peer_address(grpc::ClientContext& ctx) {
  std::string peer = ctx.peer();  // "ipv4:127.0.0.1:2379"
  if (auto colon = peer.find(':'); colon != std::string::npos && peer.rfind("ip", 0) == 0) peer.erase(0, colon + 1);
  return peer;
}

bool may_have_reached_a_server(bool ready_when_sent, bool ready_now, std::string_view peer, std::string_view target) {
  if (ready_when_sent || ready_now) return true;
  // A connection's peer is one address ("ipv4:127.0.0.1:2379"). The target of one literal
  // address reads the same, so there a peer equal to the target says nothing either way; a
  // target of several addresses, or a name, differs from every connection's peer. (A call queued
  // while no member was connected, sent once one was, and held past its deadline by a member
  // that meanwhile announced its shutdown, is thus taken as unsent only on a one-address target.)
  const bool one_address = (peer.starts_with("ipv4:") || peer.starts_with("ipv6:")) && peer.find(',') == peer.npos;
  return !target.empty() && one_address && peer != target;
}

std::string grpc_target(const std::vector<endpoint>& eps) {
  bool all_v4 = true, all_v6 = true;
  for (const auto& e : eps) {
    all_v4 = all_v4 && is_ipv4(e.host);
    all_v6 = all_v6 && is_ipv6(e.host);
  }
  if (all_v4) return "ipv4:" + join(eps, false);
  if (all_v6) return "ipv6:" + join(eps, true);
  if (eps.size() == 1) return "dns:///" + eps[0].host + ":" + std::to_string(eps[0].port);
  // Several names: gRPC's dns resolver takes one, so resolve each here (once, at construction)
  // and let the channel balance across the addresses. IPv4 answers are preferred.
  std::vector<endpoint> resolved;
  for (const auto& e : eps) {
    if (is_ipv4(e.host)) {
      resolved.push_back(e);
      continue;
    }
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    if (getaddrinfo(e.host.c_str(), nullptr, &hints, &res) == 0 && res) {
      char buf[INET_ADDRSTRLEN];
      auto* sin = reinterpret_cast<sockaddr_in*>(res->ai_addr);
      if (inet_ntop(AF_INET, &sin->sin_addr, buf, sizeof buf)) resolved.push_back({e.tls, buf, e.port});
      freeaddrinfo(res);
    }
  }
  if (resolved.empty()) return "dns:///" + eps[0].host + ":" + std::to_string(eps[0].port);
  return "ipv4:" + join(resolved, false);
}

}  // namespace coetcd::detail
