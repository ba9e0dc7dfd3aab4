// A named lock in an Asio server: requests share one session and one coetcd::mutex, each takes the
// lock within a deadline and writes fenced; a lost session is replaced. docs/lock-in-a-server.md.
//   lock_server [ENDPOINT]
// [includes]
#include <coetcd.hpp>

#include <boost/asio.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>  // || and && on awaitables

#include <iostream>
#include <memory>
#include <string>

namespace asio = boost::asio;
using namespace asio::experimental::awaitable_operators;
using namespace std::chrono_literals;
using asio::use_awaitable;
constexpr auto no_throw = asio::as_tuple(use_awaitable);  // errors come back as values
// [includes]

constexpr std::string_view counter_key = "lock_server/counter";

// [generation]
// What every request shares: a session (a lease kept alive in the background) and the named
// lock on it. A lost session is replaced with its mutex; a request keeps the generation it
// locked under alive (shared_ptr) until it is done, as a session must outlive its holds.
struct generation {
  coetcd::session session;
  coetcd::mutex orders;
  explicit generation(coetcd::session s) : session(std::move(s)), orders(session, "lock_server/orders") {}
};
// [generation]

// [keeper]
// Keeps `current` on a live session. The library does not swap sessions silently, on purpose:
// a new session is a new lease, every hold of the old one is gone, and work done under them may
// be half done. Only the application knows whether to redo, undo or report it, so the loss is
// told (async_wait_lost) and the application makes the new session.
struct session_keeper {
  coetcd::client& etcd;
  coetcd::session_options options;
  std::shared_ptr<generation> current;
  asio::steady_timer replaced;  // never expires: cancel() wakes whoever waits in live()

  bool stopped = false;

  // Runs until cancelled (the server stops) or the client closes; then live() waits no more.
  asio::awaitable<void> run() {
    struct on_exit {
      session_keeper& k;
      ~on_exit() {
        k.stopped = true;
        k.replaced.cancel();
      }
    } wake_waiters{*this};
    for (;;) {
      auto [ec, why] = co_await current->session.async_wait_lost(no_throw);
      if (ec) co_return;  // operation_aborted: cancelled, or the session was closed
      std::cout << "session lost (" << why.cause.message() << "): making a new one\n";
      for (;;) {
        auto [cec, fresh] = co_await coetcd::session::async_create(etcd, options, no_throw);
        if (!cec) {
          current = std::make_shared<generation>(std::move(fresh));
          break;
        }
        if (cec == coetcd::error::client_closed || cec == asio::error::operation_aborted) co_return;
        asio::steady_timer backoff(replaced.get_executor(), 1s);  // etcd unreachable: retry
        auto [bec] = co_await backoff.async_wait(no_throw);
        if (bec) co_return;
      }
      replaced.cancel();
    }
  }

  // The current generation once its session is live; after a loss, waits for the new one.
  asio::awaitable<std::shared_ptr<generation>> live() {
    while (current->session.lost() && !stopped) co_await replaced.async_wait(no_throw);
    if (current->session.lost()) throw boost::system::system_error(coetcd::error::session_lost, "no new session");
    co_return current;
  }
};
// [keeper]

// [request]
struct attempt {
  boost::system::error_code ec;
  std::shared_ptr<generation> gen;
  coetcd::mutex::hold held;  // empty when ec is set; declared after gen, so destroyed before it
};

asio::awaitable<attempt> take_lock(session_keeper& keeper) {
  auto gen = co_await keeper.live();
  auto [ec, held] = co_await gen->orders.async_lock(no_throw);
  co_return attempt{ec, std::move(gen), std::move(held)};
}

