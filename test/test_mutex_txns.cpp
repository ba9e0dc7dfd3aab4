// The mutex's shared txns on a real etcd: locks and releases that meet on the wire, and riders.
#define BOOST_TEST_MODULE coetcd_mutex_txns
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

// Regression: with two sessions taking turns, a waiter is often granted the moment it registers
// (the view already saw the previous owner's delete); that grant must not be lost.
BOOST_AUTO_TEST_CASE(two_sessions_alternating_never_stall) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  auto done = std::make_shared<int>(0);
  auto total = std::make_shared<int>(0);
  auto worker = [](client& c, std::shared_ptr<int> done, std::shared_ptr<int> total) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, use_awaitable);
    mutex m(s, "alternate");
    for (int i = 0; i < 300; ++i) {
      auto held = co_await m.async_lock(use_awaitable);
      ++*total;
      co_await held.async_release(use_awaitable);
    }
    co_await s.async_close(use_awaitable);
    ++*done;
  };
  run_for(ioc, [](client& c, std::shared_ptr<int> done, std::shared_ptr<int> total, auto worker) -> asio::awaitable<void> {
    auto ex = co_await asio::this_coro::executor;
    asio::co_spawn(ex, worker(c, done, total), asio::detached);
    asio::co_spawn(ex, worker(c, done, total), asio::detached);
    while (*done < 2) co_await sleep_for(10ms);
    co_await expect_no_keys(c, "alternate");
  }(c, done, total, worker), 60s);
  BOOST_TEST(*total == 600);
}

// A waiter that re-queues while another local session is about to release rides on that
// release's txn: one revision (one raft commit) per hand-off instead of two, and the rider's
// key never shares a create revision with another waiter's, so exclusion and order hold.
BOOST_AUTO_TEST_CASE(requeue_rides_on_the_next_release) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  struct shared {
    bool inside = false;
    int overlaps = 0, order_violations = 0, acquisitions = 0, done = 0;
    std::int64_t last_token = 0;
  };
  auto st = std::make_shared<shared>();
  constexpr int workers = 4, rounds = 40;
  auto worker = [](session& s, std::shared_ptr<shared> st) -> asio::awaitable<void> {
    mutex m(s, "rider");
    for (int i = 0; i < rounds; ++i) {
      auto held = co_await m.async_lock(use_awaitable);
      if (st->inside) ++st->overlaps;
      if (held.fencing_token() <= st->last_token) ++st->order_violations;
      st->last_token = held.fencing_token();
      st->inside = true;
      co_await asio::post(co_await asio::this_coro::executor, use_awaitable);
      st->inside = false;
      ++st->acquisitions;
      co_await held.async_release(use_awaitable);
    }
    ++st->done;
  };
  std::int64_t revisions = 0;
  run_for(ioc, [](client& c, std::shared_ptr<shared> st, auto worker, std::int64_t& revisions) -> asio::awaitable<void> {
    std::vector<session> sessions;
    for (int i = 0; i < workers; ++i) sessions.push_back(co_await session::async_create(c, use_awaitable));
    auto probe = co_await c.async_get("rider-probe", use_awaitable);
    auto before = probe.header.revision;
    auto ex = co_await asio::this_coro::executor;
    for (auto& s : sessions) asio::co_spawn(ex, worker(s, st), asio::detached);
    while (st->done < workers) co_await sleep_for(10ms);
    probe = co_await c.async_get("rider-probe", use_awaitable);
    revisions = probe.header.revision - before;
    for (auto& s : sessions) co_await s.async_close(use_awaitable);
    co_await expect_no_keys(c, "rider");
  }(c, st, worker, revisions), 120s);
  BOOST_TEST(st->acquisitions == workers * rounds);
  BOOST_TEST(st->overlaps == 0);
  BOOST_TEST(st->order_violations == 0);
  // Without riding every acquisition costs two revisions (put, delete). The bound is loose on
  // purpose: a rider waits at most 3 ms for a release, and a slow (sanitized) build misses some.
  BOOST_TEST_MESSAGE("revisions per acquisition: " << double(revisions) / st->acquisitions);
  BOOST_TEST(revisions < 2 * st->acquisitions * 9 / 10);
}

