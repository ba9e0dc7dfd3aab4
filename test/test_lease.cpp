// Leases and the shared keepalive stream against a real etcd.
#define BOOST_TEST_MODULE coetcd_lease
#include "support/fixture.hpp"
#include "support/tcp_proxy.hpp"

#include <thread>

using namespace coetcd;
using namespace coetcd::test;
using namespace std::chrono_literals;

BOOST_TEST_GLOBAL_FIXTURE(shared_etcd);

BOOST_AUTO_TEST_CASE(grant_ttl_list_revoke) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto l = co_await c.async_lease_grant(std::chrono::seconds(30), use_awaitable);
    BOOST_TEST(l.id != 0);
    BOOST_TEST(l.ttl.count() == 30);
    co_await c.async_put("/lease/g", "x", put_options{.lease = l.id}, use_awaitable);
    auto ttl = co_await c.async_lease_time_to_live(l.id, true, use_awaitable);
    BOOST_TEST(ttl.ttl.count() > 0);
    BOOST_TEST(ttl.ttl.count() <= 30);
    BOOST_TEST(ttl.granted_ttl.count() == 30);
    BOOST_TEST_REQUIRE(ttl.keys.size() == 1u);
    BOOST_TEST(ttl.keys[0] == "/lease/g");
    auto all = co_await c.async_lease_leases(use_awaitable);
    BOOST_TEST((std::find(all.ids.begin(), all.ids.end(), l.id) != all.ids.end()));
    co_await c.async_lease_revoke(l.id, use_awaitable);
    auto gone = co_await c.async_lease_time_to_live(l.id, use_awaitable);
    BOOST_TEST(gone.ttl.count() == -1);
    BOOST_TEST(co_await count_keys(c, "/lease/g") == 0);
    auto [ec, h] = co_await c.async_lease_revoke(l.id, asio::as_tuple(use_awaitable));
    BOOST_TEST(ec == error::lease_not_found, ec.message());
    auto chosen = co_await c.async_lease_grant(std::chrono::seconds(10), 0x1234abcd, use_awaitable);
    BOOST_TEST(chosen.id == 0x1234abcd);
    co_await c.async_lease_revoke(chosen.id, use_awaitable);
    auto [ec0, r0] = co_await c.async_lease_grant(std::chrono::seconds(0), asio::as_tuple(use_awaitable));
    BOOST_TEST(ec0 == error::invalid_argument);
  }(c));
}

BOOST_AUTO_TEST_CASE(keepalive_holds_a_2s_lease_for_10s) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto l = co_await c.async_lease_grant(std::chrono::seconds(2), use_awaitable);
    co_await c.async_put("/lease/held", "x", put_options{.lease = l.id}, use_awaitable);
    {
      auto keep = c.keep_alive(l.id, std::chrono::seconds(l.ttl));
      co_await sleep_for(10s);
      auto ttl = co_await c.async_lease_time_to_live(l.id, use_awaitable);
      BOOST_TEST(ttl.ttl.count() > 0);
      BOOST_TEST(co_await count_keys(c, "/lease/held") == 1);
    }  // keepalive stops here; the lease expires within its TTL
    co_await sleep_for(3500ms);
    auto ttl = co_await c.async_lease_time_to_live(l.id, use_awaitable);
    BOOST_TEST(ttl.ttl.count() == -1);
    BOOST_TEST(co_await count_keys(c, "/lease/held") == 0);
  }(c), 40s);
}

BOOST_AUTO_TEST_CASE(lease_revoked_with_etcdctl_is_reported_lost) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto l = co_await c.async_lease_grant(std::chrono::seconds(6), use_awaitable);
    auto keep = c.keep_alive(l.id, std::chrono::seconds(l.ttl));
    co_await sleep_for(300ms);
    auto r = etcdctl(server(), "lease revoke " + hex(l.id));
    BOOST_TEST_REQUIRE(r.exit_code == 0, r.output);
    auto t0 = std::chrono::steady_clock::now();
    // The loss is the wait's success: with use_awaitable it returns the reason, it does not throw.
    auto why = co_await keep.async_wait_lost(use_awaitable);
    BOOST_TEST((why.what == loss_reason::kind::lease_gone));
    BOOST_TEST(why.cause == error::lease_not_found, why.cause.message());
    // Found at the next renewal (TTL/3), long before the TTL would have run out.
    BOOST_TEST((std::chrono::steady_clock::now() - t0 < 4s));
  }(c));
}

BOOST_AUTO_TEST_CASE(keepalive_of_an_unknown_lease_is_lost_at_once) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto keep = c.keep_alive(0x7777777777);
    auto [ec, why] = co_await keep.async_wait_lost(asio::as_tuple(use_awaitable));
    BOOST_TEST(!ec, ec.message());
    BOOST_TEST((why.what == loss_reason::kind::lease_gone));
    BOOST_TEST(why.cause == error::lease_not_found, why.cause.message());
    // Lost already: a later wait completes at once with the same reason.
    auto [again_ec, again] = co_await keep.async_wait_lost(asio::as_tuple(use_awaitable));
    BOOST_TEST(!again_ec, again_ec.message());
    BOOST_TEST(again.cause == error::lease_not_found);
  }(c));
}

