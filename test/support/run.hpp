// Test support: run a coroutine on an io_context with a time limit, so a deadlock fails the test
// instead of hanging CI; plus small awaitable helpers.
#pragma once

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <exception>
#include <future>
#include <thread>

namespace coetcd::test {

namespace asio = boost::asio;
using asio::use_awaitable;

/// Runs `a` to completion on `ioc`; fails the test if it throws or takes longer than `limit`.
inline void run_for(asio::io_context& ioc, asio::awaitable<void> a,
                    std::chrono::steady_clock::duration limit = std::chrono::seconds(30)) {
  bool done = false;
  std::exception_ptr error;
  asio::co_spawn(ioc, std::move(a), [&](std::exception_ptr e) {
    done = true;
    error = e;
    ioc.stop();
  });
  ioc.restart();
  ioc.run_for(limit);
  ioc.restart();
  if (!done) BOOST_FAIL("test coroutine did not finish within its time limit");
  if (error) std::rethrow_exception(error);
}

inline asio::awaitable<void> sleep_for(std::chrono::steady_clock::duration d) {
  asio::steady_timer t(co_await asio::this_coro::executor, d);
  co_await t.async_wait(use_awaitable);
}

}  // namespace coetcd::test
