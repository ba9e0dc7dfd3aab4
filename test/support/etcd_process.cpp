// Test support: starting and stopping a real etcd member and cluster (see etcd_process.hpp), and free ports.
#include "etcd_process.hpp"
#include "tcp_proxy.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <random>

namespace coetcd::test {
namespace fs = std::filesystem;
namespace asio = boost::asio;
using namespace std::chrono_literals;

namespace {

// PR_SET_PDEATHSIG fires when the THREAD that forked the child ends, not the process: a member
// restarted from a short-lived thread (test_explore_cluster's fault task restarts members on
// std::async threads) was killed as soon as that thread returned, and the cluster lost its
// quorum for good. Every fork runs on one thread that lives as long as the test binary.
pid_t on_launcher_thread(std::function<pid_t()> fork_child) {
  struct launcher {
    std::mutex m;
    std::condition_variable wake;
    std::deque<std::packaged_task<pid_t()>> work;
  };
  // Never destroyed: its thread waits on it until the process ends (destroying a condition
  // variable a thread waits on hung the binary's exit).
  static launcher& l = *[] {
    auto* made = new launcher;
    std::thread([made] {
      for (;;) {
        std::packaged_task<pid_t()> task;
        {
          std::unique_lock lock(made->m);
          made->wake.wait(lock, [made] { return !made->work.empty(); });
          task = std::move(made->work.front());
          made->work.pop_front();
        }
        task();
      }
    }).detach();
    return made;
  }();
  std::packaged_task<pid_t()> task(std::move(fork_child));
  auto forked = task.get_future();
  {
    std::lock_guard lock(l.m);
    l.work.push_back(std::move(task));
  }
  l.wake.notify_one();
  return forked.get();
}

/// A port handed out stays this process's until it exits: a lock on a file named after it, which
/// the other suites (ctest -j3) check before taking a port. A port free when probed may otherwise
/// go to two suites at once, the second etcd then failing on "bind: address already in use" for
/// every retry on a port its peers know (a clean CI saw it once, on the soak's first start).
/// The kernel drops the lock when the process ends, however it ends; the empty files stay (one
/// per port ever handed out, in $TMPDIR/coetcd-ports).
bool claim_port(unsigned short port) {
  static const fs::path dir = [] {
    auto d = fs::temp_directory_path() / "coetcd-ports";
    std::error_code ec;
    fs::create_directories(d, ec);
    return d;
  }();
  const auto file = dir / (std::to_string(port) + ".lock");
  const int fd = ::open(file.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0666);
  if (fd < 0) return true;  // no lock to take: the probe's bind is all there is
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const bool taken = errno == EWOULDBLOCK;
    ::close(fd);
    return !taken;  // another suite (or this one) has it; a file system without flock: the bind decides
  }
  return true;  // the descriptor stays open, and the lock held, for the rest of the process
}

}  // namespace

int free_port() {
  // Below the kernel's ephemeral range (32768 and up here): a port the kernel hands out for
  // bind(0) is also one it may give any outgoing connection as its source port before etcd
  // binds it, which CI saw as "bind: address already in use" while other suites ran.
  static std::mt19937 rng(std::random_device{}() ^ static_cast<unsigned>(getpid()));
  static const int ephemeral_low = [] {
    int low = 32768;
    std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> low;
    return low;
  }();
  asio::io_context ioc;
  for (int attempt = 0; ephemeral_low > 11000 && attempt < 200; ++attempt) {
    auto port = static_cast<unsigned short>(std::uniform_int_distribution<int>(10000, ephemeral_low - 1)(rng));
    // The lock first: a port another suite holds is not even bound for a probe (its member may
    // be stopped for a moment, and would find the port busy as it comes back).
    if (!claim_port(port)) continue;
    boost::system::error_code ec;
    asio::ip::tcp::acceptor a(ioc);
    a.open(asio::ip::tcp::v4(), ec);
    if (!ec) a.bind(asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), port), ec);
    if (!ec) return port;  // (a port busy for another reason stays claimed, unused: harmless)
  }
  asio::ip::tcp::acceptor a(ioc, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  return a.local_endpoint().port();
}