// A rider whose lease is gone makes etcd refuse the whole combined txn: the holder's release
// is then sent alone, so its key does not stay behind until its lease expires.
BOOST_AUTO_TEST_CASE(a_rider_with_a_revoked_lease_does_not_block_the_release) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    // The rider parks for at most 3 ms (lock_view::park_limit): a pause of fixed length before
    // the unlock let a slow machine send the doomed put alone, so the combined txn this case is
    // about never happened and a library that kept the holder's key behind it passed. So the
    // unlock follows the doomed lock after a few turns of the event loop (no time, no I/O), and
    // the case is repeated until the ride is shown (see `rode` below).
    bool rode = false;
    for (int attempt = 0; attempt < 20 && !rode; ++attempt) {
      auto holder = co_await session::async_create(c, use_awaitable);
      auto waiter = co_await session::async_create(c, use_awaitable);
      auto doomed = co_await session::async_create(c, use_awaitable);
      mutex mh(holder, "rider-lost"), mw(waiter, "rider-lost"), md(doomed, "rider-lost");
      auto held = co_await mh.async_lock(use_awaitable);
      {
        // A release rides only through the name's view, and a lone holder's queue has none: a
        // second caller of the holder's session, cancelled, gives it one. (Without it the case
        // never rode, and passed whatever the release did with a refused rider.)
        mutex mh2(holder, "rider-lost");
        asio::cancellation_signal sig;
        auto r2 = acquiring<mutex::hold>();
        mh2.async_lock(asio::bind_cancellation_slot(sig.slot(), record(r2)));
        co_await asio::post(co_await asio::this_coro::executor, use_awaitable);
        sig.emit(asio::cancellation_type::terminal);
        BOOST_TEST_REQUIRE(co_await eventually([&] { return r2->ec.has_value(); }, 5000ms));
        BOOST_TEST(*r2->ec == asio::error::operation_aborted, r2->ec->message());
        BOOST_TEST(!r2->hold);
      }
      auto rw = acquiring<mutex::hold>();
      mw.async_lock(record(rw));
      // The waiter is queued (its key in etcd, the caller counted): the name now has a view.
      bool queued = false;
      for (auto until = std::chrono::steady_clock::now() + 5s; !queued && std::chrono::steady_clock::now() < until;) {
        auto st = c.stats();
        auto l = std::find_if(st.locks.begin(), st.locks.end(), [](auto& l) { return l.name == "rider-lost"; });
        queued = l != st.locks.end() && l->waiting == 1 && st.watchers > 0 &&
                 co_await count_keys(c, "rider-lost/") == 2;
        if (!queued) co_await sleep_for(5ms);
      }
      BOOST_TEST_REQUIRE(queued, "the waiter's key did not show");
      co_await c.async_lease_revoke(doomed.lease(), use_awaitable);
      auto rd = acquiring<mutex::hold>();
      const auto doomed_at = std::chrono::steady_clock::now();
      md.async_lock(record(rd));  // parks, waiting for the holder's release
      for (int i = 0; i < 20; ++i) co_await asio::post(co_await asio::this_coro::executor, use_awaitable);
      const auto refused_before = c.stats().rpcs["Txn"].failed;
      const bool over_before = rd->ec.has_value();
      // When etcd's first refusal of a txn is seen (no sooner than it happened).
      auto refused_at = std::make_shared<std::optional<std::chrono::steady_clock::time_point>>();
      auto watching = std::make_shared<bool>(true);
      asio::co_spawn(
          co_await asio::this_coro::executor,
          [](client& c, std::uint64_t before, auto refused_at, auto watching) -> asio::awaitable<void> {
            while (*watching && !*refused_at) {
              if (c.stats().rpcs["Txn"].failed > before) *refused_at = std::chrono::steady_clock::now();
              else co_await asio::post(co_await asio::this_coro::executor, use_awaitable);
            }
          }(c, refused_before, refused_at, watching),
          asio::detached);
      auto [ul] = co_await held.async_release(asio::as_tuple(use_awaitable));
      // Riding, the doomed put goes in the release's combined txn, which etcd refuses before the
      // release is sent again alone. Alone, the doomed put leaves no sooner than 3 ms after the
      // doomed lock began (lock_view::park_limit). So a txn refused during the unlock, less than
      // 3 ms after the doomed lock began, can only be the combined one.
      *watching = false;
      const auto refused = c.stats().rpcs["Txn"].failed - refused_before;
      const auto took = *refused_at ? **refused_at - doomed_at : std::chrono::steady_clock::duration::max();
      rode = !over_before && refused == 1 && took < 3ms;
      const double took_ms = std::chrono::duration<double>(took).count() * 1000;
      BOOST_TEST_MESSAGE("attempt " << attempt << ": the doomed lock " << (rode ? "rode the release" : "was not shown to ride")
                                    << " (over before the unlock: " << over_before << ", after: " << rd->ec.has_value()
                                    << ", txns refused during it: " << refused << ", "
                                    << took_ms << " ms from the doomed lock to the refusal)");
      BOOST_TEST(!ul, ul.message());
      BOOST_TEST_REQUIRE(co_await eventually([&] { return rw->ec.has_value() && rd->ec.has_value(); }, 5000ms));
      BOOST_TEST(!*rw->ec, rw->ec->message());
      BOOST_TEST(bool(rw->hold));
      BOOST_TEST(*rd->ec == error::session_lost, rd->ec->message());
      BOOST_TEST(!rd->hold);
      co_await rw->hold.async_release(use_awaitable);
      co_await expect_no_keys(c, "rider-lost");
      co_await holder.async_close(use_awaitable);
      co_await waiter.async_close(use_awaitable);
    }
    BOOST_TEST(rode, "the doomed lock was never shown to ride a release in 20 attempts");
  }(c));
}

