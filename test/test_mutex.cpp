// Sessions and the distributed mutex against a real etcd, including etcdctl interop.
#define BOOST_TEST_MODULE coetcd_mutex
#include "support/fixture.hpp"

#include <coetcd/leader.hpp>

#include <boost/asio/experimental/awaitable_operators.hpp>

#include <algorithm>
#include <array>
#include <set>

using namespace coetcd;
using namespace coetcd::test;
using namespace std::chrono_literals;
using namespace boost::asio::experimental::awaitable_operators;

BOOST_TEST_GLOBAL_FIXTURE(shared_etcd);

BOOST_AUTO_TEST_CASE(session_grants_keeps_and_revokes) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, session_options{.ttl = 5s}, use_awaitable);
    BOOST_TEST(s.lease() != 0);
    BOOST_TEST(s.ttl().count() == 5);
    co_await sleep_for(6s);  // longer than the TTL: kept alive
    auto ttl = co_await c.async_lease_time_to_live(s.lease(), use_awaitable);
    BOOST_TEST(ttl.ttl.count() > 0);
    BOOST_TEST(!s.lost());
    co_await s.async_close(use_awaitable);
    BOOST_TEST(s.lost());
    auto gone = co_await c.async_lease_time_to_live(s.lease(), use_awaitable);
    BOOST_TEST(gone.ttl.count() == -1);

    auto [e0, s0] = co_await session::async_create(c, session_options{.ttl = 0s}, asio::as_tuple(use_awaitable));
    BOOST_TEST(e0 == error::invalid_argument);
    auto [e1, s1] = co_await session::async_create(c, session_options{.lease = 0x5151}, asio::as_tuple(use_awaitable));
    BOOST_TEST(e1 == error::lease_not_found, e1.message());
    auto l = co_await c.async_lease_grant(std::chrono::seconds(30), use_awaitable);
    auto adopted = co_await session::async_create(c, session_options{.lease = l.id}, use_awaitable);
    BOOST_TEST(adopted.lease() == l.id);
    BOOST_TEST(adopted.ttl().count() == 30);
    std::int64_t id = adopted.lease();
    // A second session of this client on the same lease would queue its locks apart from the
    // first's on one key, and both would hold (#34): refused.
    auto [e2, twice] = co_await session::async_create(c, session_options{.lease = l.id}, asio::as_tuple(use_awaitable));
    BOOST_TEST(e2 == error::lease_in_use, e2.message());
    {
      mutex first(adopted, "adopt-twice");
      auto held = co_await first.async_lock(use_awaitable);
      BOOST_TEST(bool(held));
      co_await held.async_release(use_awaitable);
    }
    adopted = session();  // destroying revokes in the background
    co_await sleep_for(300ms);
    auto revoked = co_await c.async_lease_time_to_live(id, use_awaitable);
    BOOST_TEST(revoked.ttl.count() == -1);
  }(c));
}

BOOST_AUTO_TEST_CASE(session_reports_an_externally_revoked_lease) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, session_options{.ttl = 6s}, use_awaitable);
    auto r = etcdctl(server(), "lease revoke " + hex(s.lease()));
    BOOST_TEST_REQUIRE(r.exit_code == 0, r.output);
    // The loss is the awaited event: the wait succeeds, and the reason says what happened.
    auto [ec, why] = co_await s.async_wait_lost(asio::as_tuple(use_awaitable));
    BOOST_TEST(!ec, ec.message());
    BOOST_TEST(why.cause == error::lease_not_found, why.cause.message());
    BOOST_TEST((why.what == loss_reason::kind::lease_gone));
    BOOST_TEST(s.lost());
  }(c));
}