fs::path make_temp_dir(const std::string& tag) {
  std::string tmpl = (fs::temp_directory_path() / ("coetcd-" + tag + "-XXXXXX")).string();
  if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
  return tmpl;
}

std::string etcd_binary() {
  const char* v = std::getenv("COETCD_ETCD");
  return v && *v ? v : "/usr/bin/etcd";
}

std::string etcdctl_binary() {
  const char* v = std::getenv("COETCD_ETCDCTL");
  return v && *v ? v : "/usr/bin/etcdctl";
}

int etcd_version() {
  static const int version = [] {
    // "etcd Version: 3.5.16" on the first line.
    auto r = run_command("'" + etcd_binary() + "' --version", std::chrono::seconds(30));
    auto at = r.output.find("etcd Version: ");
    int major = 0, minor = 0;
    if (r.exit_code != 0 || at == std::string::npos ||
        std::sscanf(r.output.c_str() + at + 14, "%d.%d", &major, &minor) != 2)
      throw std::runtime_error("cannot read the version of " + etcd_binary() + ": " + r.output);
    return major * 100 + minor;
  }();
  return version;
}

command_result run_command(const std::string& cmd, std::chrono::seconds limit) {
  // posix_spawn, not popen: the command gets a process group of its own so a deadline can kill
  // all of it, and a command that never ends fails its test instead of hanging it (a lockcheck
  // clean whose delete failed once waited for SIGTERM forever, CI's partitions run timed out).
  command_result r;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return r;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  const char* argv[] = {"sh", "-c", cmd.c_str(), nullptr};
  pid_t pid = -1;
  int spawned = ::posix_spawn(&pid, "/bin/sh", &actions, &attr, const_cast<char* const*>(argv), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(fds[1]);
  if (spawned != 0) {
    ::close(fds[0]);
    return r;
  }
  const auto deadline = std::chrono::steady_clock::now() + limit;
  bool killed = false;
  char buf[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      ::kill(-pid, SIGKILL);
      killed = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(std::min<long long>(left.count(), 1000))) <= 0) continue;
    auto n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    r.output.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (killed) {
    r.output += "\n[run_command: killed after " + std::to_string(limit.count()) + " s: " + cmd + "]\n";
    r.exit_code = -1;
  } else {
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  return r;
}

tls_files make_certificates(const fs::path& dir) {
  tls_files f{(dir / "ca.pem").string(),     (dir / "server.pem").string(), (dir / "server-key.pem").string(),
              (dir / "client.pem").string(), (dir / "client-key.pem").string(), (dir / "other-ca.pem").string()};
  std::string d = dir.string();
  std::ofstream(dir / "san.cnf") << "subjectAltName=IP:127.0.0.1,DNS:localhost\n";
  std::ofstream(dir / "client.cnf") << "extendedKeyUsage=clientAuth\n";
  std::string script =
      "set -e; cd '" + d + "';"
      "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=coetcd-test-ca -keyout ca-key.pem -out ca.pem;"
      "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=other-ca -keyout other-ca-key.pem -out other-ca.pem;"
      "openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout server-key.pem -out server.csr;"
      "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 2 -extfile san.cnf -out server.pem;"
      "openssl req -newkey rsa:2048 -nodes -subj /CN=root -keyout client-key.pem -out client.csr;"
      "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 2 -extfile client.cnf -out client.pem";
  auto r = run_command("bash -c \"" + script + "\"");
  if (r.exit_code != 0) throw std::runtime_error("openssl failed: " + r.output);
  return f;
}

etcd_process::etcd_process(etcd_config cfg, bool start_now)
    : cfg_(std::move(cfg)), dir_(make_temp_dir("etcd")),
      client_port_(cfg_.client_port ? cfg_.client_port : free_port()),
      peer_port_(cfg_.peer_port ? cfg_.peer_port : free_port()), metrics_port_(free_port()) {
  if (start_now) start();
}

etcd_process::~etcd_process() {
  stop();
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

std::string etcd_process::client_url() const {
  return std::string(cfg_.tls ? "https" : "http") + "://127.0.0.1:" + std::to_string(client_port_);
}

std::string etcd_process::peer_url() const { return "http://127.0.0.1:" + std::to_string(peer_port_); }

std::string etcd_process::endpoint() const {
  return cfg_.tls ? client_url() : "127.0.0.1:" + std::to_string(client_port_);
}

void etcd_process::start() {
  if (pid_ > 0) return;
  // A restart reuses our ports, and while we were down another suite may hold one for a moment
  // (free_port binds each port it probes): try again a few times before giving up. A member
  // that never ran and chose its own ports (not one of a cluster, whose peers know its ports)
  // takes new ones instead: another suite's etcd that took the same port keeps it (CI saw one
  // port busy for every retry).
  const bool own_ports = !started_once_ && cfg_.client_port == 0 && cfg_.peer_port == 0;
  for (int attempt = 0;; ++attempt) {
    launch();
    try {
      wait_healthy();
      started_once_ = true;
      return;
    } catch (const std::runtime_error& e) {
      if (attempt >= 4 || std::string(e.what()).find("address already in use") == std::string::npos) throw;
      std::this_thread::sleep_for(500ms);
      if (own_ports) {
        std::error_code ec;
        fs::remove_all(dir_ / "data", ec);  // nothing of the failed start is kept
        client_port_ = free_port();
        peer_port_ = free_port();
        metrics_port_ = free_port();
      }
    }
  }
}

void etcd_process::launch() {
  if (pid_ > 0) return;
  std::string peer = peer_url();
  std::string cluster = cfg_.initial_cluster.empty() ? cfg_.name + "=" + peer : cfg_.initial_cluster;
  std::vector<std::string> args = {etcd_binary(),
                                   "--name=" + cfg_.name,
                                   "--data-dir=" + (dir_ / "data").string(),
                                   "--listen-client-urls=" + client_url(),
                                   "--advertise-client-urls=" + client_url(),
                                   "--listen-peer-urls=" + peer,
                                   "--initial-advertise-peer-urls=" +
                                       (cfg_.advertise_peer_port
                                            ? "http://127.0.0.1:" + std::to_string(cfg_.advertise_peer_port)
                                            : peer),
                                   "--initial-cluster=" + cluster,
                                   "--listen-metrics-urls=http://127.0.0.1:" + std::to_string(metrics_port_),
                                   "--logger=zap",
                                   "--log-level=warn"};
  if (cfg_.tls) {
    args.push_back("--cert-file=" + cfg_.certs.server_cert);
    args.push_back("--key-file=" + cfg_.certs.server_key);
    if (cfg_.client_cert_auth) {
      args.push_back("--client-cert-auth");
      args.push_back("--trusted-ca-file=" + cfg_.certs.ca);
    }
  }
  if (cfg_.auth_token_ttl > 0) args.push_back("--auth-token-ttl=" + std::to_string(cfg_.auth_token_ttl));
  args.insert(args.end(), cfg_.extra_flags.begin(), cfg_.extra_flags.end());
  std::string log = (dir_ / "etcd.log").string();
  pid_t pid = on_launcher_thread([&]() -> pid_t {
    pid_t parent = getpid();
    std::fflush(nullptr);  // or the child's freopen writes our buffered output a second time
    pid_t child = fork();
    if (child == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the test binary (see on_launcher_thread)
      if (getppid() != parent) _exit(1);
      FILE* out = std::freopen(log.c_str(), "a", stdout);
      (void)out;
      dup2(fileno(stdout), fileno(stderr));
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    return child;
  });
  if (pid < 0) throw std::runtime_error("fork failed");
  pid_ = pid;
}

void etcd_process::wait_healthy(std::chrono::seconds limit) {
  auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    int status = 0;
    if (pid_ > 0 && waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      std::ifstream in(dir_ / "etcd.log");
      std::stringstream ss;
      ss << in.rdbuf();
      throw std::runtime_error("etcd " + cfg_.name + " exited during start-up:\n" + ss.str());
    }
    if (healthy()) return;
    std::this_thread::sleep_for(50ms);
  }
  kill();
  throw std::runtime_error("etcd " + cfg_.name + " did not become healthy within " + std::to_string(limit.count()) +
                           " s");
}

namespace {
// Every thread of `pid` has stopped ('T' or 't' in /proc/PID/task/TID/stat).
bool all_threads_stopped(int pid) {
  const std::filesystem::path tasks = "/proc/" + std::to_string(pid) + "/task";
  std::error_code ec;
  for (const auto& t : std::filesystem::directory_iterator(tasks, ec)) {
    std::ifstream in(t.path() / "stat");
    std::string line;
    std::getline(in, line);
    const auto close = line.rfind(')');  // the command name may hold spaces and parentheses
    if (close == std::string::npos || close + 2 >= line.size()) continue;  // the thread just ended
    const char state = line[close + 2];
    if (state != 'T' && state != 't') return false;
  }
  return !ec;
}
}  // namespace

void etcd_process::pause() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGSTOP);
  // SIGSTOP only asks: a thread running on another core answers a request or two before it
  // stops. Return when the whole process has (a test that pauses etcd and then sends a request
  // saw that request answered, under ctest -j3).
  const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!all_threads_stopped(pid_) && std::chrono::steady_clock::now() < limit)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

