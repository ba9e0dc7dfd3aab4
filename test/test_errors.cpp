// Bad input, unreachable servers, cancellation and closing with work in flight.
#define BOOST_TEST_MODULE coetcd_errors
#include "support/fixture.hpp"

#include <boost/asio/experimental/awaitable_operators.hpp>

using namespace coetcd;
using namespace coetcd::test;
using namespace std::chrono_literals;
using namespace boost::asio::experimental::awaitable_operators;

BOOST_TEST_GLOBAL_FIXTURE(shared_etcd);

BOOST_AUTO_TEST_CASE(empty_keys_are_rejected_before_the_wire) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto [e1, r1] = co_await c.async_get("", asio::as_tuple(use_awaitable));
    BOOST_TEST(e1 == error::empty_key);
    auto [e2, r2] = co_await c.async_put("", "v", asio::as_tuple(use_awaitable));
    BOOST_TEST(e2 == error::empty_key);
    auto [e3, r3] = co_await c.async_delete("", asio::as_tuple(use_awaitable));
    BOOST_TEST(e3 == error::empty_key);
    auto [e4, r4] = co_await c.async_txn(txn().then(txn_op::put("", "v")), asio::as_tuple(use_awaitable));
    BOOST_TEST(e4 == error::empty_key);
    auto [e5, r5] = co_await c.async_txn(txn().when(compare::version("") == 0), asio::as_tuple(use_awaitable));
    BOOST_TEST(e5 == error::empty_key);
    auto [e6, r6] = co_await c.async_watch("", asio::as_tuple(use_awaitable));
    BOOST_TEST(e6 == error::empty_key);
    auto [e7, r7] = co_await c.async_compact(0, asio::as_tuple(use_awaitable));
    BOOST_TEST(e7 == error::invalid_argument);
  }(c));
}

BOOST_AUTO_TEST_CASE(unreachable_endpoint_fails_within_the_deadline) {
  asio::io_context ioc;
  client_options o;
  o.endpoints = {"127.0.0.1:" + std::to_string(free_port())};  // nothing listens there
  o.request_timeout = 1s;
  client c(ioc, o);
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto t0 = std::chrono::steady_clock::now();
    auto [ec, r] = co_await c.async_get("/k", asio::as_tuple(use_awaitable));
    auto took = std::chrono::steady_clock::now() - t0;
    BOOST_TEST(ec == error::endpoints_unreachable, ec.message());
    BOOST_TEST((took >= 900ms));
    BOOST_TEST((took < 3s));
    // The watcher creation waits for a connection too; cancellation ends it.
    auto res = co_await (c.async_watch("/k", use_awaitable) || sleep_for(300ms));
    BOOST_TEST(res.index() == 1u);
  }(c));
}

BOOST_AUTO_TEST_CASE(a_dead_member_in_the_list_does_not_stop_the_client) {
  asio::io_context ioc;
  auto o = options_for(server());
  o.endpoints = {"127.0.0.1:" + std::to_string(free_port()), server().endpoint()};
  client c(ioc, o);
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    for (int i = 0; i < 20; ++i) co_await c.async_put("/err/failover", std::to_string(i), use_awaitable);
    auto g = co_await c.async_get("/err/failover", use_awaitable);
    BOOST_TEST(g.kvs.at(0).value == "19");
    co_await c.async_delete("/err/failover", use_awaitable);
  }(c));
}

BOOST_AUTO_TEST_CASE(cancelling_a_pending_unary_call) {
  asio::io_context ioc;
  client_options o;
  o.endpoints = {"127.0.0.1:" + std::to_string(free_port())};
  o.request_timeout = 20s;
  client c(ioc, o);
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto t0 = std::chrono::steady_clock::now();
    auto r = co_await (c.async_get("/k", use_awaitable) || sleep_for(200ms));
    BOOST_TEST(r.index() == 1u);
    BOOST_TEST((std::chrono::steady_clock::now() - t0 < 2s));
    // Explicit signal: the handler gets operation_aborted.
    asio::cancellation_signal sig;
    auto result = std::make_shared<std::optional<error_code>>();
    c.async_put("/k", "v", asio::bind_cancellation_slot(sig.slot(), [result](error_code ec, put_result) {
                  *result = ec;
                }));
    co_await sleep_for(100ms);
    sig.emit(asio::cancellation_type::terminal);
    co_await sleep_for(300ms);
    BOOST_TEST_REQUIRE(result->has_value());
    BOOST_TEST(**result == asio::error::operation_aborted, (*result)->message());
  }(c));
}