BOOST_AUTO_TEST_CASE(loss_slot_cancels_a_bound_operation_when_the_session_is_lost) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, session_options{.ttl = 3s}, use_awaitable);
    asio::steady_timer long_work(co_await asio::this_coro::executor, 60s);
    auto result = std::make_shared<std::optional<error_code>>();
    long_work.async_wait(asio::bind_cancellation_slot(s.loss_slot(), [result](error_code ec) { *result = ec; }));
    co_await sleep_for(200ms);
    BOOST_TEST(!result->has_value());  // not cancelled while the session lives
    auto r = etcdctl(server(), "lease revoke " + hex(s.lease()));
    BOOST_TEST_REQUIRE(r.exit_code == 0, r.output);
    for (int i = 0; i < 300 && !result->has_value(); ++i) co_await sleep_for(10ms);
    BOOST_TEST_REQUIRE(result->has_value());
    BOOST_TEST(**result == asio::error::operation_aborted);
  }(c));
}

BOOST_AUTO_TEST_CASE(key_layout_matches_go_and_etcdctl) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, use_awaitable);
    mutex m(s, "layout");
    BOOST_TEST(m.key() == "layout/" + hex(s.lease()));
    mutex slashed(s, "/pfx/");
    BOOST_TEST(slashed.key() == "/pfx//" + hex(s.lease()));
    auto held = co_await m.async_lock(use_awaitable);
    BOOST_TEST(held.key() == m.key());
    auto g = co_await c.async_get(m.key(), use_awaitable);
    BOOST_TEST_REQUIRE(g.kvs.size() == 1u);
    BOOST_TEST(g.kvs[0].lease == s.lease());
    BOOST_TEST(g.kvs[0].value.empty());
    BOOST_TEST(held.fencing_token() == g.kvs[0].create_revision);
    co_await held.async_release(use_awaitable);
    co_await expect_no_keys(c, "layout");
    BOOST_CHECK_THROW(mutex(s, ""), boost::system::system_error);
  }(c));
}

BOOST_AUTO_TEST_CASE(mutual_exclusion_fifo_and_fencing_with_100_waiters_over_3_clients) {
  asio::io_context ioc;
  client c1(ioc, options_for(server())), c2(ioc, options_for(server())), c3(ioc, options_for(server()));
  struct shared {
    bool inside = false;
    int counter = 0;
    int overlaps = 0;
    std::int64_t last_token = 0;
    int order_violations = 0;
    int errors = 0;
    int finished = 0;
  };
  auto st = std::make_shared<shared>();
  constexpr int workers = 100, rounds = 20;
  auto worker = [](client& c, std::shared_ptr<shared> st) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, use_awaitable);
    mutex m(s, "excl");
    for (int i = 0; i < rounds; ++i) {
      auto [ec, held] = co_await m.async_lock(asio::as_tuple(use_awaitable));
      if (ec) {
        ++st->errors;
        continue;
      }
      if (st->inside) ++st->overlaps;
      st->inside = true;
      if (held.fencing_token() <= st->last_token) ++st->order_violations;
      st->last_token = held.fencing_token();
      int seen = st->counter;
      co_await sleep_for(std::chrono::microseconds(100));  // let others run while we hold it
      st->counter = seen + 1;
      st->inside = false;
      co_await held.async_release(use_awaitable);
    }
    co_await s.async_close(use_awaitable);
    ++st->finished;
  };
  run_for(ioc, [](client& c1, client& c2, client& c3, std::shared_ptr<shared> st, auto worker) -> asio::awaitable<void> {
    auto ex = co_await asio::this_coro::executor;
    client* clients[] = {&c1, &c2, &c3};
    for (int w = 0; w < workers; ++w) asio::co_spawn(ex, worker(*clients[w % 3], st), asio::detached);
    while (st->finished < workers) co_await sleep_for(20ms);
    co_await expect_no_keys(c1, "excl");
  }(c1, c2, c3, st, worker), 180s);
  BOOST_TEST(st->errors == 0);
  BOOST_TEST(st->overlaps == 0);
  BOOST_TEST(st->counter == workers * rounds);
  // Acquisitions happen in create-revision order: every token is larger than the previous one.
  BOOST_TEST(st->order_violations == 0);
}