void etcd_process::resume() {
  if (pid_ > 0) ::kill(pid_, SIGCONT);
}

void etcd_process::stop() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGTERM);
  ::kill(pid_, SIGCONT);
  auto until = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < until) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return;
    }
    std::this_thread::sleep_for(20ms);
  }
  kill();
}

void etcd_process::kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  ::kill(pid_, SIGCONT);  // a paused process dies at once
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
}

namespace {
std::string http_get(int port, const std::string& path) {
  try {
    asio::io_context ioc;
    asio::ip::tcp::socket s(ioc);
    s.connect({asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)});
    std::string req = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    asio::write(s, asio::buffer(req));
    std::string out;
    boost::system::error_code ec;
    asio::read(s, asio::dynamic_buffer(out), ec);
    auto body = out.find("\r\n\r\n");
    return body == std::string::npos ? std::string() : out.substr(body + 4);
  } catch (const std::exception&) {
    return {};
  }
}

double metric_sum(const std::string& text, const std::string& name, const std::string& method) {
  double sum = 0;
  std::istringstream in(text);
  std::string line;
  std::string needle = "grpc_method=\"" + method + "\"";
  while (std::getline(in, line)) {
    if (line.rfind(name + "{", 0) != 0 || line.find(needle) == std::string::npos) continue;
    sum += std::stod(line.substr(line.rfind(' ') + 1));
  }
  return sum;
}
}  // namespace