// One request: the lock within 5 s, then a read, some work, a write fenced by the hold, the release.
asio::awaitable<std::string> handle(session_keeper& keeper) {
  // Whichever finishes first cancels the other; a cancelled lock completes at once and its key is
  // deleted in the background. Boost 1.86+ has asio::cancel_after for this; Debian 12's Boost
  // 1.81 has not, hence the timer.
  asio::steady_timer deadline(co_await asio::this_coro::executor, 5s);
  auto first = co_await (take_lock(keeper) || deadline.async_wait(no_throw));
  if (first.index() == 1) co_return "timed out waiting for the lock";
  auto [ec, gen, held] = std::move(std::get<0>(first));
  if (ec) co_return "no lock: " + ec.message();

  auto got = co_await keeper.etcd.async_get(counter_key, use_awaitable);
  auto value = std::to_string((got.kvs.empty() ? 0 : std::stoll(got.kvs.front().value)) + 1);
  asio::steady_timer work(co_await asio::this_coro::executor, 100ms);  // the request's own work
  co_await work.async_wait(use_awaitable);
  // Applied only while this hold lasts: once the lock is lost, the txn writes nothing.
  auto write = coetcd::txn().when(held.fence()).then(coetcd::txn_op::put(counter_key, value));
  auto wrote = co_await keeper.etcd.async_txn(write, use_awaitable);
  co_await held.async_release(no_throw);  // after a loss: error::session_lost, nothing to undo
  co_return wrote.succeeded ? "wrote " + value : "lost the lock before writing: nothing written";
}

asio::awaitable<void> request(session_keeper& keeper, int id) {
  std::string outcome;
  try {
    outcome = co_await handle(keeper);
  } catch (const std::exception& e) {  // etcd unreachable, say: this request fails, not the server
    outcome = std::string("failed: ") + e.what();
  }
  std::cout << "request " << id << ": " << outcome << "\n";
}
// [request]

// Stands for what loses a session in life (a long pause, a partition): revokes the lease, then
// waits until the session has noticed.
asio::awaitable<void> revoke_lease(session_keeper& keeper, std::chrono::milliseconds after) {
  asio::steady_timer t(co_await asio::this_coro::executor, after);
  co_await t.async_wait(use_awaitable);
  auto doomed = keeper.current;
  co_await keeper.etcd.async_lease_revoke(doomed->session.lease(), use_awaitable);
  co_await doomed->session.async_wait_lost(use_awaitable);
}

// [serve]
// Nine requests, three at a time (a real server starts one per connection); the lease is
// revoked during the second three, so the third three run on a new session.
asio::awaitable<void> serve(session_keeper& keeper) {
  co_await (request(keeper, 1) && request(keeper, 2) && request(keeper, 3));
  co_await (request(keeper, 4) && request(keeper, 5) && request(keeper, 6) && revoke_lease(keeper, 150ms));
  co_await (request(keeper, 7) && request(keeper, 8) && request(keeper, 9));
  auto got = co_await keeper.etcd.async_get(counter_key, use_awaitable);
  std::cout << "counter = " << got.kvs.at(0).value << "\n";
}
// [serve]

// [main]
asio::awaitable<void> run(coetcd::client& etcd) {
  co_await etcd.async_put(counter_key, "0", use_awaitable);  // each run starts from zero
  // A 3 s TTL so that this demo notices its loss within about a second (renewals go every
  // TTL/3); a server keeps the default 60 s unless it must notice sooner.
  coetcd::session_options options{.ttl = 3s};
  auto first = co_await coetcd::session::async_create(etcd, options, use_awaitable);
  auto ex = co_await asio::this_coro::executor;
  session_keeper keeper{etcd, options, std::make_shared<generation>(std::move(first)),
                        asio::steady_timer(ex, asio::steady_timer::time_point::max())};
  // serve() finishing first cancels keeper.run(); then the lease goes (async_close revokes it).
  co_await (keeper.run() || serve(keeper));
  co_await keeper.current->session.async_close(no_throw);
}

int main(int argc, char** argv) {
  // One thread runs every coroutine (requests, keeper) and the client's handlers, so
  // keeper.current needs no lock. On a pool of threads, spawn run() on one strand,
  // asio::make_strand(ioc): the coroutines it starts with || and && inherit it.
  asio::io_context ioc;
  coetcd::client etcd(ioc, {.endpoints = {argc > 1 ? argv[1] : "127.0.0.1:2379"}});
  int rc = 0;
  asio::co_spawn(ioc, run(etcd), [&](std::exception_ptr e) {
    etcd.close();
    try {
      if (e) std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      std::cerr << "lock_server failed: " << ex.what() << "\n";
      rc = 1;
    }
  });
  ioc.run();
  return rc;
}
// [main]
