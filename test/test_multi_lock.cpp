// multi_lock against a real etcd: all or none, no deadlock between holders that list the same
// names in opposite orders, release of the parts taken when a lock fails, is cancelled or finds
// a part busy, rw_mutex sides as parts, bad input, and the loss of a part's session.
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
      auto [ec] = co_await all.async_lock(asio::as_tuple(use_awaitable));
      if (ec) {
        if (st->errors++ == 0) st->first_error = ec.message();
        break;
      }
      for (auto n : {"ml-a", "ml-b", "ml-c"})
        if (st->inside[n]++ > 0) ++st->violations;
      BOOST_TEST((a.held() && b.held() && cc.held()));
      co_await sleep_for(1ms);
      for (auto n : {"ml-a", "ml-b", "ml-c"}) --st->inside[n];
      co_await all.async_unlock(use_awaitable);
      ++st->rounds;
    }
    co_await s.async_close(use_awaitable);
    ++st->done;
  };
  auto single = [](client& c, std::shared_ptr<tally> st) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, use_awaitable);
    mutex b(s, "ml-b");
    for (int i = 0; i < rounds; ++i) {
      co_await b.async_lock(use_awaitable);
      if (st->inside["ml-b"]++ > 0) ++st->violations;
      co_await sleep_for(1ms);
      --st->inside["ml-b"];
      co_await b.async_unlock(use_awaitable);
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
// 300 ms) releases the first before it completes; later it takes both.
BOOST_AUTO_TEST_CASE(cancelled_part_way_releases_what_it_took) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto so = co_await session::async_create(c, use_awaitable);
    auto s = co_await session::async_create(c, use_awaitable);
    mutex other(so, "ml-y");
    co_await other.async_lock(use_awaitable);
    mutex x(s, "ml-x"), y(s, "ml-y");
    multi_lock both({y, x});
    for (int d : {0, 1, 2, 3, 4, 5, 6, 300}) {
      auto r = co_await (both.async_lock(use_awaitable) || sleep_for(std::chrono::milliseconds(d)));
      BOOST_TEST(r.index() == 1u);
      BOOST_TEST(!both.held());
      BOOST_TEST(!x.held());
      BOOST_TEST(co_await settled_keys(c, "ml-x/", 0) == 0, "delay " << d << " ms");
      BOOST_TEST(co_await settled_keys(c, "ml-y/", 1) == 1, "delay " << d << " ms");
    }
    auto w = started();
    both.async_lock(record(w));
    co_await sleep_for(100ms);
    BOOST_TEST(!w->has_value());
    co_await other.async_unlock(use_awaitable);
    BOOST_TEST_REQUIRE(co_await settled(w));
    BOOST_TEST(!**w, (*w)->message());
    BOOST_TEST(both.held());
    BOOST_TEST((x.held() && y.held()));
    BOOST_TEST(x.fencing_token() > 0);
    auto fenced = co_await c.async_txn(txn().when(x.is_owner()).when(y.is_owner()).then(txn_op::put("ml-data", "1")),
                                       use_awaitable);
    BOOST_TEST(fenced.succeeded);
    co_await both.async_unlock(use_awaitable);
    BOOST_TEST(!both.held());
    auto [e] = co_await both.async_unlock(asio::as_tuple(use_awaitable));
    BOOST_TEST(e == error::not_locked, e.message());
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
    co_await other.async_lock(use_awaitable);
    mutex p1(sa, "ml-q1"), p2(sb, "ml-q2");
    multi_lock both({p2, p1});
    auto w = started();
    both.async_lock(record(w));
    BOOST_TEST(co_await settled_keys(c, "ml-q1/", 1) == 1);  // the first part is held
    auto rev = etcdctl(server(), "lease revoke " + hex(sb.lease()));
    BOOST_TEST_REQUIRE(rev.exit_code == 0, rev.output);
    BOOST_TEST_REQUIRE(co_await settled(w));
    BOOST_TEST(**w == error::session_lost, (*w)->message());
    BOOST_TEST(!both.held());
    BOOST_TEST(!p1.held());
    BOOST_TEST(co_await settled_keys(c, "ml-q1/", 0) == 0);
    co_await other.async_unlock(use_awaitable);
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
    co_await other_job.async_lock(use_awaitable);
    auto [e] = co_await read_and_run.async_try_lock(asio::as_tuple(use_awaitable));
    BOOST_TEST(e == error::locked, e.message());
    BOOST_TEST(co_await settled_keys(c, "ml-config/", 0) == 0);  // the shared part, taken first, is let go
    co_await other_job.async_unlock(use_awaitable);
    co_await read_and_run.async_try_lock(use_awaitable);
    BOOST_TEST(config.shared_holds() == 1);
    co_await other_config.async_try_lock_shared(use_awaitable);  // readers share
    auto [w] = co_await other_config.async_try_lock(asio::as_tuple(use_awaitable));
    BOOST_TEST(w == error::locked, w.message());
    co_await other_config.async_unlock_shared(use_awaitable);
    auto [again] = co_await read_and_run.async_lock(asio::as_tuple(use_awaitable));  // not reentrant
    BOOST_TEST(again == error::invalid_argument, again.message());
    co_await read_and_run.async_unlock(use_awaitable);
    multi_lock write_and_run({multi_lock::part::exclusive(config), job});
    co_await write_and_run.async_lock(use_awaitable);
    BOOST_TEST(config.held());
    auto [r] = co_await other_config.async_try_lock_shared(asio::as_tuple(use_awaitable));
    BOOST_TEST(r == error::locked, r.message());
    co_await write_and_run.async_unlock(use_awaitable);
    co_await expect_no_keys(c, "ml-config");
    co_await expect_no_keys(c, "ml-job");
  }(c));
}