BOOST_AUTO_TEST_CASE(many_leases_share_one_keepalive_stream) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  double before = server().grpc_started("LeaseKeepAlive");
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    std::vector<lease_keepalive> keeps;
    std::vector<std::int64_t> ids;
    for (int i = 0; i < 50; ++i) {
      auto l = co_await c.async_lease_grant(std::chrono::seconds(3), use_awaitable);
      ids.push_back(l.id);
      keeps.push_back(c.keep_alive(l.id, std::chrono::seconds(l.ttl)));
    }
    co_await sleep_for(5s);
    for (auto id : ids) {
      auto ttl = co_await c.async_lease_time_to_live(id, use_awaitable);
      BOOST_TEST(ttl.ttl.count() > 0);
    }
    for (auto id : ids) co_await c.async_lease_revoke(id, use_awaitable);
  }(c));
  BOOST_TEST(server().grpc_started("LeaseKeepAlive") - before == 1.0);
}

BOOST_AUTO_TEST_CASE(lease_is_lost_when_the_server_is_gone_past_its_ttl) {
  etcd_process own;
  asio::io_context ioc;
  client c(ioc, options_for(own));
  run_for(ioc, [](client& c, etcd_process& own) -> asio::awaitable<void> {
    auto l = co_await c.async_lease_grant(std::chrono::seconds(3), use_awaitable);
    auto keep = c.keep_alive(l.id, std::chrono::seconds(l.ttl));
    co_await sleep_for(1500ms);
    own.stop();
    auto t0 = std::chrono::steady_clock::now();
    auto [ec, why] = co_await keep.async_wait_lost(asio::as_tuple(use_awaitable));
    auto waited = std::chrono::steady_clock::now() - t0;
    BOOST_TEST(!ec, ec.message());
    BOOST_TEST((why.what == loss_reason::kind::lease_deadline));
    BOOST_TEST(why.cause == error::lease_expired, why.cause.message());
    // The local deadline decides (TTL 3 s after the last answered renewal); without it this would
    // wait for the unreachable server forever.
    BOOST_TEST((waited < 4500ms));
    own.start();
  }(c, own));
}

BOOST_AUTO_TEST_CASE(keepalive_survives_a_restart_shorter_than_the_ttl) {
  etcd_process own;
  asio::io_context ioc;
  client c(ioc, options_for(own));
  run_for(ioc, [](client& c, etcd_process& own) -> asio::awaitable<void> {
    auto l = co_await c.async_lease_grant(std::chrono::seconds(8), use_awaitable);
    auto keep = c.keep_alive(l.id, std::chrono::seconds(l.ttl));
    auto lost = waiting_for_loss();
    keep.async_wait_lost(record(lost));
    co_await sleep_for(500ms);
    own.stop();
    own.start();
    co_await sleep_for(9s);  // longer than the TTL: only renewals on the new stream keep it
    auto ttl = co_await c.async_lease_time_to_live(l.id, use_awaitable);
    BOOST_TEST(ttl.ttl.count() > 0);
    BOOST_TEST(!lost->has_value(), "told lost: " << (lost->has_value() ? (*lost)->reason.cause.message() : ""));
  }(c, own), 40s);
}

// Waits that end without a loss are no success: a keepalive stopped by its owner, also for waits
// started after stop(), and a session its owner closed complete with operation_aborted; an empty
// keepalive or session (nothing to lose) with bad_descriptor.
BOOST_AUTO_TEST_CASE(waits_that_end_without_a_loss_are_no_success) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto l = co_await c.async_lease_grant(std::chrono::seconds(10), use_awaitable);
    auto keep = c.keep_alive(l.id, std::chrono::seconds(10));
    auto pending = waiting_for_loss();
    keep.async_wait_lost(record(pending));
    co_await sleep_for(300ms);
    BOOST_TEST_REQUIRE(!pending->has_value(), "a live lease was told lost");
    keep.close();
    std::function<bool()> told = [pending] { return pending->has_value(); };
    BOOST_TEST_REQUIRE(co_await eventually(std::move(told), 2000ms));
    BOOST_TEST((*pending)->ec == asio::error::operation_aborted, (*pending)->ec.message());
    auto [after, after_why] = co_await keep.async_wait_lost(asio::as_tuple(use_awaitable));
    BOOST_TEST(after == asio::error::operation_aborted, after.message());

    lease_keepalive none;
    auto [none_ec, none_why] = co_await none.async_wait_lost(asio::as_tuple(use_awaitable));
    BOOST_TEST(none_ec == asio::error::bad_descriptor, none_ec.message());
    session empty;
    auto [empty_ec, empty_why] = co_await empty.async_wait_lost(asio::as_tuple(use_awaitable));
    BOOST_TEST(empty_ec == asio::error::bad_descriptor, empty_ec.message());

    auto s = co_await session::async_create(c, session_options{.ttl = 10s}, use_awaitable);
    auto closing = waiting_for_loss();
    s.async_wait_lost(record(closing));
    co_await s.async_close(use_awaitable);
    std::function<bool()> closed = [closing] { return closing->has_value(); };
    BOOST_TEST_REQUIRE(co_await eventually(std::move(closed), 2000ms));
    BOOST_TEST((*closing)->ec == asio::error::operation_aborted, (*closing)->ec.message());
    co_await c.async_lease_revoke(l.id, use_awaitable);
  }(c));
}

