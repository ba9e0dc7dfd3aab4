#pragma once

#include <coetcd/event.hpp>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace coetcd {

/// TLS settings. Empty `ca_file` trusts the system roots. `cert_file` and `key_file` together
/// enable client-certificate (mutual) TLS. Files are read when the client is constructed.
struct tls_options {
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
};

struct client_options {
  /// Cluster members as host:port, http://host:port or https://host:port. Requests go to any
  /// member that is up; a dead member does not stop the client while another one answers.
  std::vector<std::string> endpoints{"127.0.0.1:2379"};
  /// Deadline of each unary request, including the time to connect. An unreachable cluster
  /// fails requests with error::endpoints_unreachable when it passes.
  std::chrono::milliseconds request_timeout{std::chrono::seconds(10)};
  /// TLS for every endpoint (also implied by https:// endpoints, then with system roots).
  std::optional<tls_options> tls;
  /// Authentication. When `user` is non-empty the client authenticates before its first request
  /// and again whenever the server reports the token invalid or stale.
  std::string user;
  std::string password;
  /// HTTP/2 keepalive pings on the connection, so a dead peer is detected while streams idle.
  std::chrono::milliseconds keepalive_time{std::chrono::seconds(10)};
  std::chrono::milliseconds keepalive_timeout{std::chrono::seconds(5)};
  /// Told of connections, stream reopenings, watch resumptions, late keepalives, lost sessions,
  /// lock acquisitions, releases and losses, and leader changes (see event.hpp). Called on the
  /// client's strand, never inside a coetcd call; empty (the default) costs nothing.
  event_hook on_event;
};

}  // namespace coetcd