BOOST_AUTO_TEST_CASE(coetcd_and_etcdctl_lock_exclude_each_other) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, use_awaitable);
    mutex m(s, "interop");
    auto held = co_await m.async_lock(use_awaitable);
    // While we hold it, etcdctl cannot get it.
    auto blocked = run_command("timeout 2 env ETCDCTL_API=3 " + etcdctl_binary() + " --endpoints=" + server().client_url() +
                               " lock interop echo ETCDCTL-GOT-IT");
    BOOST_TEST(blocked.output.find("ETCDCTL-GOT-IT") == std::string::npos, blocked.output);
    BOOST_TEST(blocked.exit_code != 0);
    co_await held.async_release(use_awaitable);
    auto free = etcdctl(server(), "lock interop echo ETCDCTL-GOT-IT");
    BOOST_TEST(free.output.find("ETCDCTL-GOT-IT") != std::string::npos, free.output);

    // etcdctl holds it for 3 s; we cannot try_lock it, and our lock waits until it is released.
    auto holder = std::async(std::launch::async, [] {
      return etcdctl(server(), "lock interop sleep 3");
    });
    for (int i = 0; i < 100 && co_await count_keys(c, "interop/") == 0; ++i) co_await sleep_for(20ms);
    auto [busy, refused] = co_await m.async_try_lock(asio::as_tuple(use_awaitable));
    BOOST_TEST(busy == error::locked, busy.message());
    BOOST_TEST(!refused);
    auto t0 = std::chrono::steady_clock::now();
    auto after = co_await m.async_lock(use_awaitable);
    auto waited = std::chrono::steady_clock::now() - t0;
    BOOST_TEST((waited > 1500ms));
    BOOST_TEST(holder.get().exit_code == 0);
    co_await after.async_release(use_awaitable);
    co_await expect_no_keys(c, "interop");
  }(c));
}

BOOST_AUTO_TEST_CASE(try_lock_cancel_and_timeout_leave_no_key) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto holder_s = co_await session::async_create(c, use_awaitable);
    auto other_s = co_await session::async_create(c, use_awaitable);
    mutex holder(holder_s, "busy"), other(other_s, "busy");
    auto held = co_await holder.async_lock(use_awaitable);
    auto [e1, refused] = co_await other.async_try_lock(asio::as_tuple(use_awaitable));
    BOOST_TEST(e1 == error::locked);
    BOOST_TEST(!refused);
    BOOST_TEST(co_await settled_keys(c, "busy/", 1) == 1);
    // A lock that times out (|| timer) deletes its waiter key before it completes.
    auto r = co_await (other.async_lock(use_awaitable) || sleep_for(300ms));
    BOOST_TEST(r.index() == 1u);
    // The timed-out caller left the queue: the holder is the name's only holder and nobody waits.
    auto busy_stats = [&c] {
      for (const auto& l : c.stats().locks)
        if (l.name == "busy") return l;
      return lock_stats{};
    };
    BOOST_TEST(busy_stats().held == 1);
    BOOST_TEST(busy_stats().waiting == 0);
    BOOST_TEST(bool(held));
    BOOST_TEST(co_await settled_keys(c, "busy/", 1) == 1);
    // An explicit cancellation signal: operation_aborted with an empty hold, and no key left either.
    asio::cancellation_signal sig;
    auto result = acquiring<mutex::hold>();
    other.async_lock(asio::bind_cancellation_slot(sig.slot(), record(result)));
    co_await sleep_for(200ms);
    sig.emit(asio::cancellation_type::terminal);
    for (int i = 0; i < 100 && !result->ec.has_value(); ++i) co_await sleep_for(10ms);
    BOOST_TEST_REQUIRE(result->ec.has_value());
    BOOST_TEST(*result->ec == asio::error::operation_aborted);
    BOOST_TEST(!result->hold);
    BOOST_TEST(co_await settled_keys(c, "busy/", 1) == 1);
    co_await held.async_release(use_awaitable);
    auto again = co_await other.async_lock(use_awaitable);  // still usable after the cancellations
    co_await again.async_release(use_awaitable);
    co_await expect_no_keys(c, "busy");
  }(c));
}

