// Test support: a TCP proxy in front of one etcd member, on its own thread, that a test can cut
// (every connection closed, new ones refused) and restore, or make slow (bytes from the client
// held back for a while). A client given the proxy's endpoint sees a network fault; the member
// and every other client do not.
#pragma once

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <atomic>
#include <chrono>
#include <deque>
#include <future>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace coetcd::test {

class tcp_proxy {
 public:
  /// Forwards 127.0.0.1:<a free port> to `target` ("host:port", plain TCP).
  explicit tcp_proxy(const std::string& target)
      : acceptor_(ioc_, {boost::asio::ip::make_address("127.0.0.1"), 0}) {
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

  std::string endpoint() const { return "127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port()); }

  /// Closes every connection and refuses new ones (accepted, then closed at once) until restore().
  void cut() {
    on_loop([this] {
      cut_ = true;
      close_all();
    });
  }
  void restore() {
    on_loop([this] { cut_ = false; });
  }
  /// Holds every byte from a client for `d` before passing it on (order kept); 0 ends the delay.
  void delay(std::chrono::milliseconds d) {
    on_loop([this, d] { delay_ = d; });
  }
  /// Connections accepted and forwarded so far.
  int connections() const { return connections_; }

 private:
  using tcp = boost::asio::ip::tcp;
  using clock = std::chrono::steady_clock;
  struct link {
    tcp::socket client, server;
    explicit link(boost::asio::io_context& ioc) : client(ioc), server(ioc) {}
    void close() {
      boost::system::error_code ignored;
      client.close(ignored);
      server.close(ignored);
    }
  };
  struct chunk {
    clock::time_point due;
    std::vector<char> data;
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

  void close_all() {
    for (auto& l : links_) l->close();
    links_.clear();
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
      co_await l->server.async_connect(target_, boost::asio::redirect_error(use_awaitable, ec));
      if (ec || cut_) {
        l->close();
        continue;
      }
      ++connections_;
      links_.insert(l);
      auto queue = std::make_shared<std::deque<chunk>>();
      auto wake = std::make_shared<boost::asio::steady_timer>(ioc_);
      boost::asio::co_spawn(ioc_, client_to_queue(l, queue, wake), boost::asio::detached);
      boost::asio::co_spawn(ioc_, queue_to_server(l, queue, wake), boost::asio::detached);
      boost::asio::co_spawn(ioc_, pump(l, l->server, l->client), boost::asio::detached);
    }
  }

  // Client bytes go through a queue, so a delay holds them without reordering.
  boost::asio::awaitable<void> client_to_queue(std::shared_ptr<link> l, std::shared_ptr<std::deque<chunk>> q,
                                               std::shared_ptr<boost::asio::steady_timer> wake) {
    char buf[16384];
    for (;;) {
      boost::system::error_code ec;
      auto n = co_await l->client.async_read_some(boost::asio::buffer(buf), boost::asio::redirect_error(boost::asio::use_awaitable, ec));
      if (ec) break;
      q->push_back({clock::now() + delay_, std::vector<char>(buf, buf + n)});
      wake->cancel();
    }
    drop(l);
    wake->cancel();
  }

  boost::asio::awaitable<void> queue_to_server(std::shared_ptr<link> l, std::shared_ptr<std::deque<chunk>> q,
                                               std::shared_ptr<boost::asio::steady_timer> wake) {
    for (;;) {
      boost::system::error_code ec;
      if (q->empty()) {
        if (!l->client.is_open()) break;
        wake->expires_at(clock::time_point::max());
        co_await wake->async_wait(boost::asio::redirect_error(boost::asio::use_awaitable, ec));
        continue;
      }
      if (q->front().due > clock::now()) {
        wake->expires_at(q->front().due);
        co_await wake->async_wait(boost::asio::redirect_error(boost::asio::use_awaitable, ec));
        if (!l->server.is_open()) break;
        continue;
      }
      auto c = std::move(q->front());
      q->pop_front();
      co_await boost::asio::async_write(l->server, boost::asio::buffer(c.data),
                                        boost::asio::redirect_error(boost::asio::use_awaitable, ec));
      if (ec) break;
    }
    drop(l);
  }

  boost::asio::awaitable<void> pump(std::shared_ptr<link> l, tcp::socket& from, tcp::socket& to) {
    char buf[16384];
    for (;;) {
      boost::system::error_code ec;
      auto n = co_await from.async_read_some(boost::asio::buffer(buf), boost::asio::redirect_error(boost::asio::use_awaitable, ec));
      if (ec) break;
      co_await boost::asio::async_write(to, boost::asio::buffer(buf, n),
                                        boost::asio::redirect_error(boost::asio::use_awaitable, ec));
      if (ec) break;
    }
    drop(l);
  }

  void drop(const std::shared_ptr<link>& l) {
    l->close();
    links_.erase(l);
  }

  boost::asio::io_context ioc_;
  tcp::acceptor acceptor_;
  tcp::endpoint target_;
  std::set<std::shared_ptr<link>> links_;
  bool cut_ = false;
  std::chrono::milliseconds delay_{0};
  std::atomic<int> connections_{0};
  std::thread thread_;
};

}  // namespace coetcd::test
