// multi_lock against a real etcd: all or none, no deadlock between holders that list the same
// names in opposite orders, release of the parts taken when a lock fails, is cancelled or finds
// a part busy, rw_mutex sides as parts, bad input, a second lock of one object, the hold (not the
// object) releasing, and the loss of a part's session.
#define BOOST_TEST_MODULE coetcd_multi_lock
#include "support/fixture.hpp"

#include <coetcd/multi_lock.hpp>
#include <coetcd/with_lock.hpp>

#include <boost/asio/experimental/awaitable_operators.hpp>

#include <map>
#include <memory>
#include <vector>

using namespace coetcd;
using namespace coetcd::test;
using namespace std::chrono_literals;
using namespace boost::asio::experimental::awaitable_operators;

BOOST_TEST_GLOBAL_FIXTURE(shared_etcd);

// Two clients (two connections, as two processes would have), 8 sessions: half list the names
// a, b, c and half c, b, a, while 2 more sessions take b alone. Every round completes (no
// deadlock), and no name is ever held by two of them.
BOOST_AUTO_TEST_CASE(opposite_orders_never_deadlock) {
  asio::io_context ioc;
  client c1(ioc, options_for(server())), c2(ioc, options_for(server()));
  struct tally {
    std::map<std::string, int> inside;
    int violations = 0, errors = 0, done = 0, rounds = 0;
    std::string first_error;
  };
  auto st = std::make_shared<tally>();
  constexpr int multi_workers = 8, single_workers = 2, rounds = 8;
  auto multi = [](client& c, std::shared_ptr<tally> st, bool reversed) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, use_awaitable);
    mutex a(s, "ml-a"), b(s, "ml-b"), cc(s, "ml-c");
    multi_lock all = reversed ? multi_lock({cc, b, a}) : multi_lock({a, b, cc});
    BOOST_TEST((all.names() == std::vector<std::string>{"ml-a", "ml-b", "ml-c"}));
    for (int i = 0; i < rounds; ++i) {
      auto [ec, held] = co_await all.async_lock(asio::as_tuple(use_awaitable));
      if (ec) {
        if (st->errors++ == 0) st->first_error = ec.message();
        break;
      }
      for (auto n : {"ml-a", "ml-b", "ml-c"})
        if (st->inside[n]++ > 0) ++st->violations;
      BOOST_TEST(bool(held));
      BOOST_TEST((held.names() == std::vector<std::string>{"ml-a", "ml-b", "ml-c"}));
      co_await sleep_for(1ms);
      for (auto n : {"ml-a", "ml-b", "ml-c"}) --st->inside[n];
      co_await held.async_release(use_awaitable);
      ++st->rounds;
    }
    co_await s.async_close(use_awaitable);
    ++st->done;
  };
  auto single = [](client& c, std::shared_ptr<tally> st) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, use_awaitable);
    mutex b(s, "ml-b");
    for (int i = 0; i < rounds; ++i) {
      auto held = co_await b.async_lock(use_awaitable);
      if (st->inside["ml-b"]++ > 0) ++st->violations;
      co_await sleep_for(1ms);
      --st->inside["ml-b"];
      co_await held.async_release(use_awaitable);
    }
    co_await s.async_close(use_awaitable);
    ++st->done;
  };
  for (int i = 0; i < multi_workers; ++i) asio::co_spawn(ioc, multi(i % 2 ? c2 : c1, st, i % 2 == 1), asio::detached);
  for (int i = 0; i < single_workers; ++i) asio::co_spawn(ioc, single(i % 2 ? c1 : c2, st), asio::detached);
  run_for(ioc, [](client& c, std::shared_ptr<tally> st) -> asio::awaitable<void> {
    std::function<bool()> all_done = [st] { return st->done == multi_workers + single_workers; };
    BOOST_TEST_REQUIRE(co_await eventually(std::move(all_done), 50s), "a deadlock? rounds done: " << st->rounds);
    BOOST_TEST(st->violations == 0);
    BOOST_TEST(st->errors == 0, st->first_error);
    BOOST_TEST(st->rounds == multi_workers * rounds);
    for (auto n : {"ml-a", "ml-b", "ml-c"}) co_await expect_no_keys(c, n);
  }(c1, st), 60s);
}