bool etcd_process::healthy() const {
  return http_get(metrics_port_, "/health").find("\"health\":\"true\"") != std::string::npos;
}

std::string etcd_process::metrics() const { return http_get(metrics_port_, "/metrics"); }

bool etcd_process::is_leader() const {
  if (pid_ <= 0) return false;
  return metrics().find("\netcd_server_is_leader 1") != std::string::npos;
}

etcd_cluster::etcd_cluster(int members, etcd_config common, bool partitionable) {
  std::vector<etcd_config> cfgs;
  std::string cluster;
  for (int i = 0; i < members; ++i) {
    auto c = common;
    c.name = "m" + std::to_string(i);
    c.client_port = free_port();
    c.peer_port = free_port();
    if (partitionable) {
      // Which member dialled: the owner of the connection's other end, among the members now
      // running (a restarted member has a new PID).
      // Runs on the proxy's thread: members_ is read under members_mutex_.
      auto identify = [this](const asio::ip::tcp::endpoint& remote, unsigned short port) {
        std::vector<int> pids;
        {
          std::lock_guard lock(members_mutex_);
          for (auto& m : members_) pids.push_back(m->pid());
        }
        return socket_owner(remote, port, pids);
      };
      peer_proxies_.push_back(std::make_unique<tcp_proxy>("127.0.0.1:" + std::to_string(c.peer_port), identify));
      client_proxies_.push_back(std::make_unique<tcp_proxy>("127.0.0.1:" + std::to_string(c.client_port)));
      c.advertise_peer_port = peer_proxies_.back()->port();
    }
    cluster += (i ? "," : "") + c.name + "=http://127.0.0.1:" +
               std::to_string(c.advertise_peer_port ? c.advertise_peer_port : c.peer_port);
    cfgs.push_back(std::move(c));
  }
  for (auto& c : cfgs) {
    c.initial_cluster = cluster;
    auto m = std::make_unique<etcd_process>(c, false);
    std::lock_guard lock(members_mutex_);
    members_.push_back(std::move(m));
  }
  start_all();
}