// An adopted lease is trusted only for what is left of it: with the member paused right after
// the adoption, the session is lost by the lease's real expiry, not a whole TTL later. The
// keepalive renews at once on adoption, and that renewal may be answered before the pause: then
// the lease really was extended, and the server says so when it is back.
BOOST_AUTO_TEST_CASE(an_adopted_lease_is_lost_by_its_real_expiry) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto l = co_await c.async_lease_grant(std::chrono::seconds(8), use_awaitable);
    co_await sleep_for(5s);  // about 3 s left
    auto s = co_await session::async_create(c, session_options{.lease = l.id}, use_awaitable);
    auto adopted = std::chrono::steady_clock::now();
    server().pause();
    while (!s.lost() && std::chrono::steady_clock::now() - adopted < 5s) co_await sleep_for(50ms);
    server().resume();
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - adopted).count();
    if (s.lost()) {
      BOOST_TEST(seconds < 5.0, "lost after " << seconds << " s; the lease had about 3 s left");
    } else {
      // Still trusted 5 s after adopting a lease with 3 s left: only right if a renewal got
      // through before the pause, in which case the lease is alive on the server.
      auto t = co_await c.async_lease_time_to_live(l.id, use_awaitable);
      BOOST_TEST(t.ttl.count() > 0, "the lease expired on the server, but the session still trusted it after "
                                << seconds << " s");
      BOOST_TEST_MESSAGE("a renewal was answered before the pause (lease ttl " << t.ttl.count() << " s)");
    }
    s.orphan();
  }(c), 30s);
}

// etcd starts a new lease's TTL when it applies the grant, before its answer travels back. With
// 750 ms each way and nothing answered after the grant, the session must be lost by its TTL after
// the grant was sent; counting from the answer trusted the lease for 1.5 s after etcd could have
// expired it, and passed its locks on.
BOOST_AUTO_TEST_CASE(a_sessions_first_deadline_counts_from_when_it_asked_for_the_lease) {
  tcp_proxy proxy(server().endpoint());
  asio::io_context ioc;
  client c(ioc, via(proxy));
  run_for(ioc, [](tcp_proxy& proxy, client& c) -> asio::awaitable<void> {
    co_await c.async_get("/lease/connected", use_awaitable);  // connected before the delay
    proxy.delay(750ms);
    const auto asked = std::chrono::steady_clock::now();
    auto s = co_await session::async_create(c, session_options{.ttl = 3s}, use_awaitable);
    proxy.hold();  // no renewal gets through from here on
    const auto answered = std::chrono::steady_clock::now() - asked;
    BOOST_TEST_REQUIRE((answered >= 1400ms), "the proxy did not delay the grant");
    while (!s.lost() && std::chrono::steady_clock::now() - asked < 8s) co_await sleep_for(20ms);
    const auto lost_after = std::chrono::steady_clock::now() - asked;
    BOOST_TEST(s.lost());
    BOOST_TEST((lost_after < 3400ms), "lost " << std::chrono::duration<double>(lost_after).count()
                                            << " s after the grant was sent, TTL 3 s");
    proxy.restore();
    proxy.delay(0ms);
    s.orphan();
  }(proxy, c), 30s);
}

// A loop too busy to run the keepalive's timer on time must not make a lease look alive past its
// deadline: lost() reads the clock, and grants check it, while async_wait_lost waits for the timer.
BOOST_AUTO_TEST_CASE(lost_is_true_past_the_deadline_before_a_busy_loop_runs_the_keepalive_timer) {
  tcp_proxy proxy(server().endpoint());
  asio::io_context ioc;
  client c(ioc, via(proxy));
  run_for(ioc, [](tcp_proxy& proxy, client& c) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, session_options{.ttl = 3s}, use_awaitable);
    auto told = std::make_shared<bool>(false);
    s.async_wait_lost([told](error_code, loss_reason) { *told = true; });
    proxy.hold();
    BOOST_TEST(!s.lost());
    std::this_thread::sleep_for(3500ms);  // the loop's only thread is busy past the TTL
    BOOST_TEST(s.lost(), "past its deadline, the session still says it lives");
    BOOST_TEST(!*told, "the keepalive's timer ran although the loop was busy");
    while (!*told) co_await sleep_for(20ms);
    proxy.restore();
    s.orphan();
  }(proxy, c), 30s);
}
