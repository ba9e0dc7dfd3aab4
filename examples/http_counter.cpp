// An HTTP counter shared by several server processes: each POST /increment adds one to a counter
// in etcd and answers with the new value. Run two and hit both; no increment is lost. By default
// a coetcd::counter makes each increment one optimistic txn; with `lock`, each takes a coetcd
// mutex, reads, writes back plus one (guarded by the lock) and unlocks: four requests where the
// counter makes one, and every increment waits for the one before. Run every server in one mode.
// A lost session (TTL seconds without renewal, 60 by default) is replaced by a new one: requests
// fail (503) until it is there, then succeed again, as in examples/lock_server.cpp.
//   http_counter ENDPOINT PORT [counter|lock] [TTL]
//   curl -X POST localhost:PORT/increment    curl localhost:PORT/value
#include <coetcd.hpp>
#include <coetcd/counter.hpp>
#include <coetcd/with_lock.hpp>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <functional>
#include <cstdlib>
#include <iostream>
#include <memory>

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using namespace asio::experimental::awaitable_operators;
using asio::use_awaitable;
using boost::system::error_code;

constexpr std::string_view counter_key = "/http_counter/value";

// The two operations a server offers, however the counter is kept.
struct operations {
  std::function<asio::awaitable<std::int64_t>()> increment, read;
};

// The session and the lock on it, replaced together after a loss. One mutex object is shared by
// every request coroutine, as a std::mutex is shared by threads: it excludes each request from
// every other one, here and in other processes. Requests of this process hand it to each other
// without a lock RPC while no other process waits (the body's fence() costs one put per hand-off).
// [generation]
struct lock_generation {
  coetcd::session session;
  coetcd::mutex lock;
  explicit lock_generation(coetcd::session s) : session(std::move(s)), lock(session, "/http_counter/lock") {}
};
// [generation]

struct locked_counter {
  coetcd::client& etcd;
  coetcd::session_options options;
  std::shared_ptr<lock_generation> current;  // replaced by keep_session() after a loss

  // The library tells a loss and does not swap sessions behind our back: a new session is a new
  // lease, and every hold of the old one is gone. Here nothing outlives a request, so a new
  // session is all it takes; requests that ran into the loss have failed (503).
  asio::awaitable<void> keep_session() {
    for (;;) {
      auto [ec, why] = co_await current->session.async_wait_lost(asio::as_tuple(use_awaitable));
      if (ec) co_return;  // closed by run(): the server stops
      std::cout << "session lost (" << why.cause.message() << "): making a new one" << std::endl;
      for (;;) {
        auto [cec, fresh] = co_await coetcd::session::async_create(etcd, options, asio::as_tuple(use_awaitable));
        if (!cec) {
          current = std::make_shared<lock_generation>(std::move(fresh));
          break;
        }
        if (cec == coetcd::error::client_closed) co_return;
        asio::steady_timer backoff(co_await asio::this_coro::executor, std::chrono::seconds(1));
        co_await backoff.async_wait(use_awaitable);
      }
    }
  }

  asio::awaitable<std::int64_t> read() {
    auto r = co_await etcd.async_get(counter_key, use_awaitable);
    co_return r.kvs.empty() ? 0 : std::stoll(r.kvs.front().value);
  }

  // [increment]
  asio::awaitable<std::int64_t> increment() {
    auto body = [this](coetcd::mutex::hold& held) -> asio::awaitable<std::int64_t> {
      auto value = co_await read() + 1;
      auto write = coetcd::txn().when(held.fence()).then(coetcd::txn_op::put(counter_key, std::to_string(value)));
      auto r = co_await etcd.async_txn(write, use_awaitable);  // fenced: fails if the lock was lost
      if (!r.succeeded) throw std::runtime_error("lost the lock before writing");
      co_return value;
    };
    auto gen = current;  // the session and mutex stay alive while this request holds their lock
    co_return co_await coetcd::with_lock(gen->lock, std::move(body));  // released on every way out
  }
  // [increment]
};

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

// Accepts until SIGINT/SIGTERM closes the acceptor, then closes the session and the client, which
// ends keep_session() (the client too: a keep_session() retrying while etcd is unreachable).
asio::awaitable<void> accept_all(asio::ip::tcp::acceptor& acceptor, operations& c, locked_counter& locked) {
  auto ex = co_await asio::this_coro::executor;
  for (;;) {
    auto [ec, socket] = co_await acceptor.async_accept(asio::as_tuple(use_awaitable));
    if (ec) break;  // closed by SIGINT/SIGTERM
    asio::co_spawn(ex, serve(std::move(socket), c), asio::detached);
  }
  co_await locked.current->session.async_close(asio::as_tuple(use_awaitable));
  locked.etcd.close();
}

asio::awaitable<void> run(coetcd::client& etcd, unsigned short port, bool with_lock, coetcd::session_options options,
                          asio::signal_set& stop) {
  auto ex = co_await asio::this_coro::executor;
  auto s = co_await coetcd::session::async_create(etcd, options, use_awaitable);
  locked_counter locked{etcd, options, std::make_shared<lock_generation>(std::move(s))};
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
  co_await (locked.keep_session() && accept_all(acceptor, c, locked));
}

int main(int argc, char** argv) {
  const std::string mode = argc > 3 ? argv[3] : "counter";
  const int ttl = argc > 4 ? std::atoi(argv[4]) : 60;
  if (argc < 3 || (mode != "counter" && mode != "lock") || ttl <= 0) {
    std::cerr << "usage: http_counter ENDPOINT PORT [counter|lock] [TTL]\n";
    return 2;
  }
  asio::io_context ioc;
  coetcd::client etcd(ioc, {.endpoints = {argv[1]}});
  asio::signal_set stop(ioc, SIGINT, SIGTERM);
  int rc = 0;
  coetcd::session_options options{.ttl = std::chrono::seconds(ttl)};
  auto port = static_cast<unsigned short>(std::stoi(argv[2]));
  asio::co_spawn(ioc, run(etcd, port, mode == "lock", options, stop), [&](std::exception_ptr e) {
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