etcd_cluster::~etcd_cluster() {
  // Every member stops before the proxies go (a member stopping while its peers' links are gone
  // waits for them), and each stays in members_ until all have: a member still running dials
  // the ones stopped, and the proxy's thread then reads members_ (a cleared entry was a null
  // pointer under UBSan).
  for (auto& m : members_) m->stop();
  std::lock_guard lock(members_mutex_);
  members_.clear();
}

std::string etcd_cluster::client_endpoint(int i) const {
  return client_proxies_.at(static_cast<std::size_t>(i))->endpoint();
}

std::vector<std::string> etcd_cluster::client_endpoints() const {
  std::vector<std::string> out;
  for (auto& p : client_proxies_) out.push_back(p->endpoint());
  return out;
}

void etcd_cluster::isolate(int i) {
  for (int j = 0; j < size(); ++j) {
    if (j == i) peer_proxy(j).hold();  // nothing reaches i
    else peer_proxy(j).hold_from({i});  // nothing from i reaches j (nor what the proxy cannot name)
  }
}

void etcd_cluster::isolate_clients_of(int i) { client_proxy(i).hold(); }

void etcd_cluster::delay_all(std::chrono::milliseconds d) {
  for (auto& p : peer_proxies_) p->delay(d);
  for (auto& p : client_proxies_) p->delay(d);
}

void etcd_cluster::heal() {
  for (auto& p : peer_proxies_) {
    p->restore();
    p->delay(std::chrono::milliseconds(0));
  }
  for (auto& p : client_proxies_) {
    p->restore();
    p->delay(std::chrono::milliseconds(0));
  }
}

void etcd_cluster::start_all() {
  for (auto& m : members_) m->launch();
  for (auto& m : members_) m->wait_healthy(30s);
}

std::vector<std::string> etcd_cluster::endpoints() const {
  std::vector<std::string> out;
  for (auto& m : members_) out.push_back(m->endpoint());
  return out;
}

int etcd_cluster::leader() const {
  for (std::size_t i = 0; i < members_.size(); ++i)
    if (members_[i]->is_leader()) return static_cast<int>(i);
  return -1;
}

int etcd_cluster::wait_for_leader(std::chrono::seconds limit) const {
  auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    if (int l = leader(); l >= 0) return l;
    std::this_thread::sleep_for(50ms);
  }
  throw std::runtime_error("no etcd leader within " + std::to_string(limit.count()) + " s");
}

int etcd_cluster::wait_for_settled_leader(std::chrono::seconds limit) const {
  auto until = std::chrono::steady_clock::now() + limit;
  int seen = -1;
  while (std::chrono::steady_clock::now() < until) {
    int l = leader();
    // A member that answers and follows nobody is not settled yet; one that does not answer
    // (exited on its own, not yet reaped) is left out, as wait_for_leader() leaves it out.
    for (const auto& m : members_)
      if (m->pid() > 0) {
        const auto metrics = m->metrics();
        if (!metrics.empty() && metrics.find("\netcd_server_has_leader 1") == std::string::npos) l = -1;
      }
    if (l >= 0 && l == seen) return l;
    seen = l;
    std::this_thread::sleep_for(300ms);
  }
  throw std::runtime_error("no settled etcd leader within " + std::to_string(limit.count()) + " s");
}

double etcd_process::grpc_started(const std::string& method) const {
  return metric_sum(metrics(), "grpc_server_started_total", method);
}

double etcd_process::grpc_handled(const std::string& method) const {
  return metric_sum(metrics(), "grpc_server_handled_total", method);
}

command_result etcdctl(const etcd_process& etcd, const std::string& args) {
  std::string cmd = "ETCDCTL_API=3 " + etcdctl_binary() + " --endpoints=" + etcd.client_url();
  if (etcd.config().tls) {
    cmd += " --cacert=" + etcd.config().certs.ca;
    if (etcd.config().client_cert_auth)
      cmd += " --cert=" + etcd.config().certs.client_cert + " --key=" + etcd.config().certs.client_key;
  }
  return run_command(cmd + " " + args);
}

}  // namespace coetcd::test
