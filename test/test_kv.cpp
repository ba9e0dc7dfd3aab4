// KV and txn operations against a real etcd.
#define BOOST_TEST_MODULE coetcd_kv
#include "support/fixture.hpp"
#include "support/tcp_proxy.hpp"

#include <boost/asio/deferred.hpp>

#include <ctime>

using namespace coetcd;
using namespace coetcd::test;
using namespace std::chrono_literals;

BOOST_TEST_GLOBAL_FIXTURE(shared_etcd);

BOOST_AUTO_TEST_CASE(put_then_get_round_trip) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto p = co_await c.async_put("/kv/rt", "v1", use_awaitable);
    BOOST_TEST(p.header.revision > 0);
    BOOST_TEST(!p.prev_kv);
    auto g = co_await c.async_get("/kv/rt", use_awaitable);
    BOOST_TEST_REQUIRE(g.kvs.size() == 1u);
    BOOST_TEST(g.kvs[0].key == "/kv/rt");
    BOOST_TEST(g.kvs[0].value == "v1");
    BOOST_TEST(g.kvs[0].create_revision == p.header.revision);
    BOOST_TEST(g.kvs[0].mod_revision == p.header.revision);
    BOOST_TEST(g.kvs[0].version == 1);
    auto p2 = co_await c.async_put("/kv/rt", "v2", put_options{.prev_kv = true}, use_awaitable);
    BOOST_TEST_REQUIRE(p2.prev_kv.has_value());
    BOOST_TEST(p2.prev_kv->value == "v1");
    auto g2 = co_await c.async_get("/kv/rt", use_awaitable);
    BOOST_TEST(g2.kvs[0].version == 2);
    BOOST_TEST(g2.kvs[0].value == "v2");
    auto missing = co_await c.async_get("/kv/does-not-exist", use_awaitable);
    BOOST_TEST(missing.kvs.empty());
    BOOST_TEST(missing.count == 0);
    co_await c.async_delete("/kv/rt", use_awaitable);
  }(c));
}

BOOST_AUTO_TEST_CASE(get_prefix_range_limit_sort_and_projections) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    std::int64_t first_rev = 0;
    for (std::string k : {"a", "b", "c", "d", "e"}) {
      auto p = co_await c.async_put("/kv/p/" + k, "value-" + k, use_awaitable);
      if (!first_rev) first_rev = p.header.revision;
    }
    co_await c.async_put("/kv/p0", "outside the prefix", use_awaitable);

    auto all = co_await c.async_get("/kv/p/", get_options{.prefix = true}, use_awaitable);
    BOOST_TEST(all.kvs.size() == 5u);
    BOOST_TEST(all.count == 5);

    auto limited = co_await c.async_get("/kv/p/", get_options{.prefix = true, .limit = 2}, use_awaitable);
    BOOST_TEST(limited.kvs.size() == 2u);
    BOOST_TEST(limited.more);
    BOOST_TEST(limited.count == 5);

    auto desc = co_await c.async_get(
        "/kv/p/", get_options{.prefix = true, .order = sort_order::descend, .target = sort_target::key},
        use_awaitable);
    BOOST_TEST(desc.kvs.front().key == "/kv/p/e");
    BOOST_TEST(desc.kvs.back().key == "/kv/p/a");

    auto range = co_await c.async_get("/kv/p/b", get_options{.range_end = "/kv/p/d"}, use_awaitable);
    BOOST_TEST_REQUIRE(range.kvs.size() == 2u);
    BOOST_TEST(range.kvs[0].key == "/kv/p/b");
    BOOST_TEST(range.kvs[1].key == "/kv/p/c");

    auto keys = co_await c.async_get("/kv/p/", get_options{.prefix = true, .keys_only = true}, use_awaitable);
    BOOST_TEST(keys.kvs.size() == 5u);
    BOOST_TEST(keys.kvs[0].value.empty());

    auto count = co_await c.async_get("/kv/p/", get_options{.prefix = true, .count_only = true}, use_awaitable);
    BOOST_TEST(count.kvs.empty());
    BOOST_TEST(count.count == 5);

    auto at_first = co_await c.async_get("/kv/p/", get_options{.prefix = true, .revision = first_rev}, use_awaitable);
    BOOST_TEST(at_first.kvs.size() == 1u);

    auto newer = co_await c.async_get(
        "/kv/p/", get_options{.prefix = true, .min_mod_revision = first_rev + 3}, use_awaitable);
    BOOST_TEST(newer.kvs.size() == 2u);
    auto older = co_await c.async_get(
        "/kv/p/", get_options{.prefix = true, .max_create_revision = first_rev + 1}, use_awaitable);
    BOOST_TEST(older.kvs.size() == 2u);

    auto ser = co_await c.async_get("/kv/p/", get_options{.prefix = true, .serializable = true}, use_awaitable);
    BOOST_TEST(ser.kvs.size() == 5u);

    auto future = co_await c.async_get("/kv/p/a", get_options{.revision = all.header.revision + 1000},
                                       asio::as_tuple(use_awaitable));
    BOOST_TEST(std::get<0>(future) == error::future_revision);

    co_await c.async_delete("/kv/p", delete_options{.prefix = true}, use_awaitable);
  }(c));
}