// A lock cancelled while it waits for its second part (at every delay from 0 to 6 ms, then after
// 300 ms) releases the first before it completes; later it takes both, and its hold's fences
// pass in a txn until it is released.
BOOST_AUTO_TEST_CASE(cancelled_part_way_releases_what_it_took) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto so = co_await session::async_create(c, use_awaitable);
    auto s = co_await session::async_create(c, use_awaitable);
    mutex other(so, "ml-y");
    auto theirs = co_await other.async_lock(use_awaitable);
    mutex x(s, "ml-x"), y(s, "ml-y");
    multi_lock both({y, x});
    for (int d : {0, 1, 2, 3, 4, 5, 6, 300}) {
      auto r = co_await (both.async_lock(use_awaitable) || sleep_for(std::chrono::milliseconds(d)));
      BOOST_TEST(r.index() == 1u);
      BOOST_TEST(co_await settled_keys(c, "ml-x/", 0) == 0, "delay " << d << " ms");
      BOOST_TEST(co_await settled_keys(c, "ml-y/", 1) == 1, "delay " << d << " ms");
    }
    auto w = acquiring<multi_lock::hold>();
    both.async_lock(record(w));
    co_await sleep_for(100ms);
    BOOST_TEST(!w->ec.has_value());
    co_await theirs.async_release(use_awaitable);
    BOOST_TEST_REQUIRE(co_await settled(w));
    BOOST_TEST(!*w->ec, w->ec->message());
    BOOST_TEST(bool(w->hold));
    BOOST_TEST((w->hold.names() == std::vector<std::string>{"ml-x", "ml-y"}));
    const auto tokens = w->hold.fencing_tokens();
    BOOST_TEST_REQUIRE(tokens.size() == 2u);
    BOOST_TEST(tokens[0] > 0);
    BOOST_TEST(tokens[1] > 0);
    BOOST_TEST(co_await count_keys(c, "ml-x/") == 1);
    const auto fence = w->hold.fence();
    BOOST_TEST(fence.size() == 2u);
    auto fenced = co_await c.async_txn(txn().when(fence).then(txn_op::put("ml-data", "1")), use_awaitable);
    BOOST_TEST(fenced.succeeded);
    co_await w->hold.async_release(use_awaitable);
    BOOST_TEST(!w->hold);
    auto stale = co_await c.async_txn(txn().when(fence).then(txn_op::put("ml-data", "2")), use_awaitable);
    BOOST_TEST(!stale.succeeded);
    auto [e] = co_await w->hold.async_release(asio::as_tuple(use_awaitable));
    BOOST_TEST(e == error::not_locked, e.message());
    multi_lock::hold none;
    auto [e2] = co_await none.async_release(asio::as_tuple(use_awaitable));
    BOOST_TEST(e2 == asio::error::bad_descriptor, e2.message());
    co_await c.async_delete("ml-data", use_awaitable);
    co_await expect_no_keys(c, "ml-x");
    co_await expect_no_keys(c, "ml-y");
  }(c));
}

// A part that fails (its session's lease revoked while it waits) fails the lock, and the part
// taken before it is released.
BOOST_AUTO_TEST_CASE(a_failed_part_releases_the_parts_taken) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto so = co_await session::async_create(c, use_awaitable);
    auto sa = co_await session::async_create(c, use_awaitable);
    auto sb = co_await session::async_create(c, session_options{.ttl = 3s}, use_awaitable);
    mutex other(so, "ml-q2");
    auto theirs = co_await other.async_lock(use_awaitable);
    mutex p1(sa, "ml-q1"), p2(sb, "ml-q2");
    multi_lock both({p2, p1});
    auto w = acquiring<multi_lock::hold>();
    both.async_lock(record(w));
    BOOST_TEST(co_await settled_keys(c, "ml-q1/", 1) == 1);  // the first part is held
    auto rev = etcdctl(server(), "lease revoke " + hex(sb.lease()));
    BOOST_TEST_REQUIRE(rev.exit_code == 0, rev.output);
    BOOST_TEST_REQUIRE(co_await settled(w));
    BOOST_TEST(*w->ec == error::session_lost, w->ec->message());
    BOOST_TEST(!w->hold);
    BOOST_TEST(co_await settled_keys(c, "ml-q1/", 0) == 0);
    co_await theirs.async_release(use_awaitable);
    co_await expect_no_keys(c, "ml-q2");
  }(c));
}