BOOST_AUTO_TEST_CASE(session_loss_fails_waiters_and_hands_over) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto s1 = co_await session::async_create(c, use_awaitable);
    auto s2 = co_await session::async_create(c, use_awaitable);
    auto s3 = co_await session::async_create(c, use_awaitable);
    mutex m1(s1, "loss"), m2(s2, "loss"), m3(s3, "loss");
    auto h1 = co_await m1.async_lock(use_awaitable);
    // A waiter whose session is closed fails promptly with session_lost.
    auto r2 = acquiring<mutex::hold>();
    m2.async_lock(record(r2));
    auto r3 = acquiring<mutex::hold>();
    m3.async_lock(record(r3));
    co_await sleep_for(200ms);
    co_await s2.async_close(use_awaitable);
    for (int i = 0; i < 100 && !r2->ec.has_value(); ++i) co_await sleep_for(10ms);
    BOOST_TEST_REQUIRE(r2->ec.has_value());
    BOOST_TEST(*r2->ec == error::session_lost, r2->ec->message());
    BOOST_TEST(!r2->hold);
    // The holder's lease revoked from outside: the next waiter gets the lock.
    auto rev = etcdctl(server(), "lease revoke " + hex(s1.lease()));
    BOOST_TEST_REQUIRE(rev.exit_code == 0, rev.output);
    for (int i = 0; i < 200 && !r3->ec.has_value(); ++i) co_await sleep_for(10ms);
    BOOST_TEST_REQUIRE(r3->ec.has_value());
    BOOST_TEST(!*r3->ec, r3->ec->message());
    BOOST_TEST(bool(r3->hold));
    // The old holder's guarded write fails: it no longer owns the lock.
    auto w = co_await c.async_txn(txn().when(h1.fence()).then(txn_op::put("loss-data", "stale")), use_awaitable);
    BOOST_TEST(!w.succeeded);
    auto ok = co_await c.async_txn(txn().when(r3->hold.fence()).then(txn_op::put("loss-data", "fresh")), use_awaitable);
    BOOST_TEST(ok.succeeded);
    BOOST_TEST(r3->hold.fencing_token() > h1.fencing_token());
    auto [ul] = co_await h1.async_release(asio::as_tuple(use_awaitable));
    BOOST_TEST(ul == error::session_lost, ul.message());
    co_await r3->hold.async_release(use_awaitable);
    co_await c.async_delete("loss-data", use_awaitable);
    // A lost session refuses new locks.
    auto [e, none] = co_await m1.async_lock(asio::as_tuple(use_awaitable));
    BOOST_TEST(e == error::session_lost);
    BOOST_TEST(!none);
    co_await expect_no_keys(c, "loss");
  }(c));
}

// Two mutex objects of one session on one name exclude each other (no reentrancy, as
// std::mutex); the lock passes between them locally, on the session's one key. A hold is
// released once: an empty hold or a released one refuses a release.
BOOST_AUTO_TEST_CASE(objects_of_one_session_exclude_each_other_and_a_hold_releases_once) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, use_awaitable);
    mutex a(s, "re"), b(s, "re");
    mutex::hold none;
    auto [nl] = co_await none.async_release(asio::as_tuple(use_awaitable));
    BOOST_TEST(nl == asio::error::bad_descriptor, nl.message());
    auto ha = co_await a.async_lock(use_awaitable);
    auto [tl, refused] = co_await b.async_try_lock(asio::as_tuple(use_awaitable));
    BOOST_TEST(tl == error::locked);
    BOOST_TEST(!refused);
    auto got_b = acquiring<mutex::hold>();
    b.async_lock(record(got_b));
    co_await sleep_for(100ms);
    BOOST_TEST(!got_b->ec.has_value());  // waits behind a, although it is the same session
    BOOST_TEST(!got_b->hold);
    auto token = ha.fencing_token();
    auto seq = ha.local_sequence();
    co_await ha.async_release(use_awaitable);
    for (int i = 0; i < 100 && !got_b->ec.has_value(); ++i) co_await sleep_for(1ms);
    BOOST_TEST_REQUIRE(got_b->ec.has_value());
    BOOST_TEST(!*got_b->ec);
    auto& hb = got_b->hold;
    BOOST_TEST(bool(hb));
    BOOST_TEST(!ha);
    // A local hand-off keeps the session's key; a read its token, so the fence moved first (#34).
    BOOST_TEST(hb.fencing_token() > token);
    BOOST_TEST(hb.local_sequence() == seq + 1);
    BOOST_TEST(co_await count_keys(c, "re/") == 1);
    auto [nl2] = co_await ha.async_release(asio::as_tuple(use_awaitable));
    BOOST_TEST(nl2 == error::not_locked, nl2.message());  // a gave it up; b holds
    BOOST_TEST(bool(hb));
    // A fence from the hold that is over never passes; the holder's does.
    auto fenced = [&](mutex::hold& h) -> asio::awaitable<bool> {
      auto r = co_await c.async_txn(txn().when(h.fence()).then(txn_op::put("re-fenced", "x")), use_awaitable);
      co_return r.succeeded;
    };
    BOOST_TEST(!co_await fenced(ha));
    BOOST_TEST(co_await fenced(hb));
    co_await hb.async_release(use_awaitable);
    BOOST_TEST(!co_await fenced(hb));
    co_await c.async_delete("re-fenced", use_awaitable);
    co_await expect_no_keys(c, "re");
  }(c));
}