BOOST_AUTO_TEST_CASE(delete_key_range_and_prefix_with_prev_kv) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    for (int i = 0; i < 4; ++i) co_await c.async_put("/kv/d/" + std::to_string(i), std::to_string(i), use_awaitable);
    auto one = co_await c.async_delete("/kv/d/0", use_awaitable);
    BOOST_TEST(one.deleted == 1);
    BOOST_TEST(one.prev_kvs.empty());
    auto none = co_await c.async_delete("/kv/d/0", use_awaitable);
    BOOST_TEST(none.deleted == 0);
    auto range = co_await c.async_delete("/kv/d/1", delete_options{.range_end = "/kv/d/3"}, use_awaitable);
    BOOST_TEST(range.deleted == 2);
    auto rest = co_await c.async_delete("/kv/d/", delete_options{.prefix = true, .prev_kv = true}, use_awaitable);
    BOOST_TEST(rest.deleted == 1);
    BOOST_TEST_REQUIRE(rest.prev_kvs.size() == 1u);
    BOOST_TEST(rest.prev_kvs[0].key == "/kv/d/3");
    BOOST_TEST(rest.prev_kvs[0].value == "3");
    BOOST_TEST(co_await count_keys(c, "/kv/d/") == 0);
  }(c));
}

BOOST_AUTO_TEST_CASE(txn_takes_then_and_else_branches) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto create = txn()
                      .when(compare::version("/kv/t/a") == 0)
                      .then(txn_op::put("/kv/t/a", "1"))
                      .then(txn_op::get("/kv/t/a"))
                      .otherwise(txn_op::get("/kv/t/a"));
    auto first = co_await c.async_txn(create, use_awaitable);
    BOOST_TEST(first.succeeded);
    BOOST_TEST_REQUIRE(first.responses.size() == 2u);
    BOOST_TEST(first.responses[0].put().header.revision == first.header.revision);
    BOOST_TEST(first.responses[1].get().kvs.at(0).value == "1");

    auto second = co_await c.async_txn(create, use_awaitable);
    BOOST_TEST(!second.succeeded);
    BOOST_TEST_REQUIRE(second.responses.size() == 1u);
    BOOST_TEST(second.responses[0].get().kvs.at(0).create_revision == first.header.revision);

    auto by_value = co_await c.async_txn(
        txn().when(compare::value("/kv/t/a") == "1").then(txn_op::put("/kv/t/a", "2", put_options{.prev_kv = true})),
        use_awaitable);
    BOOST_TEST(by_value.succeeded);
    BOOST_TEST(by_value.responses.at(0).put().prev_kv->value == "1");

    auto by_mod = co_await c.async_txn(
        txn().when(compare::mod_revision("/kv/t/a") > by_value.header.revision).then(txn_op::del("/kv/t/a")),
        use_awaitable);
    BOOST_TEST(!by_mod.succeeded);

    auto by_create = co_await c.async_txn(
        txn().when(compare::create_revision("/kv/t/a") == first.header.revision).then(txn_op::put("/kv/t/b", "x")),
        use_awaitable);
    BOOST_TEST(by_create.succeeded);

    auto by_lease = co_await c.async_txn(txn().when(compare::lease("/kv/t/a") != 0).then(txn_op::put("/kv/t/c", "x")),
                                         use_awaitable);
    BOOST_TEST(!by_lease.succeeded);

    auto prefix = co_await c.async_txn(
        txn().when(compare::version("/kv/t/").prefix() > 0).then(txn_op::del("/kv/t/", delete_options{.prefix = true})),
        use_awaitable);
    BOOST_TEST(prefix.succeeded);
    BOOST_TEST(prefix.responses.at(0).del().deleted == 2);

    auto nested = co_await c.async_txn(
        txn().then(txn_op::nested(txn()
                                      .when(compare::version("/kv/t/n") == 0)
                                      .then(txn_op::put("/kv/t/n", "inner"))
                                      .then(txn_op::get("/kv/t/n")))),
        use_awaitable);
    BOOST_TEST(nested.succeeded);
    const auto& inner = nested.responses.at(0).nested();
    BOOST_TEST(inner.succeeded);
    BOOST_TEST(inner.responses.at(1).get().kvs.at(0).value == "inner");

    auto [ec, dup] = co_await c.async_txn(
        txn().then(txn_op::put("/kv/t/dup", "1")).then(txn_op::put("/kv/t/dup", "2")), asio::as_tuple(use_awaitable));
    BOOST_TEST(ec == error::duplicate_key_in_txn, ec.message());

    co_await c.async_delete("/kv/t/", delete_options{.prefix = true}, use_awaitable);
  }(c));
}