// Locks and unlocks of many sessions on different names at once leave in shared txns: one
// revision (and one etcd request) for many of them, where one each would cost two per lock.
BOOST_AUTO_TEST_CASE(concurrent_locks_on_different_names_share_txns) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  constexpr int n = 150, rounds = 3;
  struct shared {
    int acquisitions = 0, done = 0, bad_tokens = 0;
  };
  auto st = std::make_shared<shared>();
  std::int64_t revisions = 0;
  run_for(ioc, [](client& c, std::shared_ptr<shared> st, std::int64_t& revisions) -> asio::awaitable<void> {
    std::vector<session> sessions;
    for (int i = 0; i < n; ++i) sessions.push_back(co_await session::async_create(c, use_awaitable));
    auto before = (co_await c.async_get("batch-probe", use_awaitable)).header.revision;
    auto worker = [](client& c, session& s, int i, std::shared_ptr<shared> st) -> asio::awaitable<void> {
      mutex m(s, "batch-" + std::to_string(i));
      for (int r = 0; r < rounds; ++r) {
        auto held = co_await m.async_lock(use_awaitable);
        // The fencing token is our key's create revision, whichever txn carried the put.
        auto mine = co_await c.async_get(held.key(), use_awaitable);
        if (mine.kvs.size() != 1 || mine.kvs.front().create_revision != held.fencing_token()) ++st->bad_tokens;
        ++st->acquisitions;
        co_await held.async_release(use_awaitable);
      }
      ++st->done;
    };
    auto ex = co_await asio::this_coro::executor;
    for (int i = 0; i < n; ++i) asio::co_spawn(ex, worker(c, sessions[i], i, st), asio::detached);
    while (st->done < n) co_await sleep_for(10ms);
    revisions = (co_await c.async_get("batch-probe", use_awaitable)).header.revision - before;
    for (auto& s : sessions) co_await s.async_close(use_awaitable);
    BOOST_TEST(co_await count_keys(c, "batch-") == 0);
  }(c, st, revisions), 120s);
  BOOST_TEST(st->acquisitions == n * rounds);
  BOOST_TEST(st->bad_tokens == 0);
  BOOST_TEST_MESSAGE("revisions per acquisition: " << double(revisions) / st->acquisitions);
  BOOST_TEST(revisions < st->acquisitions);  // two each without batching
}

