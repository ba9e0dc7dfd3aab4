// An HTTP counter shared by several server processes: each POST /increment adds one to a counter
// in etcd and answers with the new value. Run two and hit both; no increment is lost. By default
// a coetcd::counter makes each increment one optimistic txn; with `lock`, each takes a coetcd
// mutex, reads, writes back plus one (guarded by the lock) and unlocks: four requests where the
// counter makes one, and every increment waits for the one before. Run every server in one mode.
//   http_counter ENDPOINT PORT [counter|lock]
//   curl -X POST localhost:PORT/increment    curl localhost:PORT/value
#include <coetcd.hpp>
#include <coetcd/counter.hpp>
#include <coetcd/with_lock.hpp>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <functional>
#include <iostream>
#include <optional>

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::use_awaitable;
using boost::system::error_code;

constexpr std::string_view counter_key = "/http_counter/value";

// The two operations a server offers, however the counter is kept.
struct operations {
  std::function<asio::awaitable<std::int64_t>()> increment, read;
};

// [locked_counter]
struct locked_counter {
  coetcd::client& etcd;
  // One mutex object shared by every request coroutine, as a std::mutex is shared by threads:
  // it excludes each request from every other one, here and in other processes. Requests of
  // this process hand it to each other without an RPC while no other process waits.
  coetcd::mutex& lock;

  asio::awaitable<std::int64_t> read() {
    auto r = co_await etcd.async_get(counter_key, use_awaitable);
    co_return r.kvs.empty() ? 0 : std::stoll(r.kvs.front().value);
  }

  asio::awaitable<std::int64_t> increment() {
    auto body = [this](coetcd::mutex::hold& held) -> asio::awaitable<std::int64_t> {
      auto value = co_await read() + 1;
      // Written only while we still hold the lock: a stale holder cannot overwrite.
      coetcd::txn write;
      write.when(held.fence()).then(coetcd::txn_op::put(counter_key, std::to_string(value)));
      auto r = co_await etcd.async_txn(write, use_awaitable);
      if (!r.succeeded) throw std::runtime_error("lost the lock before writing");
      co_return value;
    };
    co_return co_await coetcd::with_lock(lock, std::move(body));  // released on every way out
  }
};
// [locked_counter]

asio::awaitable<void> serve(asio::ip::tcp::socket socket, operations& c) {
  beast::tcp_stream stream(std::move(socket));
  beast::flat_buffer buffer;
  for (;;) {
    http::request<http::string_body> req;
    auto [rec, n] = co_await http::async_read(stream, buffer, req, asio::as_tuple(use_awaitable));
    if (rec) co_return;  // closed by the peer, or garbage
    http::response<http::string_body> res(http::status::ok, req.version());
    res.set(http::field::content_type, "text/plain");
    res.keep_alive(req.keep_alive());
    try {
      if (req.target() == "/increment" && req.method() == http::verb::post) {
        res.body() = std::to_string(co_await c.increment()) + "\n";
      } else if (req.target() == "/value") {
        res.body() = std::to_string(co_await c.read()) + "\n";
      } else {
        res.result(http::status::not_found);
        res.body() = "POST /increment or GET /value\n";
      }
    } catch (const std::exception& e) {
      res.result(http::status::service_unavailable);
      res.body() = std::string("etcd: ") + e.what() + "\n";
    }
    res.prepare_payload();
    auto [wec, m] = co_await http::async_write(stream, res, asio::as_tuple(use_awaitable));
    if (wec || !res.keep_alive()) co_return;
  }
}

asio::awaitable<void> run(coetcd::client& etcd, unsigned short port, bool with_lock, asio::signal_set& stop) {
  auto ex = co_await asio::this_coro::executor;
  auto s = co_await coetcd::session::async_create(etcd, use_awaitable);
  coetcd::mutex lock(s, "/http_counter/lock");
  locked_counter locked{etcd, lock};
  // One add: `if the key is as last seen, put value + 1, else read it` (again from what it read).
  coetcd::counter optimistic(etcd, std::string(counter_key));
  operations c;
  if (with_lock) {
    c.increment = [&locked] { return locked.increment(); };
    c.read = [&locked] { return locked.read(); };
  } else {
    c.increment = [&optimistic] { return optimistic.async_add(1, use_awaitable); };
    c.read = [&optimistic] { return optimistic.async_get(use_awaitable); };
  }
  asio::ip::tcp::acceptor acceptor(ex, {asio::ip::make_address("127.0.0.1"), port});
  stop.async_wait([&](error_code, int) { acceptor.close(); });
  std::cout << "http_counter listening on 127.0.0.1:" << acceptor.local_endpoint().port() << std::endl;
  for (;;) {
    auto [ec, socket] = co_await acceptor.async_accept(asio::as_tuple(use_awaitable));
    if (ec) break;  // closed by SIGINT/SIGTERM
    asio::co_spawn(ex, serve(std::move(socket), c), asio::detached);
  }
  co_await s.async_close(asio::as_tuple(use_awaitable));
}

int main(int argc, char** argv) {
  const std::string mode = argc > 3 ? argv[3] : "counter";
  if (argc < 3 || (mode != "counter" && mode != "lock")) {
    std::cerr << "usage: http_counter ENDPOINT PORT [counter|lock]\n";
    return 2;
  }
  asio::io_context ioc;
  coetcd::client etcd(ioc, {.endpoints = {argv[1]}});
  asio::signal_set stop(ioc, SIGINT, SIGTERM);
  int rc = 0;
  asio::co_spawn(ioc, run(etcd, static_cast<unsigned short>(std::stoi(argv[2])), mode == "lock", stop), [&](std::exception_ptr e) {
    etcd.close();
    ioc.stop();  // connections still open are dropped
    if (!e) return;
    rc = 1;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      std::cerr << "http_counter failed: " << ex.what() << "\n";
    }
  });
  ioc.run();
  return rc;
}
