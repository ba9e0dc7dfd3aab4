// Takes and releases one lock: proof that an installed (or embedded) coetcd links and works.
#include <coetcd.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <iostream>

namespace asio = boost::asio;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: consumer ENDPOINT LOCK_NAME\n";
    return 2;
  }
  asio::io_context io;
  int status = 1;
  asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    coetcd::client c(io, {.endpoints = {argv[1]}});
    auto s = co_await coetcd::session::async_create(c, {}, asio::use_awaitable);
    coetcd::mutex m(s, argv[2]);
    auto held = co_await m.async_lock(asio::use_awaitable);
    std::cout << "locked " << held.key() << " fence " << held.fencing_token() << '\n';
    co_await held.async_release(asio::use_awaitable);
    co_await s.async_close(asio::use_awaitable);
    std::cout << "unlocked\n";
    status = 0;
  }, [](std::exception_ptr e) {
    if (e) try { std::rethrow_exception(e); } catch (const std::exception& x) { std::cerr << "consumer: " << x.what() << '\n'; }
  });
  io.run();
  return status;
}