// try_lock takes all or nothing at once; rw_mutex sides are parts (a shared part lets other
// readers in, an exclusive one nobody).
BOOST_AUTO_TEST_CASE(try_lock_and_rw_mutex_parts) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, use_awaitable);
    auto so = co_await session::async_create(c, use_awaitable);
    rw_mutex config(s, "ml-config"), other_config(so, "ml-config");
    mutex job(s, "ml-job"), other_job(so, "ml-job");
    multi_lock read_and_run({job, multi_lock::part::shared(config)});
    auto theirs = co_await other_job.async_lock(use_awaitable);
    auto [e, none] = co_await read_and_run.async_try_lock(asio::as_tuple(use_awaitable));
    BOOST_TEST(e == error::locked, e.message());
    BOOST_TEST(!none);
    BOOST_TEST(co_await settled_keys(c, "ml-config/", 0) == 0);  // the shared part, taken first, is let go
    co_await theirs.async_release(use_awaitable);
    auto reading = co_await read_and_run.async_try_lock(use_awaitable);
    BOOST_TEST(bool(reading));
    BOOST_TEST(co_await count_keys(c, "ml-config/read/") == 1);
    auto other_reading = co_await other_config.async_try_lock_shared(use_awaitable);  // readers share
    BOOST_TEST(bool(other_reading));
    auto [w, no_writer] = co_await other_config.async_try_lock(asio::as_tuple(use_awaitable));
    BOOST_TEST(w == error::locked, w.message());
    BOOST_TEST(!no_writer);
    co_await other_reading.async_release(use_awaitable);
    // Not reentrant: a second lock of the same object waits (its shared part joins our read key,
    // its mutex part queues behind our hold) where it used to fail with invalid_argument.
    auto again = co_await (read_and_run.async_lock(use_awaitable) || sleep_for(300ms));
    BOOST_TEST(again.index() == 1u, "a second lock of one multi_lock did not wait for its hold");
    BOOST_TEST(bool(reading));
    BOOST_TEST(co_await settled_keys(c, "ml-config/read/", 1) == 1);  // the cancelled lock let go of its share only
    co_await reading.async_release(use_awaitable);
    multi_lock write_and_run({multi_lock::part::exclusive(config), job});
    auto writing = co_await write_and_run.async_lock(use_awaitable);
    BOOST_TEST(bool(writing));
    BOOST_TEST(co_await count_keys(c, "ml-config/write/") == 1);
    auto [r, no_reader] = co_await other_config.async_try_lock_shared(asio::as_tuple(use_awaitable));
    BOOST_TEST(r == error::locked, r.message());
    BOOST_TEST(!no_reader);
    co_await writing.async_release(use_awaitable);
    co_await expect_no_keys(c, "ml-config");
    co_await expect_no_keys(c, "ml-job");
  }(c));
}

// A second lock of one multi_lock while its first hold lasts waits, as a second caller of a mutex
// does (it failed at once with invalid_argument before), and holds once that hold is released;
// the first hold's fence then fails under the second.
BOOST_AUTO_TEST_CASE(a_second_lock_of_one_multi_lock_waits_for_the_first_hold) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, use_awaitable);
    mutex a(s, "ml-w1"), b(s, "ml-w2");
    multi_lock both({b, a});
    auto first = co_await both.async_lock(use_awaitable);
    const auto first_fence = first.fence();
    auto w = acquiring<multi_lock::hold>();
    both.async_lock(record(w));
    co_await sleep_for(300ms);
    BOOST_TEST_REQUIRE(!w->ec.has_value(), "the second lock of one multi_lock did not wait for the first hold");
    BOOST_TEST(bool(first));
    auto fenced = co_await c.async_txn(txn().when(first_fence).then(txn_op::put("ml-w-data", "first")), use_awaitable);
    BOOST_TEST(fenced.succeeded);
    co_await first.async_release(use_awaitable);
    BOOST_TEST_REQUIRE(co_await settled(w));
    BOOST_TEST(!*w->ec, w->ec->message());
    BOOST_TEST(bool(w->hold));
    BOOST_TEST(!first);
    BOOST_TEST(co_await count_keys(c, "ml-w1/") == 1);
    BOOST_TEST(co_await count_keys(c, "ml-w2/") == 1);
    auto stale = co_await c.async_txn(txn().when(first_fence).then(txn_op::put("ml-w-data", "stale")), use_awaitable);
    BOOST_TEST(!stale.succeeded, "the first hold's fence passed under the second");
    auto own = co_await c.async_txn(txn().when(w->hold.fence()).then(txn_op::put("ml-w-data", "second")), use_awaitable);
    BOOST_TEST(own.succeeded);
    co_await w->hold.async_release(use_awaitable);
    co_await c.async_delete("ml-w-data", use_awaitable);
    co_await expect_no_keys(c, "ml-w1");
    co_await expect_no_keys(c, "ml-w2");
  }(c));
}