BOOST_AUTO_TEST_CASE(close_with_work_in_flight_completes_everything) {
  asio::io_context ioc;
  auto dead = std::make_unique<client>(ioc, [] {
    client_options o;
    o.endpoints = {"127.0.0.1:" + std::to_string(free_port())};
    return o;
  }());
  client live(ioc, options_for(server()));
  struct outcome {
    int completed = 0;
    std::vector<error_code> errors;
  };
  auto out = std::make_shared<outcome>();
  auto record = [out](error_code ec, auto&&...) {
    ++out->completed;
    out->errors.push_back(ec);
  };
  // The keepalive's loss wait succeeds when the client closes, and says so in its reason.
  using loss = std::optional<std::pair<error_code, loss_reason>>;
  auto kept = std::make_shared<loss>();
  auto record_loss = [out, kept](error_code ec, loss_reason why) {
    ++out->completed;
    out->errors.push_back(ec ? ec : why.cause);
    *kept = std::pair(ec, why);
  };
  run_for(ioc, [](client& live, client& dead, std::shared_ptr<outcome> out, decltype(record) record,
                  decltype(record_loss) record_loss, std::shared_ptr<loss> kept) -> asio::awaitable<void> {
    auto l = co_await live.async_lease_grant(std::chrono::seconds(5), use_awaitable);
    auto keep = live.keep_alive(l.id, std::chrono::seconds(l.ttl));
    auto w = co_await live.async_watch("/err/close", use_awaitable);
    w.async_next(record);
    keep.async_wait_lost(record_loss);
    for (int i = 0; i < 20; ++i) dead.async_get("/k", record);  // stuck waiting for a connection
    for (int i = 0; i < 20; ++i) live.async_put("/err/close/" + std::to_string(i), "v", record);
    co_await sleep_for(50ms);
    live.close();
    dead.close();
    co_await sleep_for(200ms);
    BOOST_TEST(out->completed == 42);
    int closed = 0;
    for (auto& e : out->errors) closed += (e == error::client_closed);
    BOOST_TEST(closed >= 22);  // the dead client's calls, the watch and the keepalive at least
    BOOST_TEST_REQUIRE(kept->has_value());
    BOOST_TEST(!(*kept)->first, (*kept)->first.message());
    BOOST_TEST(((*kept)->second.what == loss_reason::kind::client_closed));
    auto [ec, r] = co_await live.async_get("/k", asio::as_tuple(use_awaitable));
    BOOST_TEST(ec == error::client_closed);
    auto [ec2, w2] = co_await live.async_watch("/k", asio::as_tuple(use_awaitable));
    BOOST_TEST(ec2 == error::client_closed);
    auto k2 = live.keep_alive(l.id);
    auto [ec3, why3] = co_await k2.async_wait_lost(asio::as_tuple(use_awaitable));
    BOOST_TEST(!ec3, ec3.message());
    BOOST_TEST((why3.what == loss_reason::kind::client_closed));
    BOOST_TEST(why3.cause == error::client_closed, why3.cause.message());
  }(live, *dead, out, record, record_loss, kept));
  dead.reset();  // destroying a closed client is fine
  // Clean up what the closed client wrote, with a fresh one.
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    co_await c.async_delete("/err/close/", delete_options{.prefix = true}, use_awaitable);
  }(c));
}

// The loop must run out of work by itself: run_for(200ms) returned after 200 ms whether or not
// anything was still pending, so a destroyed client that left its calls' handlers (and their
// outstanding work) behind for ever passed. Now the loop gets up to 10 s and must stop on its
// own, long before, with every handler called.
BOOST_AUTO_TEST_CASE(destroying_a_client_with_work_in_flight_does_not_hang) {
  asio::io_context ioc;
  auto t0 = std::chrono::steady_clock::now();
  int completed = 0, closed = 0;
  auto count = [&](error_code ec) {
    ++completed;
    closed += ec == error::client_closed;
  };
  {
    client c(ioc, options_for(server()));
    for (int i = 0; i < 10; ++i) c.async_get("/k", [&](error_code ec, get_result) { count(ec); });
    c.async_watch("/k", [&](error_code ec, watcher) { count(ec); });
    auto keep = c.keep_alive(12345);
    ioc.poll();
  }
  ioc.run_for(10s);
  const auto took = std::chrono::steady_clock::now() - t0;
  BOOST_TEST(ioc.stopped(), "the loop still had work 10 s after the client was destroyed");
  BOOST_TEST((took < 3s), std::chrono::duration<double>(took).count() << " s");
  BOOST_TEST(completed == 11);
  BOOST_TEST_MESSAGE(completed << " handlers called, " << closed << " with client_closed, the loop returned after "
                               << std::chrono::duration<double>(took).count() << " s");
}

// An error etcd explains in words and coetcd has no code for keeps the server's words: a lease
// granted with the id of one that exists ("etcdserver: lease already exists",
// FAILED_PRECONDITION). It still compares as its gRPC status.
BOOST_AUTO_TEST_CASE(what_the_server_said_reaches_the_caller) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto first = co_await c.async_lease_grant(std::chrono::seconds(30), use_awaitable);
    auto [ec, r] = co_await c.async_lease_grant(std::chrono::seconds(30), first.id, asio::as_tuple(use_awaitable));
    BOOST_TEST_REQUIRE(!!ec);
    BOOST_TEST(ec.message().find("lease already exists") != std::string::npos, ec.message());
    BOOST_TEST(ec.message().find("FAILED_PRECONDITION") != std::string::npos, ec.message());
    BOOST_TEST((ec.category() == server_category()));
    BOOST_TEST(grpc_status(ec) == 9);
    BOOST_TEST((ec == boost::system::error_condition(9, grpc_category())));
    // The same words give the same code; errors of other categories have no gRPC status.
    auto [ec2, r2] = co_await c.async_lease_grant(std::chrono::seconds(30), first.id, asio::as_tuple(use_awaitable));
    BOOST_TEST(ec2 == ec);
    BOOST_TEST(grpc_status(make_error_code(error::locked)) == -1);
    co_await c.async_lease_revoke(first.id, use_awaitable);
  }(c));
}