BOOST_AUTO_TEST_CASE(compaction_hides_old_revisions) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto p1 = co_await c.async_put("/kv/c", "old", use_awaitable);
    auto p2 = co_await c.async_put("/kv/c", "new", use_awaitable);
    auto old = co_await c.async_get("/kv/c", get_options{.revision = p1.header.revision}, use_awaitable);
    BOOST_TEST(old.kvs.at(0).value == "old");
    co_await c.async_compact(p2.header.revision, use_awaitable);
    auto [ec, r] = co_await c.async_get("/kv/c", get_options{.revision = p1.header.revision},
                                        asio::as_tuple(use_awaitable));
    BOOST_TEST(ec == error::compacted, ec.message());
    auto [ec2, h] = co_await c.async_compact(p1.header.revision, asio::as_tuple(use_awaitable));
    BOOST_TEST(ec2 == error::compacted, ec2.message());
    co_await c.async_delete("/kv/c", use_awaitable);
  }(c));
}

BOOST_AUTO_TEST_CASE(put_with_a_lease_attaches_it) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto l = co_await c.async_lease_grant(std::chrono::seconds(30), use_awaitable);
    co_await c.async_put("/kv/l", "x", put_options{.lease = l.id}, use_awaitable);
    auto g = co_await c.async_get("/kv/l", use_awaitable);
    BOOST_TEST(g.kvs.at(0).lease == l.id);
    co_await c.async_lease_revoke(l.id, use_awaitable);
    BOOST_TEST(co_await count_keys(c, "/kv/l") == 0);
    auto [ec, r] = co_await c.async_put("/kv/l", "x", put_options{.lease = l.id}, asio::as_tuple(use_awaitable));
    BOOST_TEST(ec == error::lease_not_found, ec.message());
  }(c));
}

BOOST_AUTO_TEST_CASE(every_completion_token_kind_works) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  // Callback.
  bool called = false;
  c.async_put("/kv/tok", "cb", [&](error_code ec, put_result r) {
    called = !ec && r.header.revision > 0;
  });
  BOOST_TEST(!called);  // never invoked inline
  ioc.run_for(5s);
  BOOST_TEST(called);
  // use_future with the io_context on another thread.
  ioc.restart();
  auto guard = asio::make_work_guard(ioc);
  std::thread runner([&] { ioc.run(); });
  auto f = c.async_get("/kv/tok", asio::use_future);
  BOOST_TEST(f.get().kvs.at(0).value == "cb");
  // deferred, launched later with a callback.
  auto op = c.async_delete("/kv/tok", asio::deferred);
  std::promise<std::int64_t> deleted;
  std::move(op)([&](error_code, delete_result r) { deleted.set_value(r.deleted); });
  BOOST_TEST(deleted.get_future().get() == 1);
  guard.reset();
  runner.join();
  c.close();
}

namespace {
double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}
}  // namespace

