// Test support: a TCP proxy on its own thread in front of one etcd port (a member's client port,
// or its peer port for the partition faults of etcd_cluster). A test can
//   - cut it: every connection closed, new ones closed as soon as they arrive (a refused port);
//   - hold it: nothing passes either way, connections stay open and new ones are accepted but
//     not forwarded, as in a partition where packets vanish and nobody is told; for every
//     connection, or only for those opened by given sources (the cluster names a source by the
//     member process that dialled, see socket_owner);
//   - delay it: every byte, each way, arrives `d` later, order kept;
//   - restore it (cut and hold end; held bytes and connections then pass, as TCP's retransmits
//     would deliver them after a partition heals).
// The member and every client that does not use the proxy see nothing.
#pragma once

#include <coetcd/client_options.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

namespace coetcd::test {

/// Which of `pids` owns the TCP socket whose local end is `remote` and whose peer is
/// 127.0.0.1:`port` (that is: which process dialled the listener on `port` from `remote`), as an
/// index into `pids`; -1 when none does (or the connection is already gone). Reads /proc/net/tcp
/// and /proc/PID/fd, which needs no privileges for our own children.
inline int socket_owner(const boost::asio::ip::tcp::endpoint& remote, unsigned short port,
                        const std::vector<int>& pids) {
  auto hex_endpoint = [](const boost::asio::ip::tcp::endpoint& e) {
    // /proc/net/tcp prints an IPv4 address as the 32-bit word in host order, then the port.
    auto b = e.address().to_v4().to_bytes();
    std::uint32_t word = b[0] | (b[1] << 8) | (b[2] << 16) | (std::uint32_t(b[3]) << 24);
    char buf[16];
    std::snprintf(buf, sizeof buf, "%08X:%04X", word, e.port());
    return std::string(buf);
  };
  const auto local = hex_endpoint(remote);
  const auto peer = hex_endpoint({boost::asio::ip::make_address("127.0.0.1"), port});
  std::ifstream in("/proc/net/tcp");
  std::string line, inode;
  std::getline(in, line);  // the header
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string sl, l, r, skip;
    f >> sl >> l >> r;
    if (l != local || r != peer) continue;
    for (int i = 0; i < 6; ++i) f >> skip;  // st, queues, timer, retransmits, uid, timeout
    f >> inode;
    break;
  }
  if (inode.empty() || inode == "0") return -1;
  const std::string want = "socket:[" + inode + "]";
  for (std::size_t i = 0; i < pids.size(); ++i) {
    if (pids[i] <= 0) continue;
    std::error_code ec;
    for (const auto& fd : std::filesystem::directory_iterator("/proc/" + std::to_string(pids[i]) + "/fd", ec)) {
      std::error_code lec;
      if (std::filesystem::read_symlink(fd.path(), lec).string() == want) return static_cast<int>(i);
    }
  }
  return -1;
}

class tcp_proxy {
 public:
  using tcp = boost::asio::ip::tcp;
  /// Names the source of a connection accepted from `remote` on the proxy's `port`: an index
  /// the test chose, or -1 when unknown.
  using identify_fn = std::function<int(const tcp::endpoint& remote, unsigned short port)>;

  /// Forwards 127.0.0.1:<a free port> (or `port`) to `target` ("host:port", plain TCP).
  explicit tcp_proxy(const std::string& target, identify_fn identify = {}, unsigned short port = 0)
      : acceptor_(ioc_, {boost::asio::ip::make_address("127.0.0.1"), port}), identify_(std::move(identify)) {
    auto colon = target.rfind(':');
    target_ = {boost::asio::ip::make_address(target.substr(0, colon)),
               static_cast<unsigned short>(std::stoi(target.substr(colon + 1)))};
    boost::asio::co_spawn(ioc_, accept_loop(), boost::asio::detached);
    thread_ = std::thread([this] { ioc_.run(); });
  }
  ~tcp_proxy() {
    on_loop([this] {
      acceptor_.close();
      close_all();
    });
    ioc_.stop();
    thread_.join();
  }
  tcp_proxy(const tcp_proxy&) = delete;
  tcp_proxy& operator=(const tcp_proxy&) = delete;

  std::string endpoint() const { return "127.0.0.1:" + std::to_string(port()); }
  unsigned short port() const { return acceptor_.local_endpoint().port(); }

  /// Closes every connection and refuses new ones (accepted, then closed at once) until restore().
  void cut() {
    on_loop([this] {
      cut_ = true;
      close_all();
    });
  }
  /// Nothing passes on any connection, old or new, until restore().
  void hold() {
    on_loop([this] {
      hold_all_ = true;
      wake_all();
    });
  }
  /// Nothing passes on connections from these sources, or from sources the proxy cannot name.
  void hold_from(std::set<int> sources) {
    on_loop([this, s = std::move(sources)] {
      hold_from_ = s;
      wake_all();
    });
  }
  /// Ends cut() and hold(); a delay stays.
  void restore() {
    on_loop([this] {
      cut_ = hold_all_ = false;
      hold_from_.clear();
      wake_all();
    });
  }
  /// Every byte, each way, passes `d` after it arrived; 0 ends the delay.
  void delay(std::chrono::milliseconds d) {
    on_loop([this, d] {
      delay_ = d;
      wake_all();
    });
  }
  /// Connections accepted and forwarded so far.
  int connections() const { return connections_; }
  /// Connections open now whose bytes are held.
  int held() {
    int n = 0;
    on_loop([&] {
      for (auto& l : links_) n += is_held(*l);
    });
    return n;
  }

