// The fault proxy of the test harness (support/tcp_proxy.hpp), tested on its own in front of an
// echo server: what passes, what is held and for how long, and who it names as a connection's
// source. The partition tests rely on each of these.
#define BOOST_TEST_MODULE coetcd_proxy
#include <boost/test/unit_test.hpp>

#include "support/tcp_proxy.hpp"

#include <boost/asio/read.hpp>

using namespace coetcd::test;
using namespace std::chrono_literals;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

/// Echoes every byte back, on its own thread.
class echo_server {
 public:
  echo_server() : acceptor_(ioc_, {asio::ip::make_address("127.0.0.1"), 0}) {
    asio::co_spawn(ioc_, accept(), asio::detached);
    thread_ = std::thread([this] { ioc_.run(); });
  }
  ~echo_server() {
    ioc_.stop();
    thread_.join();
  }
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port()); }

 private:
  asio::awaitable<void> accept() {
    for (;;) {
      auto s = std::make_shared<tcp::socket>(co_await acceptor_.async_accept(asio::use_awaitable));
      asio::co_spawn(ioc_, echo(s), asio::detached);
    }
  }
  static asio::awaitable<void> echo(std::shared_ptr<tcp::socket> s) {
    char buf[4096];
    for (;;) {
      boost::system::error_code ec;
      auto n = co_await s->async_read_some(asio::buffer(buf), asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return;
      co_await asio::async_write(*s, asio::buffer(buf, n), asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return;
    }
  }
  asio::io_context ioc_;
  tcp::acceptor acceptor_;
  std::thread thread_;
};

/// A blocking client of the proxy.
struct client_socket {
  asio::io_context ioc;
  tcp::socket s{ioc};
  explicit client_socket(const tcp_proxy& p) { s.connect({asio::ip::make_address("127.0.0.1"), p.port()}); }
  void send(const std::string& text) { asio::write(s, asio::buffer(text)); }
  /// What arrives within `limit` (up to `want` bytes); "" when nothing did, "<closed>" at EOF.
  std::string receive(std::size_t want, std::chrono::milliseconds limit) {
    auto until = std::chrono::steady_clock::now() + limit;
    std::string out;
    s.non_blocking(true);
    while (out.size() < want && std::chrono::steady_clock::now() < until) {
      char buf[256];
      boost::system::error_code ec;
      auto n = s.read_some(asio::buffer(buf), ec);
      if (ec == asio::error::would_block) {
        std::this_thread::sleep_for(2ms);
        continue;
      }
      if (ec) return out + "<closed>";
      out.append(buf, n);
    }
    return out;
  }
};

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

BOOST_AUTO_TEST_CASE(bytes_pass_both_ways_and_a_delay_applies_to_each) {
  echo_server echo;
  tcp_proxy proxy(echo.endpoint());
  client_socket c(proxy);
  c.send("ping");
  BOOST_TEST(c.receive(4, 2s) == "ping");
  proxy.delay(50ms);
  auto start = std::chrono::steady_clock::now();
  c.send("slow");
  BOOST_TEST(c.receive(4, 2s) == "slow");
  auto rtt = ms_since(start);
  BOOST_TEST(rtt >= 100.0, "round trip " << rtt << " ms with 50 ms each way");
  BOOST_TEST(rtt < 1000.0);
  proxy.delay(0ms);
  start = std::chrono::steady_clock::now();
  c.send("fast");
  BOOST_TEST(c.receive(4, 2s) == "fast");
  BOOST_TEST(ms_since(start) < 50.0);
  BOOST_TEST(proxy.connections() == 1);
}

BOOST_AUTO_TEST_CASE(a_hold_passes_nothing_until_restored_then_delivers_in_order) {
  echo_server echo;
  tcp_proxy proxy(echo.endpoint());
  client_socket before(proxy);
  before.send("a");
  BOOST_TEST(before.receive(1, 2s) == "a");
  proxy.hold();
  before.send("b");
  before.send("c");
  client_socket during(proxy);  // accepted, but not forwarded
  during.send("new");
  BOOST_TEST(before.receive(2, 300ms) == "");
  BOOST_TEST(during.receive(3, 100ms) == "");
  BOOST_TEST(proxy.held() == 2);
  BOOST_TEST(proxy.connections() == 1);
  proxy.restore();
  BOOST_TEST(before.receive(2, 2s) == "bc");
  BOOST_TEST(during.receive(3, 2s) == "new");
  BOOST_TEST(proxy.connections() == 2);
  BOOST_TEST(proxy.held() == 0);
}

BOOST_AUTO_TEST_CASE(a_cut_closes_every_connection_and_refuses_new_ones) {
  echo_server echo;
  tcp_proxy proxy(echo.endpoint());
  client_socket c(proxy);
  c.send("x");
  BOOST_TEST(c.receive(1, 2s) == "x");
  proxy.cut();
  BOOST_TEST(c.receive(1, 2s) == "<closed>");
  client_socket refused(proxy);
  BOOST_TEST(refused.receive(1, 2s) == "<closed>");
  proxy.restore();
  client_socket again(proxy);
  again.send("y");
  BOOST_TEST(again.receive(1, 2s) == "y");
}

BOOST_AUTO_TEST_CASE(connections_are_named_by_the_process_that_dialled) {
  echo_server echo;
  const std::vector<int> pids = {1, static_cast<int>(getpid())};  // init, then us
  tcp_proxy proxy(echo.endpoint(), [&](const tcp::endpoint& remote, unsigned short port) {
    return socket_owner(remote, port, pids);
  });
  // Held when it comes from a source that is held, or one the proxy cannot name.
  proxy.hold_from({1});
  client_socket ours(proxy);
  ours.send("held");
  BOOST_TEST(ours.receive(4, 300ms) == "");
  proxy.hold_from({0});
  BOOST_TEST(ours.receive(4, 2s) == "held");
  client_socket second(proxy);
  second.send("free");
  BOOST_TEST(second.receive(4, 2s) == "free");
  // socket_owner itself: our own connection's local end, among other PIDs and none.
  auto local = ours.s.local_endpoint();
  BOOST_TEST(socket_owner(local, proxy.port(), pids) == 1);
  BOOST_TEST(socket_owner(local, proxy.port(), {1}) == -1);
  BOOST_TEST(socket_owner(local, static_cast<unsigned short>(proxy.port() + 1), pids) == -1);
}