// No parts, or one name twice (also as two sides of one rw_mutex), is refused at construction;
// a multi_lock destroyed while it holds releases its parts.
BOOST_AUTO_TEST_CASE(bad_lists_are_refused_and_a_destroyed_holder_releases) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, use_awaitable);
    mutex a(s, "ml-d1"), a2(s, "ml-d1"), b(s, "ml-d2");
    rw_mutex rw(s, "ml-d3");
    auto code_of = [](auto make) {
      try {
        make();
      } catch (const boost::system::system_error& e) {
        return e.code();
      }
      return error_code{};
    };
    BOOST_TEST(code_of([] { multi_lock({}); }) == error::invalid_argument);
    BOOST_TEST(code_of([&] { multi_lock({a, b, a2}); }) == error::invalid_argument);
    BOOST_TEST(code_of([&] { multi_lock({multi_lock::part::shared(rw), multi_lock::part::exclusive(rw)}); }) ==
               error::invalid_argument);
    {
      multi_lock both({b, a});
      co_await both.async_lock(use_awaitable);
      BOOST_TEST(co_await count_keys(c, "ml-d1/") == 1);
    }
    BOOST_TEST(co_await settled_keys(c, "ml-d1/", 0) == 0);
    BOOST_TEST(co_await settled_keys(c, "ml-d2/", 0) == 0);
    BOOST_TEST(!a.held());
  }(c));
}

// A multi_lock is told when any part's session is lost: async_wait_lost completes with the
// loss's reason (it stays pending while every session lives, and can be cancelled), and
// with_lock cancels its body and throws session_lost, releasing the parts still held.
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
    // operation_aborted.
    co_await all.async_lock(use_awaitable);
    asio::cancellation_signal stop;
    auto cancelled = started();
    all.async_wait_lost(asio::bind_cancellation_slot(stop.slot(), record(cancelled)));
    co_await sleep_for(200ms);
    BOOST_TEST(!cancelled->has_value());
    stop.emit(asio::cancellation_type::partial);
    BOOST_TEST_REQUIRE(co_await settled(cancelled));
    BOOST_TEST(**cancelled == asio::error::operation_aborted, (*cancelled)->message());
    co_await all.async_unlock(use_awaitable);

    // with_lock: the body waits; losing sb's lease (the middle part's) stops it.
    auto body_started = std::make_shared<bool>(false);
    auto body_cancelled = std::make_shared<bool>(false);
    auto body = [body_started, body_cancelled]() -> asio::awaitable<void> {
      *body_started = true;
      try {
        co_await sleep_for(30s);
      } catch (const boost::system::system_error&) {
        *body_cancelled = true;
        throw;
      }
    };
    auto lost = started();
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
    all.async_wait_lost(record(lost));
    BOOST_TEST(co_await count_keys(c, "ml-l1/") == 1);
    BOOST_TEST(co_await count_keys(c, "ml-l3/") == 1);
    auto rev = etcdctl(server(), "lease revoke " + hex(sb.lease()));
    BOOST_TEST_REQUIRE(rev.exit_code == 0, rev.output);
    BOOST_TEST_REQUIRE(co_await settled(thrown));
    BOOST_TEST(**thrown == error::session_lost, (*thrown)->message());
    BOOST_TEST(*body_cancelled);
    BOOST_TEST_REQUIRE(co_await settled(lost));
    BOOST_TEST(**lost == error::lease_not_found, (*lost)->message());  // the revoke, as session::async_wait_lost
    BOOST_TEST(!all.held());
    // The parts of the live session were released on the way out.
    BOOST_TEST(co_await settled_keys(c, "ml-l1/", 0) == 0);
    BOOST_TEST(co_await settled_keys(c, "ml-l3/", 0) == 0);
    BOOST_TEST(!p1.held());
    BOOST_TEST(!p3.held());
    // Lost already: a new wait completes at once.
    auto again = started();
    all.async_wait_lost(record(again));
    BOOST_TEST_REQUIRE(co_await settled(again, 1s));
    BOOST_TEST(**again == error::lease_not_found, (*again)->message());
  }(c, c2));
}
