// One trace per request, written as JSON lines: each "request" takes a lock, reads and writes a
// key under it; the client's span hooks print every RPC attempt and lock wait with the request's
// id, given to each call with with_span_context. Feed the lines to any log pipeline; a span's
// `parent` is the lock wait it was sent for.
//   span_log ENDPOINT
#include <coetcd.hpp>
#include <coetcd/span.hpp>

#include <boost/asio.hpp>

#include <cstdio>
#include <iostream>

namespace asio = boost::asio;
using asio::use_awaitable;

struct request {
  std::string id;
};

// A JSON string: quotes, backslashes and control characters escaped.
std::string json(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') out += '\\', out += static_cast<char>(c);
    else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else out += static_cast<char>(c);
  }
  return out + "\"";
}

void print_end(const coetcd::span& s) {
  using std::chrono::duration_cast;
  using std::chrono::microseconds;
  const auto* r = static_cast<const request*>(s.context);
  std::cout << "{\"request\":" << (r ? json(r->id) : "null") << ",\"id\":" << s.id << ",\"parent\":" << s.parent
            << ",\"name\":" << json(s.name) << ",\"key\":" << json(s.key) << ",\"attempt\":" << s.attempt
            << ",\"member\":" << json(s.member) << ",\"duration_us\":" << duration_cast<microseconds>(s.duration).count()
            << ",\"status\":" << json(s.status ? s.status.message() : "") << "}" << std::endl;
}

asio::awaitable<void> handle(coetcd::client& etcd, coetcd::session& session, std::shared_ptr<const request> r) {
  coetcd::mutex orders(session, "span_log/orders");
  auto held = co_await orders.async_lock(coetcd::with_span_context(r, use_awaitable));
  auto got = co_await etcd.async_get("span_log/count", coetcd::with_span_context(r, use_awaitable));
  const int count = got.kvs.empty() ? 0 : std::stoi(got.kvs[0].value);
  auto write = coetcd::txn().when(held.fence()).then(coetcd::txn_op::put("span_log/count", std::to_string(count + 1)));
  co_await etcd.async_txn(write, coetcd::with_span_context(r, use_awaitable));
  co_await held.async_release(use_awaitable);
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: span_log ENDPOINT\n";
    return 2;
  }
  asio::io_context io;
  coetcd::client_options options{.endpoints = {argv[1]}};
  options.spans.on_end = print_end;  // on_start too, where a span's beginning matters
  coetcd::client etcd(io, options);
  int status = 0;
  asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    auto session = co_await coetcd::session::async_create(etcd, use_awaitable);
    for (const char* id : {"req-1", "req-2", "req-3"}) {
      // Named first: see docs/how-it-works.md on g++ 12.2 and temporaries inside co_await.
      auto r = std::make_shared<const request>(request{id});
      co_await handle(etcd, session, r);
    }
    co_await etcd.async_delete("span_log/count", use_awaitable);
    co_await session.async_close(use_awaitable);
    etcd.close();
  }, [&](std::exception_ptr e) {
    if (!e) return;
    try { std::rethrow_exception(e); } catch (const std::exception& x) { std::cerr << "span_log: " << x.what() << '\n'; }
    status = 1;
    etcd.close();
  });
  io.run();
  return status;
}