// completion_mode::poll: the event loop's thread reaps gRPC's queue while requests are in flight.
// Every kind of call still completes (unary one after another and fifty at once, a watch stream,
// a session's keepalives, a mutex); idle, nothing spins (a loop still polling would burn most of
// a core in the idle second); and closing with requests on the wire ends them all.
BOOST_AUTO_TEST_CASE(polled_completions_serve_every_call_and_rest_when_idle) {
  asio::io_context ioc;
  auto o = options_for(server());
  o.completions = completion_mode::poll;
  client c(ioc, o);
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto w = co_await c.async_watch("/kv/poll/", watch_options{.prefix = true}, use_awaitable);
    for (int i = 0; i < 100; ++i) {
      co_await c.async_put("/kv/poll/k", std::to_string(i), use_awaitable);
      auto g = co_await c.async_get("/kv/poll/k", use_awaitable);
      BOOST_TEST_REQUIRE(g.kvs.size() == 1u);
      BOOST_TEST_REQUIRE(g.kvs[0].value == std::to_string(i));
    }
    std::size_t events = 0;
    while (events < 100) events += (co_await w.async_next(use_awaitable)).events.size();
    BOOST_TEST(events == 100u);
    auto ex = co_await asio::this_coro::executor;
    auto answered = std::make_shared<int>(0);
    for (int i = 0; i < 50; ++i)
      asio::co_spawn(ex, [](client& c, std::shared_ptr<int> n) -> asio::awaitable<void> {
        auto g = co_await c.async_get("/kv/poll/k", use_awaitable);
        if (g.kvs.size() == 1 && g.kvs[0].value == "99") ++*n;
      }(c, answered), asio::detached);
    std::function<bool()> all = [answered] { return *answered == 50; };
    BOOST_TEST(co_await eventually(std::move(all), 5s));
    auto s = co_await session::async_create(c, session_options{.ttl = std::chrono::seconds(5)}, use_awaitable);
    mutex m(s, "/kv/poll-lock");
    auto held = co_await m.async_lock(use_awaitable);
    BOOST_TEST(bool(held));
    // Idle for a second with the session's keepalive stream open.
    const double before = process_cpu_seconds();
    co_await sleep_for(1s);
    const double idle_cpu = process_cpu_seconds() - before;
    BOOST_TEST(idle_cpu < 0.3, "CPU in an idle second: " << idle_cpu << " s");
    BOOST_TEST(!s.lost());
    BOOST_TEST(bool(held));
    co_await held.async_release(use_awaitable);
    co_await s.async_close(use_awaitable);
    co_await c.async_delete("/kv/poll/", delete_options{.prefix = true}, use_awaitable);
    // Closing with twenty gets on the wire: each ends, answered or with client_closed.
    auto ended = std::make_shared<int>(0);
    auto failed = std::make_shared<int>(0);
    for (int i = 0; i < 20; ++i)
      c.async_get("/kv/poll/k", [ended, failed](error_code ec, get_result) {
        ++*ended;
        if (ec && ec != error::client_closed) ++*failed;
      });
    c.close();
    std::function<bool()> all_ended = [ended] { return *ended == 20; };
    BOOST_TEST(co_await eventually(std::move(all_ended), 5s));
    BOOST_TEST(*failed == 0);
  }(c));
}

// completion_mode::adaptive (the default) polls for short round trips with few requests in
// flight, and lets the client thread wait where a wake-up is a small part of the round trip:
// behind a 3 ms delay it stops polling after a reply or two, and its CPU stays far below the
// wall time (polling the whole time would take about all of it). completion_mode::thread never
// polls.
BOOST_AUTO_TEST_CASE(adaptive_completions_poll_only_where_round_trips_are_short) {
  BOOST_TEST((client_options{}.completions == completion_mode::adaptive));
  tcp_proxy proxy(server().endpoint());
  proxy.delay(3ms);
  asio::io_context ioc;
  auto o = options_for(server());
  client near(ioc, o);
  o.endpoints = {proxy.endpoint()};
  client far(ioc, o);
  o = options_for(server());
  o.completions = completion_mode::thread;
  client blocking(ioc, o);
  run_for(ioc, [](client& near, client& far, client& blocking) -> asio::awaitable<void> {
    co_await near.async_put("/kv/adaptive", "v", use_awaitable);
    const auto near_start = std::chrono::steady_clock::now();
    for (int i = 0; i < 200; ++i) co_await near.async_get("/kv/adaptive", use_awaitable);
    const auto per_get = (std::chrono::steady_clock::now() - near_start) / 200;
    // Round trips past the bound (a sanitizer build on a loaded machine) rightly do not poll.
    if (per_get < 700us) BOOST_TEST(near.stats().replies_polled > 0u, "a get took " << per_get.count() << " ns");
    else BOOST_TEST_MESSAGE("gets took " << per_get.count() << " ns each on loopback: no polling expected");

    for (int i = 0; i < 5; ++i) co_await far.async_get("/kv/adaptive", use_awaitable);  // learns the delay
    const auto polled = far.stats().replies_polled;
    const double cpu_before = process_cpu_seconds();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < 30; ++i) co_await far.async_get("/kv/adaptive", use_awaitable);
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double cpu = process_cpu_seconds() - cpu_before;
    BOOST_TEST(far.stats().replies_polled - polled <= 2u, far.stats().replies_polled - polled);
    BOOST_TEST(cpu < wall / 2, "CPU " << cpu << " s in " << wall << " s of 30 gets 6 ms apart");

    for (int i = 0; i < 50; ++i) co_await blocking.async_get("/kv/adaptive", use_awaitable);
    BOOST_TEST(blocking.stats().replies_polled == 0u);
    co_await near.async_delete("/kv/adaptive", use_awaitable);
  }(near, far, blocking), 30s);
}