 private:
  using clock = std::chrono::steady_clock;
  struct chunk {
    clock::time_point due;
    std::vector<char> data;
  };
  // One direction of a connection: bytes read from one socket wait here until they may be written
  // to the other (due, and not held). The timer wakes the writer: new bytes, a rule changed.
  struct pipe {
    std::deque<chunk> queue;
    boost::asio::steady_timer wake;
    bool reading = true;
    explicit pipe(boost::asio::io_context& ioc) : wake(ioc) {}
  };
  struct link {
    tcp::socket client, server;
    pipe up, down;  // client to server, server to client
    int source = -1;
    bool closed = false;
    explicit link(boost::asio::io_context& ioc) : client(ioc), server(ioc), up(ioc), down(ioc) {}
    void close() {
      closed = true;
      boost::system::error_code ignored;
      client.close(ignored);
      server.close(ignored);
      up.wake.cancel();
      down.wake.cancel();
    }
  };

  /// Runs `fn` on the proxy's thread and waits for it.
  template <class Fn>
  void on_loop(Fn fn) {
    std::promise<void> done;
    boost::asio::post(ioc_, [&] {
      fn();
      done.set_value();
    });
    done.get_future().wait();
  }

  bool is_held(const link& l) const {
    return hold_all_ || (!hold_from_.empty() && (l.source < 0 || hold_from_.count(l.source) > 0));
  }
  void wake_all() {
    for (auto& l : links_) {
      l->up.wake.cancel();
      l->down.wake.cancel();
    }
  }
  void close_all() {
    for (auto& l : links_) l->close();
    links_.clear();
  }
  void drop(const std::shared_ptr<link>& l) {
    l->close();
    links_.erase(l);
  }

  boost::asio::awaitable<void> accept_loop() {
    using boost::asio::use_awaitable;
    for (;;) {
      boost::system::error_code ec;
      auto l = std::make_shared<link>(ioc_);
      co_await acceptor_.async_accept(l->client, boost::asio::redirect_error(use_awaitable, ec));
      if (ec == boost::asio::error::operation_aborted || !acceptor_.is_open()) co_return;
      if (ec || cut_) {
        l->close();
        continue;
      }
      if (identify_) l->source = identify_(l->client.remote_endpoint(ec), port());
      links_.insert(l);
      boost::asio::co_spawn(ioc_, run(l), boost::asio::detached);
    }
  }

  // A held connection is accepted but reaches the target only once released.
  boost::asio::awaitable<void> run(std::shared_ptr<link> l) {
    using boost::asio::use_awaitable;
    boost::asio::co_spawn(ioc_, read(l, l->client, l->up), boost::asio::detached);
    boost::system::error_code ec;
    while (is_held(*l) && !l->closed) {
      l->up.wake.expires_at(clock::time_point::max());
      co_await l->up.wake.async_wait(boost::asio::redirect_error(use_awaitable, ec));
    }
    if (l->closed) co_return;
    co_await l->server.async_connect(target_, boost::asio::redirect_error(use_awaitable, ec));
    if (ec || l->closed) co_return drop(l);
    ++connections_;
    boost::asio::co_spawn(ioc_, write(l, l->up, l->server), boost::asio::detached);
    boost::asio::co_spawn(ioc_, read(l, l->server, l->down), boost::asio::detached);
    boost::asio::co_spawn(ioc_, write(l, l->down, l->client), boost::asio::detached);
  }

  boost::asio::awaitable<void> read(std::shared_ptr<link> l, tcp::socket& from, pipe& p) {
    char buf[16384];
    for (;;) {
      boost::system::error_code ec;
      auto n = co_await from.async_read_some(boost::asio::buffer(buf), boost::asio::redirect_error(boost::asio::use_awaitable, ec));
      if (ec || l->closed) break;
      p.queue.push_back({clock::now() + delay_, std::vector<char>(buf, buf + n)});
      p.wake.cancel();
    }
    // The other side hears of the end once what was read before it has passed.
    p.reading = false;
    p.wake.cancel();
  }

  boost::asio::awaitable<void> write(std::shared_ptr<link> l, pipe& p, tcp::socket& to) {
    for (;;) {
      boost::system::error_code ec;
      if (l->closed) co_return;
      bool held = is_held(*l);
      if (!held && p.queue.empty() && !p.reading) break;
      if (held || p.queue.empty() || p.queue.front().due > clock::now()) {
        p.wake.expires_at(held || p.queue.empty() ? clock::time_point::max() : p.queue.front().due);
        co_await p.wake.async_wait(boost::asio::redirect_error(boost::asio::use_awaitable, ec));
        continue;
      }
      auto c = std::move(p.queue.front());
      p.queue.pop_front();
      co_await boost::asio::async_write(to, boost::asio::buffer(c.data),
                                        boost::asio::redirect_error(boost::asio::use_awaitable, ec));
      if (ec) break;
    }
    drop(l);
  }

  boost::asio::io_context ioc_;
  tcp::acceptor acceptor_;
  tcp::endpoint target_;
  identify_fn identify_;
  std::set<std::shared_ptr<link>> links_;
  bool cut_ = false, hold_all_ = false;
  std::set<int> hold_from_;
  std::chrono::milliseconds delay_{0};
  std::atomic<int> connections_{0};
  std::thread thread_;
};

/// Options for a client that reaches etcd only through `p`.
inline client_options via(const tcp_proxy& p, std::chrono::milliseconds request_timeout = std::chrono::milliseconds(5000)) {
  client_options o;
  o.endpoints = {p.endpoint()};
  o.request_timeout = request_timeout;
  return o;
}

}  // namespace coetcd::test