// Two mutexes of one session share a key. A lock taken while the other's unlock is still on the
// wire must not adopt the key that delete is about to remove: it waits for the delete and puts
// a fresh key.
BOOST_AUTO_TEST_CASE(a_lock_right_after_a_shared_key_unlock_keeps_its_key) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, use_awaitable);
    mutex a(s, "handback"), b(s, "handback");
    for (int i = 0; i < 20; ++i) {
      auto ha = co_await a.async_lock(use_awaitable);
      auto old_token = ha.fencing_token();
      auto unlocked = std::make_shared<bool>(false);
      ha.async_release([unlocked](error_code ec) {  // not awaited
        BOOST_TEST(!ec, ec.message());
        *unlocked = true;
      });
      auto hb = co_await b.async_lock(use_awaitable);
      // Look only once the unlock has completed and nothing of this client is on the wire: its
      // delete has then landed, however slow the machine (a fixed pause let a slow one look
      // before a delete that was about to remove b's key).
      BOOST_TEST_REQUIRE(co_await eventually([&] { return *unlocked && c.stats().rpcs_in_flight == 0; }, 5000ms),
                         "round " << i << ": the unlock did not complete");
      auto mine = co_await c.async_get(hb.key(), get_options{}, use_awaitable);
      BOOST_TEST_REQUIRE(mine.kvs.size() == 1u, "round " << i << ": b's key was removed");
      BOOST_TEST(mine.kvs.front().create_revision == hb.fencing_token());
      BOOST_TEST(hb.fencing_token() > old_token);
      co_await hb.async_release(use_awaitable);
    }
    co_await expect_no_keys(c, "handback");
  }(c));
}

BOOST_AUTO_TEST_CASE(a_name_that_prefixes_another_does_not_interfere) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto s1 = co_await session::async_create(c, use_awaitable);
    auto s2 = co_await session::async_create(c, use_awaitable);
    mutex lock(s1, "lock"), lock_a(s2, "lockA");
    auto held = co_await lock.async_lock(use_awaitable);
    auto held_a = co_await lock_a.async_try_lock(use_awaitable);  // would fail if "lock" covered "lockA"
    BOOST_TEST(bool(held_a));
    co_await held_a.async_release(use_awaitable);
    co_await held.async_release(use_awaitable);
    co_await expect_no_keys(c, "lock");
    co_await expect_no_keys(c, "lockA");
  }(c));
}