// Twenty sessions queue on one name at once: their puts never share a txn, so no two keys share
// a create revision (both would count as the oldest).
BOOST_AUTO_TEST_CASE(concurrent_locks_on_one_name_get_distinct_revisions) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    constexpr int n = 20;
    std::vector<session> sessions;
    for (int i = 0; i < n; ++i) sessions.push_back(co_await session::async_create(c, use_awaitable));
    std::vector<std::unique_ptr<mutex>> ms;
    for (auto& s : sessions) ms.push_back(std::make_unique<mutex>(s, "batch-one"));
    auto locked = std::make_shared<int>(0);
    // The holds are kept: one dropped would release at once and let the next session in.
    auto holds = std::make_shared<std::vector<mutex::hold>>();
    for (auto& m : ms)
      m->async_lock([locked, holds](error_code ec, mutex::hold h) {
        if (ec) return;
        ++*locked;
        holds->push_back(std::move(h));
      });
    for (int i = 0; i < 300; ++i) {
      if (*locked == 1 && co_await count_keys(c, "batch-one/") == n) break;
      co_await sleep_for(10ms);
    }
    BOOST_TEST(*locked == 1);
    auto all = co_await c.async_get("batch-one/", get_options{.prefix = true}, use_awaitable);
    std::set<std::int64_t> revs;
    for (auto& kv : all.kvs) revs.insert(kv.create_revision);
    BOOST_TEST(all.kvs.size() == std::size_t(n));
    BOOST_TEST(revs.size() == all.kvs.size());
    for (auto& s : sessions) co_await s.async_close(use_awaitable);
    holds->clear();  // lost with their sessions: nothing left to release
    co_await expect_no_keys(c, "batch-one");
  }(c));
}

// A put under a revoked lease makes etcd refuse a whole shared txn: each write is then sent
// alone, so only the lost session's lock fails.
BOOST_AUTO_TEST_CASE(a_revoked_lease_in_a_shared_txn_fails_only_its_own_lock) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    constexpr int n = 6;
    std::vector<session> sessions;
    for (int i = 0; i < n; ++i) sessions.push_back(co_await session::async_create(c, use_awaitable));
    co_await c.async_lease_revoke(sessions[0].lease(), use_awaitable);  // the session has not noticed
    std::vector<std::unique_ptr<mutex>> ms;
    for (int i = 0; i < n; ++i) ms.push_back(std::make_unique<mutex>(sessions[i], "batch-lost-" + std::to_string(i)));
    auto results = std::make_shared<std::vector<std::optional<error_code>>>(n);
    auto holds = std::make_shared<std::vector<mutex::hold>>(n);
    // The doomed lock last: the first write leaves alone, the rest gather behind it.
    for (int i = n - 1; i >= 0; --i)
      ms[i]->async_lock([results, holds, i](error_code ec, mutex::hold h) {
        (*holds)[i] = std::move(h);
        (*results)[i] = ec;
      });
    for (int t = 0; t < 300; ++t) {
      if (std::all_of(results->begin(), results->end(), [](auto& r) { return r.has_value(); })) break;
      co_await sleep_for(10ms);
    }
    BOOST_TEST_REQUIRE((*results)[0].has_value());
    BOOST_TEST(*(*results)[0] == error::session_lost, (*results)[0]->message());
    BOOST_TEST(!(*holds)[0]);
    for (int i = 1; i < n; ++i) {
      BOOST_TEST_REQUIRE((*results)[i].has_value());
      BOOST_TEST(!*(*results)[i], (*results)[i]->message());
      BOOST_TEST(bool((*holds)[i]));
      co_await (*holds)[i].async_release(use_awaitable);
    }
    BOOST_TEST(co_await count_keys(c, "batch-lost-") == 0);
  }(c));
}