// No parts, or one name twice (also as two sides of one rw_mutex), is refused at construction.
// A multi_lock destroyed while its hold lasts leaves the hold alone; destroying the hold
// releases its parts.
BOOST_AUTO_TEST_CASE(bad_lists_are_refused_and_a_destroyed_hold_releases) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, use_awaitable);
    mutex a(s, "ml-d1"), a2(s, "ml-d1"), b(s, "ml-d2");
    rw_mutex rw(s, "ml-d3");
    BOOST_TEST(thrown_code([] { multi_lock({}); }) == error::invalid_argument);
    BOOST_TEST(thrown_code([&] { multi_lock({a, b, a2}); }) == error::invalid_argument);
    BOOST_TEST(thrown_code([&] { multi_lock({multi_lock::part::shared(rw), multi_lock::part::exclusive(rw)}); }) ==
               error::invalid_argument);
    multi_lock::hold kept;
    {
      multi_lock both({b, a});
      kept = co_await both.async_lock(use_awaitable);
      BOOST_TEST(co_await count_keys(c, "ml-d1/") == 1);
    }
    co_await sleep_for(100ms);  // a release the object's end started would be done by now
    BOOST_TEST(bool(kept));
    BOOST_TEST(co_await count_keys(c, "ml-d1/") == 1, "destroying the multi_lock released its hold");
    BOOST_TEST(co_await count_keys(c, "ml-d2/") == 1);
    auto fenced = co_await c.async_txn(txn().when(kept.fence()).then(txn_op::put("ml-d-data", "1")), use_awaitable);
    BOOST_TEST(fenced.succeeded);
    kept = multi_lock::hold();  // the hold destroyed: released in the background
    BOOST_TEST(co_await settled_keys(c, "ml-d1/", 0) == 0);
    BOOST_TEST(co_await settled_keys(c, "ml-d2/", 0) == 0);
    auto after = co_await a.async_try_lock(use_awaitable);
    BOOST_TEST(bool(after));
    co_await after.async_release(use_awaitable);
    co_await c.async_delete("ml-d-data", use_awaitable);
    co_await expect_no_keys(c, "ml-d1");
  }(c));
}

// A multi_lock's hold is told when any part's session is lost: async_wait_lost succeeds with the
// loss's reason (it stays pending while every session lives, and ends with operation_aborted
// when cancelled or when the hold is released first), and with_lock cancels its body and throws
// session_lost, releasing the parts still held.
BOOST_AUTO_TEST_CASE(a_lost_part_is_told_and_with_lock_stops_its_body) {
  asio::io_context ioc;
  client c(ioc, options_for(server())), c2(ioc, options_for(server()));
  run_for(ioc, [](client& c, client& c2) -> asio::awaitable<void> {
    auto sa = co_await session::async_create(c, use_awaitable);
    // A short TTL: a revoked lease is noticed at the next renewal (TTL/3).
    auto sb = co_await session::async_create(c, session_options{.ttl = 6s}, use_awaitable);
    auto sc = co_await session::async_create(c2, use_awaitable);  // a part on another client
    mutex p1(sa, "ml-l1"), p2(sb, "ml-l2"), p3(sc, "ml-l3");
    multi_lock all({p3, p2, p1});

    // Pending while the sessions live; a cancelled wait (partial, the weakest kind) ends with
    // operation_aborted, and so does one pending when the hold is released.
    auto held = co_await all.async_lock(use_awaitable);
    asio::cancellation_signal stop;
    auto cancelled = waiting_for_loss(), ended = waiting_for_loss();
    held.async_wait_lost(asio::bind_cancellation_slot(stop.slot(), record(cancelled)));
    co_await sleep_for(200ms);
    BOOST_TEST(!cancelled->has_value());
    stop.emit(asio::cancellation_type::partial);
    BOOST_TEST_REQUIRE(co_await settled(cancelled));
    BOOST_TEST((*cancelled)->ec == asio::error::operation_aborted, (*cancelled)->ec.message());
    held.async_wait_lost(record(ended));
    co_await held.async_release(use_awaitable);
    BOOST_TEST_REQUIRE(co_await settled(ended));
    BOOST_TEST((*ended)->ec == asio::error::operation_aborted, (*ended)->ec.message());

    // with_lock: the body waits; losing sb's lease (the middle part's) stops it.
    auto body_started = std::make_shared<bool>(false);
    auto body_cancelled = std::make_shared<bool>(false);
    auto lost = waiting_for_loss();
    auto body = [body_started, body_cancelled, lost](multi_lock::hold& h) -> asio::awaitable<void> {
      *body_started = true;
      h.async_wait_lost(record(lost));
      try {
        co_await sleep_for(30s);
      } catch (const boost::system::system_error&) {
        *body_cancelled = true;
        throw;
      }
    };
    auto thrown = started();
    auto run = [&all, body = std::move(body), thrown]() mutable -> asio::awaitable<void> {
      try {
        co_await with_lock(all, std::move(body));
        *thrown = error_code{};
      } catch (const boost::system::system_error& e) {
        *thrown = e.code();
      }
    };
    asio::co_spawn(c.get_executor(), std::move(run), asio::detached);
    std::function<bool()> inside = [body_started] { return *body_started; };
    BOOST_TEST_REQUIRE(co_await eventually(std::move(inside), 5s));
    BOOST_TEST(co_await count_keys(c, "ml-l1/") == 1);
    BOOST_TEST(co_await count_keys(c, "ml-l3/") == 1);
    auto rev = etcdctl(server(), "lease revoke " + hex(sb.lease()));
    BOOST_TEST_REQUIRE(rev.exit_code == 0, rev.output);
    BOOST_TEST_REQUIRE(co_await settled(thrown));
    BOOST_TEST(**thrown == error::session_lost, (*thrown)->message());
    BOOST_TEST(*body_cancelled);
    BOOST_TEST_REQUIRE(co_await settled(lost));
    BOOST_TEST(!(*lost)->ec, (*lost)->ec.message());
    BOOST_TEST((*lost)->reason.cause == error::lease_not_found, (*lost)->reason.cause.message());  // the revoke, as session::async_wait_lost
    // The parts of the live sessions were released on the way out.
    BOOST_TEST(co_await settled_keys(c, "ml-l1/", 0) == 0);
    BOOST_TEST(co_await settled_keys(c, "ml-l3/", 0) == 0);
  }(c, c2));
}