BOOST_AUTO_TEST_CASE(with_lock_returns_rethrows_and_always_unlocks) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, use_awaitable);
    mutex m(s, "wl");
    // The body sees its hold; a fence it builds stops passing once with_lock has released it.
    std::optional<compare> fence;
    auto answer = [&](mutex::hold& h) -> asio::awaitable<int> {
      BOOST_TEST(bool(h));
      fence = h.fence();
      co_return 42;
    };
    int v = co_await with_lock(m, std::move(answer));
    BOOST_TEST(v == 42);
    BOOST_TEST_REQUIRE(fence.has_value());
    auto after = co_await c.async_txn(txn().when(*fence).then(txn_op::put("wl-fenced", "x")), use_awaitable);
    BOOST_TEST(!after.succeeded, "the body's fence passed after with_lock returned");
    BOOST_TEST(co_await count_keys(c, "wl/") == 0);

    bool thrown = false;
    auto failing = []() -> asio::awaitable<void> {
      throw std::runtime_error("body failed");
      co_return;
    };
    try {
      co_await with_lock(m, std::move(failing));
    } catch (const std::runtime_error&) {
      thrown = true;
    }
    BOOST_TEST(thrown);
    BOOST_TEST(co_await count_keys(c, "wl/") == 0);

    // Past max_hold the body is cancelled and with_lock says why.
    auto t0 = std::chrono::steady_clock::now();
    error_code why;
    auto slow = []() -> asio::awaitable<void> { co_await sleep_for(10s); };
    const with_lock_options short_hold{.max_hold = 300ms};
    try {
      co_await with_lock(m, std::move(slow), short_hold);
    } catch (const boost::system::system_error& e) {
      why = e.code();
    }
    BOOST_TEST(why == error::max_hold_exceeded, why.message());
    BOOST_TEST((std::chrono::steady_clock::now() - t0 < 3s));
    BOOST_TEST(co_await count_keys(c, "wl/") == 0);
    BOOST_TEST(co_await count_keys(c, "wl-fenced") == 0);
  }(c));
}

BOOST_AUTO_TEST_CASE(with_lock_body_is_cancelled_when_the_holders_lease_is_revoked) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto holder_s = co_await session::async_create(c, session_options{.ttl = 3s}, use_awaitable);
    auto next_s = co_await session::async_create(c, use_awaitable);
    mutex holder(holder_s, "wl-lost"), next(next_s, "wl-lost");
    auto outcome = std::make_shared<std::optional<error_code>>();
    auto body_cancelled = std::make_shared<bool>(false);
    auto body_held = std::make_shared<bool>(false);  // the body's hold, as the body saw it
    // The executor is fetched in its own statement: with a co_await in the co_spawn call, g++ 12
    // destroys the [outcome] closure twice and frees `outcome` under our feet (seen by valgrind).
    auto ex = co_await asio::this_coro::executor;
    asio::co_spawn(
        ex,
        [](mutex& m, std::shared_ptr<bool> body_cancelled, std::shared_ptr<bool> body_held) -> asio::awaitable<void> {
          // Named, not written inside the co_await: g++ 12 destroys such closures twice (docs/how-it-works.md).
          auto body = [body_cancelled, body_held](mutex::hold& h) -> asio::awaitable<void> {
            *body_held = bool(h);
            try {
              co_await sleep_for(30s);
            } catch (const boost::system::system_error&) {
              *body_cancelled = true;
              throw;
            }
          };
          co_await with_lock(m, std::move(body));
        }(holder, body_cancelled, body_held),
        [outcome](std::exception_ptr e) {
          try {
            if (e) std::rethrow_exception(e);
            *outcome = error_code();
          } catch (const boost::system::system_error& se) {
            *outcome = se.code();
          }
        });
    co_await sleep_for(300ms);
    BOOST_TEST(*body_held);
    BOOST_TEST(!outcome->has_value());  // still in the body
    auto waiter = acquiring<mutex::hold>();
    next.async_lock(record(waiter));
    auto r = etcdctl(server(), "lease revoke " + hex(holder_s.lease()));
    BOOST_TEST_REQUIRE(r.exit_code == 0, r.output);
    for (int i = 0; i < 300 && !(outcome->has_value() && waiter->ec.has_value()); ++i) co_await sleep_for(10ms);
    BOOST_TEST_REQUIRE(waiter->ec.has_value());
    BOOST_TEST(!*waiter->ec);  // the next waiter acquired
    BOOST_TEST(bool(waiter->hold));
    BOOST_TEST_REQUIRE(outcome->has_value());
    BOOST_TEST(**outcome == error::session_lost, (*outcome)->message());
    BOOST_TEST(*body_cancelled);
    co_await waiter->hold.async_release(use_awaitable);
    co_await expect_no_keys(c, "wl-lost");
  }(c));
}
