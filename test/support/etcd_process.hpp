// Test support: a real etcd member started on 127.0.0.1 with free ports and a temporary data dir,
// stopped by PID (also when the test binary dies: the child gets SIGKILL with its parent).
#pragma once

#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace coetcd::test {

struct tls_files {
  std::string ca, server_cert, server_key, client_cert, client_key, other_ca;
};

/// Makes a CA, a server certificate for 127.0.0.1/localhost, a client certificate and an unrelated
/// CA with openssl, in `dir`.
tls_files make_certificates(const std::filesystem::path& dir);

struct etcd_config {
  bool tls = false;             // serve clients over https with the generated server certificate
  bool client_cert_auth = false;
  tls_files certs;
  int auth_token_ttl = 0;       // seconds; 0: etcd's default
  std::vector<std::string> extra_flags;  // passed as they are ("--experimental-...=1s")
  // Membership, set by etcd_cluster. Defaults: a single-member cluster of its own on free ports.
  std::string name = "m0";
  std::string initial_cluster;  // "name=peer-url,..."; empty: this member alone
  int client_port = 0, peer_port = 0;
  int advertise_peer_port = 0;  // what the other members dial (a proxy's port); 0: peer_port
};

class etcd_process {
 public:
  /// Starts at once and waits for health unless `start_now` is false (cluster members are
  /// launched together: none is healthy before a quorum is up).
  explicit etcd_process(etcd_config cfg = {}, bool start_now = true);
  ~etcd_process();
  etcd_process(const etcd_process&) = delete;
  etcd_process& operator=(const etcd_process&) = delete;

  void start();                  // (re)starts on the same ports and data dir, waits for health
  void launch();                 // starts the process, does not wait
  void wait_healthy(std::chrono::seconds limit = std::chrono::seconds(20));
  void stop();                   // SIGTERM, then SIGKILL after 10 s; waits for the exit
  void kill();                   // SIGKILL
  void pause();                  // SIGSTOP
  void resume();                 // SIGCONT
  bool running() const { return pid_ > 0; }
  bool is_leader() const;        // from /metrics; false when it does not answer
  int pid() const { return pid_; }

  std::string endpoint() const;  // host:port, or https://host:port with TLS
  std::string client_url() const;
  std::string peer_url() const;
  std::string metrics() const;   // GET /metrics
  /// Sum of grpc_server_started_total for one method (e.g. "Watch", "LeaseKeepAlive").
  double grpc_started(const std::string& method) const;
  double grpc_handled(const std::string& method) const;
  const std::filesystem::path& dir() const { return dir_; }
  const etcd_config& config() const { return cfg_; }

 private:
  bool healthy() const;
  etcd_config cfg_;
  std::filesystem::path dir_;
  int client_port_, peer_port_, metrics_port_;
  std::atomic<int> pid_{-1};
  bool started_once_ = false;
};

class tcp_proxy;

/// A cluster of etcd members on 127.0.0.1 (free ports, temp dirs), each stopped by PID when the
/// cluster goes away, also when a test fails.
///
/// A partitionable cluster puts a tcp_proxy in front of every member's peer port (the members
/// advertise the proxy, so all raft, lease and probe traffic between two members passes one) and
/// another in front of every client port (client_endpoint()). The proxy in front of a member names
/// each incoming connection by the member process that dialled it, so isolate() can stop the
/// traffic between one member and the rest in both directions while every member keeps running.
class etcd_cluster {
 public:
  explicit etcd_cluster(int members = 3, etcd_config common = {}, bool partitionable = false);
  ~etcd_cluster();
  etcd_process& member(int i) { return *members_.at(static_cast<std::size_t>(i)); }
  int size() const { return static_cast<int>(members_.size()); }
  std::vector<std::string> endpoints() const;
  /// Index of the member that is raft leader now, or -1.
  int leader() const;
  /// Waits until some running member is leader; returns its index. Throws after `limit`.
  int wait_for_leader(std::chrono::seconds limit = std::chrono::seconds(20)) const;
  /// After a heal: until every running member follows one leader, the same at two looks 300 ms
  /// apart. etcd 3.4 runs without pre-vote, so a member cut off for a while comes back with a
  /// higher term and unseats the leader that wait_for_leader() had just seen.
  int wait_for_settled_leader(std::chrono::seconds limit = std::chrono::seconds(30)) const;
  /// Starts every stopped member together and waits until all are healthy.
  void start_all();

  // Partitionable clusters only.
  /// The member's client port through its client proxy.
  std::string client_endpoint(int i) const;
  std::vector<std::string> client_endpoints() const;
  /// Holds every byte between member `i` and the others, both ways (a partition: connections
  /// stay open, nothing passes, nobody is told).
  void isolate(int i);
  /// Holds every byte between clients that use client_endpoint(i) and member `i`.
  void isolate_clients_of(int i);
  /// Adds `d` each way to every link: member to member and client to member.
  void delay_all(std::chrono::milliseconds d);
  /// Ends every isolation and delay.
  void heal();
  tcp_proxy& peer_proxy(int i) { return *peer_proxies_.at(static_cast<std::size_t>(i)); }
  tcp_proxy& client_proxy(int i) { return *client_proxies_.at(static_cast<std::size_t>(i)); }

 private:
  std::vector<std::unique_ptr<tcp_proxy>> peer_proxies_, client_proxies_;  // outlive the members
  mutable std::mutex members_mutex_;  // members_ is read from the proxies' threads
  std::vector<std::unique_ptr<etcd_process>> members_;
};

struct command_result {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

/// Runs a shell command and captures its output; past `limit` its process group is killed and
/// the exit code is -1 (the output then ends with a line saying so).
command_result run_command(const std::string& cmd, std::chrono::seconds limit = std::chrono::seconds(120));
/// The etcd server binary the harness starts: $COETCD_ETCD, else Debian's /usr/bin/etcd.
std::string etcd_binary();
/// The etcdctl binary the tests run: $COETCD_ETCDCTL, else /usr/bin/etcdctl.
std::string etcdctl_binary();
/// The version etcd_binary() reports, as major * 100 + minor (304 for 3.4.23, 305 for 3.5.16):
/// for the cases whose expectation differs by version (docs/etcd-versions.md).
int etcd_version();
/// Runs `etcdctl` (API v3) against the server with the given extra flags.
command_result etcdctl(const etcd_process& etcd, const std::string& args);

int free_port();
std::filesystem::path make_temp_dir(const std::string& tag);

}  // namespace coetcd::test