// A hold whose part's session is lost: the parts' fences (built before, in one txn) fail at once,
// since etcd deleted that part's key with its lease; the hold turns false, its loss wait succeeds
// with the revoke's reason (a new one at once), and its release reports the lost part
// (session_lost) while releasing the live one.
BOOST_AUTO_TEST_CASE(a_lost_parts_fence_fails_in_a_txn) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto sa = co_await session::async_create(c, use_awaitable);
    auto sb = co_await session::async_create(c, session_options{.ttl = 6s}, use_awaitable);
    mutex p1(sa, "ml-f1"), p2(sb, "ml-f2");
    multi_lock both({p2, p1});
    auto held = co_await both.async_lock(use_awaitable);
    const auto fence = held.fence();
    BOOST_TEST_REQUIRE(fence.size() == 2u);
    auto before = co_await c.async_txn(txn().when(fence).then(txn_op::put("ml-f-data", "held")), use_awaitable);
    BOOST_TEST(before.succeeded);
    auto lost = waiting_for_loss();
    held.async_wait_lost(record(lost));
    auto rev = etcdctl(server(), "lease revoke " + hex(sb.lease()));
    BOOST_TEST_REQUIRE(rev.exit_code == 0, rev.output);
    auto after = co_await c.async_txn(txn().when(fence).then(txn_op::put("ml-f-data", "lost")), use_awaitable);
    BOOST_TEST(!after.succeeded, "a txn fenced by a hold whose part was lost passed");
    BOOST_TEST(co_await value_of(c, "ml-f-data") == "held");
    BOOST_TEST_REQUIRE(co_await settled(lost));
    BOOST_TEST(!(*lost)->ec, (*lost)->ec.message());
    BOOST_TEST((*lost)->reason.cause == error::lease_not_found, (*lost)->reason.cause.message());
    BOOST_TEST(!held);
    auto rebuilt = co_await c.async_txn(txn().when(held.fence()).then(txn_op::put("ml-f-data", "rebuilt")), use_awaitable);
    BOOST_TEST(!rebuilt.succeeded);
    auto again = waiting_for_loss();
    held.async_wait_lost(record(again));
    BOOST_TEST_REQUIRE(co_await settled(again, 1s));
    BOOST_TEST(!(*again)->ec, (*again)->ec.message());
    BOOST_TEST((*again)->reason.cause == error::lease_not_found, (*again)->reason.cause.message());
    auto [released] = co_await held.async_release(asio::as_tuple(use_awaitable));
    BOOST_TEST(released == error::session_lost, released.message());
    BOOST_TEST(co_await settled_keys(c, "ml-f1/", 0) == 0);
    co_await c.async_delete("ml-f-data", use_awaitable);
    co_await expect_no_keys(c, "ml-f2");
  }(c));
}
