// The mutex between callers of one process: coroutines of one session queue locally behind the
// session's one key, and sessions take fair turns. Against a real etcd, with etcdctl interop
// (fences across local hand-offs: test_mutex_local_fences.cpp).
#define BOOST_TEST_MODULE coetcd_mutex_local
#include "support/fixture.hpp"

#include <boost/asio/experimental/awaitable_operators.hpp>

#include <atomic>
#include <thread>
#include <vector>

using namespace coetcd;
using namespace coetcd::test;
using namespace std::chrono_literals;
using namespace boost::asio::experimental::awaitable_operators;

BOOST_TEST_GLOBAL_FIXTURE(shared_etcd);

namespace {

using clock_type = std::chrono::steady_clock;

/// Write RPCs etcd has handled so far (lock txns and deletes).
double writes() { return server().grpc_handled("Txn") + server().grpc_handled("DeleteRange"); }

/// The client's counters for one lock name (zeros when it has none).
lock_stats stats_of(client& c, const std::string& name) {
  for (auto& l : c.stats().locks)
    if (l.name == name) return l;
  return {};
}

/// Holds and order seen by the callers of one test.
struct ledger {
  int inside = 0, max_inside = 0, holds = 0;
  int next_arrival = 0;
  std::vector<int> grant_order;  // arrival number of each caller granted, in grant order
};

asio::awaitable<void> caller(mutex& m, std::shared_ptr<ledger> l, int rounds, std::chrono::milliseconds hold) {
  for (int i = 0; i < rounds; ++i) {
    int arrival = l->next_arrival++;
    auto held = co_await m.async_lock(use_awaitable);
    l->grant_order.push_back(arrival);
    l->max_inside = std::max(l->max_inside, ++l->inside);
    co_await sleep_for(hold);
    --l->inside;
    ++l->holds;
    co_await held.async_release(use_awaitable);
  }
}

void fifty_callers_on_one_session(bool share_object) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c, bool share_object) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, use_awaitable);
    std::string name = share_object ? "local-shared" : "local-each";
    const int callers = 50, rounds = 3;
    std::vector<std::unique_ptr<mutex>> objects;
    for (int i = 0; i < (share_object ? 1 : callers); ++i) objects.push_back(std::make_unique<mutex>(s, name));
    // The key first, so the run below is local hand-offs only.
    auto first = co_await objects[0]->async_lock(use_awaitable);
    co_await first.async_release(use_awaitable);
    auto l = std::make_shared<ledger>();
    auto ex = co_await asio::this_coro::executor;
    int done = 0;
    for (int i = 0; i < callers; ++i)
      asio::co_spawn(ex, caller(*objects[share_object ? 0 : i], l, rounds, 2ms), [&done](std::exception_ptr e) {
        BOOST_TEST(!e);
        ++done;
      });
    // Once the first caller holds, the run is local: count the writes etcd sees from here on.
    while (l->holds == 0 && l->inside == 0) co_await sleep_for(1ms);
    auto writes_before = writes();
    while (done < callers) co_await sleep_for(5ms);
    auto writes_during = writes() - writes_before;
    BOOST_TEST(l->holds == callers * rounds);
    BOOST_TEST(l->max_inside == 1);  // never two holders
    // FIFO: callers are granted in the order they asked.
    BOOST_TEST(std::is_sorted(l->grant_order.begin(), l->grant_order.end()));
    // One write at most: the delete of the session's key when the last caller unlocked.
    BOOST_TEST(writes_during <= 1.0, writes_during << " writes for " << l->holds << " local hand-offs");
    co_await expect_no_keys(c, name);
  }(c, share_object));
}

}  // namespace

BOOST_AUTO_TEST_CASE(fifty_coroutines_sharing_one_mutex_object_exclude_each_other_in_fifo_order) {
  fifty_callers_on_one_session(true);
}

BOOST_AUTO_TEST_CASE(fifty_coroutines_with_an_object_each_exclude_each_other_in_fifo_order) {
  fifty_callers_on_one_session(false);
}

// 4 clients x 25 coroutines increment a counter stored in etcd (read, then a fenced write):
// no update is lost. While they keep the name busy, etcdctl's lock (Go's concurrency.Mutex)
// waits behind them and gets its turn within the fairness bound.
BOOST_AUTO_TEST_CASE(busy_sessions_lose_no_update_and_let_etcdctl_in) {
  asio::io_context ioc;
  std::vector<std::unique_ptr<client>> clients;
  for (int i = 0; i < 4; ++i) clients.push_back(std::make_unique<client>(ioc, options_for(server())));
  struct shared {
    std::atomic<bool> stop{false};
    std::atomic<bool> etcdctl_done{false};
    int acquisitions = 0, acquisitions_while_etcdctl_waited = 0;
    bool etcdctl_started = false;
    int inside = 0, max_inside = 0;
  };
  auto st = std::make_shared<shared>();
  command_result etcdctl_result;
  double etcdctl_seconds = 0;
  std::thread etcdctl_thread;
  run_for(ioc, [](std::vector<std::unique_ptr<client>>& clients, std::shared_ptr<shared> st,
                  command_result& result, double& seconds, std::thread& t) -> asio::awaitable<void> {
    auto& c0 = *clients[0];
    co_await c0.async_put("busy-counter", "0", use_awaitable);
    std::vector<session> sessions;
    for (auto& c : clients) sessions.push_back(co_await session::async_create(*c, use_awaitable));
    auto ex = co_await asio::this_coro::executor;
    int done = 0;
    for (int i = 0; i < 100; ++i) {
      auto work = [](client& c, session& s, std::shared_ptr<shared> st) -> asio::awaitable<void> {
        mutex m(s, "busy-name");
        while (!st->stop) {
          auto held = co_await m.async_lock(use_awaitable);
          st->max_inside = std::max(st->max_inside, ++st->inside);
          auto r = co_await c.async_get("busy-counter", get_options{}, use_awaitable);
          auto n = std::stoi(r.kvs.at(0).value);
          auto w = co_await c.async_txn(
              txn().when(held.fence()).then(txn_op::put("busy-counter", std::to_string(n + 1))), use_awaitable);
          BOOST_TEST(w.succeeded);
          ++st->acquisitions;
          if (st->etcdctl_started && !st->etcdctl_done) ++st->acquisitions_while_etcdctl_waited;
          --st->inside;
          co_await held.async_release(use_awaitable);
        }
      };
      asio::co_spawn(ex, work(*clients[i % 4], sessions[i % 4], st), [&done](std::exception_ptr e) {
        BOOST_TEST(!e);
        ++done;
      });
    }
    co_await sleep_for(300ms);
    st->etcdctl_started = true;
    t = std::thread([st, &result, &seconds] {
      auto t0 = clock_type::now();
      result = etcdctl(server(), "lock busy-name -- echo etcdctl-got-it");
      seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
      st->etcdctl_done = true;
    });
    for (int i = 0; i < 1000 && !st->etcdctl_done; ++i) co_await sleep_for(10ms);
    co_await sleep_for(200ms);  // the sessions go on after etcdctl
    st->stop = true;
    while (done < 100) co_await sleep_for(5ms);
    auto r = co_await c0.async_get("busy-counter", get_options{}, use_awaitable);
    BOOST_TEST(std::stoi(r.kvs.at(0).value) == st->acquisitions);  // no lost update
    BOOST_TEST(st->max_inside == 1);
    co_await c0.async_delete("busy-counter", use_awaitable);
    for (auto& s : sessions) co_await s.async_close(use_awaitable);
    co_await expect_no_keys(c0, "busy-name");
  }(clients, st, etcdctl_result, etcdctl_seconds, etcdctl_thread), 40s);
  if (etcdctl_thread.joinable()) etcdctl_thread.join();
  BOOST_TEST(etcdctl_result.exit_code == 0, etcdctl_result.output);
  BOOST_TEST(etcdctl_result.output.find("etcdctl-got-it") != std::string::npos);
  // The bound is about 50 ms plus one hold; etcdctl itself takes a few hundred ms to start.
  BOOST_TEST(etcdctl_seconds < 3.0, "etcdctl waited " << etcdctl_seconds << " s");
  BOOST_TEST(st->acquisitions_while_etcdctl_waited > 0);  // the name was busy while it waited
  BOOST_TEST_MESSAGE("etcdctl got the lock in " << etcdctl_seconds << " s; " << st->acquisitions
                                                << " acquisitions by the sessions");
}

// A session busy with 10 coroutines and a waiter of another session: the waiter gets its turn
// within the fairness bound, and the busy session's callers get theirs back after it.
BOOST_AUTO_TEST_CASE(a_busy_session_gives_another_session_its_turn) {
  asio::io_context ioc;
  client c1(ioc, options_for(server()));
  client c2(ioc, options_for(server()));
  run_for(ioc, [](client& c1, client& c2) -> asio::awaitable<void> {
    auto busy = co_await session::async_create(c1, use_awaitable);
    auto other = co_await session::async_create(c2, use_awaitable);
    mutex shared_m(busy, "turns");
    bool stop = false;
    int busy_holds = 0, inside = 0, max_inside = 0;
    auto ex = co_await asio::this_coro::executor;
    int done = 0;
    for (int i = 0; i < 10; ++i)
      asio::co_spawn(ex, [&]() -> asio::awaitable<void> {
        while (!stop) {
          auto held = co_await shared_m.async_lock(use_awaitable);
          max_inside = std::max(max_inside, ++inside);
          co_await sleep_for(1ms);
          --inside;
          ++busy_holds;
          co_await held.async_release(use_awaitable);
        }
      }, [&done](std::exception_ptr e) {
        BOOST_TEST(!e);
        ++done;
      });
    co_await sleep_for(100ms);
    mutex m2(other, "turns");
    for (int round = 0; round < 3; ++round) {
      auto t0 = clock_type::now();
      auto held = co_await m2.async_lock(use_awaitable);
      auto waited = clock_type::now() - t0;
      max_inside = std::max(max_inside, ++inside);
      // Bound: fair_hold (50 ms) after the waiter is seen, plus a hold and the hand-off.
      double waited_ms = std::chrono::duration<double, std::milli>(waited).count();
      BOOST_TEST(waited_ms < 500.0, "waited " << waited_ms << " ms");
      auto before = busy_holds;
      --inside;
      co_await held.async_release(use_awaitable);
      co_await sleep_for(100ms);
      BOOST_TEST(busy_holds > before);  // the busy session got the name back
    }
    stop = true;
    while (done < 10) co_await sleep_for(5ms);
    BOOST_TEST(max_inside == 1);
    co_await expect_no_keys(c1, "turns");
  }(c1, c2));
}

// Cancelling a local waiter at any moment leaves the queue working; cancelling the session's
// last waiter removes its key before the handler runs.
BOOST_AUTO_TEST_CASE(cancelled_local_waiters_at_every_delay) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, use_awaitable);
    auto other = co_await session::async_create(c, use_awaitable);
    mutex holder(s, "cancel-local"), waiter(s, "cancel-local");
    auto held = co_await holder.async_lock(use_awaitable);
    for (int rep = 0; rep < 5; ++rep) {
      for (int d = 0; d <= 6; ++d) {
        auto r = co_await (waiter.async_lock(use_awaitable) || sleep_for(std::chrono::milliseconds(d)));
        BOOST_TEST(r.index() == 1u);  // the holder never let go: the timer always wins
        // The cancelled caller left the queue; the holder is still the only holder.
        const auto st = stats_of(c, "cancel-local");
        BOOST_TEST(st.waiting == 0, "delay " << d << " ms");
        BOOST_TEST(st.held == 1, "delay " << d << " ms");
      }
    }
    BOOST_TEST(bool(held));
    BOOST_TEST(co_await count_keys(c, "cancel-local/") == 1);
    // The queue still works: a waiter behind the holder gets it on release.
    auto got = acquiring<mutex::hold>();
    waiter.async_lock(record(got));
    co_await held.async_release(use_awaitable);
    for (int i = 0; i < 100 && !got->ec.has_value(); ++i) co_await sleep_for(1ms);
    BOOST_TEST_REQUIRE(got->ec.has_value());
    BOOST_TEST(!*got->ec);
    BOOST_TEST(bool(got->hold));
    // The session's only caller, waiting behind another session, cancelled at every delay:
    // when its handler has run, its key is gone (or was never made).
    mutex mine(other, "cancel-local");
    for (int d = 0; d <= 6; ++d) {
      auto r = co_await (mine.async_lock(use_awaitable) || sleep_for(std::chrono::milliseconds(d)));
      BOOST_TEST(r.index() == 1u);
      const auto st = stats_of(c, "cancel-local");
      BOOST_TEST(st.waiting == 0, "delay " << d << " ms");
      BOOST_TEST(st.held == 1, "delay " << d << " ms");  // only got's hold, of the first session
      // Its key is gone when the handler runs, or, if its put was still on the wire, as soon as
      // the put completes.
      auto left = co_await count_keys(c, "cancel-local/");
      for (int i = 0; i < 100 && left != 1; ++i) {
        co_await sleep_for(10ms);
        left = co_await count_keys(c, "cancel-local/");
      }
      BOOST_TEST(left == 1, "delay " << d << " ms");
    }
    co_await got->hold.async_release(use_awaitable);
    auto again = co_await mine.async_lock(use_awaitable);  // still usable
    co_await again.async_release(use_awaitable);
    co_await expect_no_keys(c, "cancel-local");
  }(c));
}

// with_lock's max_hold cancels the holder's body; the next local caller then gets the lock.
BOOST_AUTO_TEST_CASE(with_lock_of_a_local_holder_is_cancelled_and_hands_on) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, use_awaitable);
    mutex m(s, "local-with");
    auto body = []() -> asio::awaitable<void> { co_await sleep_for(10s); };
    const with_lock_options short_hold{.max_hold = 200ms};
    auto ex = co_await asio::this_coro::executor;
    auto next = acquiring<mutex::hold>();
    bool max_hold_seen = false;
    asio::co_spawn(ex, [&]() -> asio::awaitable<void> {
      try {
        co_await with_lock(m, std::move(body), short_hold);
      } catch (const boost::system::system_error& e) {
        max_hold_seen = e.code() == error::max_hold_exceeded;
      }
    }, asio::detached);
    co_await sleep_for(20ms);
    auto t0 = clock_type::now();
    m.async_lock(record(next));
    for (int i = 0; i < 300 && !next->ec.has_value(); ++i) co_await sleep_for(5ms);
    BOOST_TEST_REQUIRE(next->ec.has_value());
    BOOST_TEST(!*next->ec);
    BOOST_TEST(bool(next->hold));
    BOOST_TEST(max_hold_seen);
    BOOST_TEST((clock_type::now() - t0 < 1s));
    co_await next->hold.async_release(use_awaitable);
    co_await expect_no_keys(c, "local-with");
  }(c));
}

// Session loss while 20 local callers wait and one holds: every waiter fails with session_lost,
// the holder learns it from its hold's async_wait_lost (success, the lease gone) and its release.
BOOST_AUTO_TEST_CASE(session_loss_fails_every_local_caller) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    // A short TTL: the session learns of the revoke at its next renewal (TTL/3).
    auto s = co_await session::async_create(c, session_options{.ttl = 3s}, use_awaitable);
    mutex m(s, "local-loss");
    auto held = co_await m.async_lock(use_awaitable);
    auto results = std::make_shared<std::vector<std::optional<error_code>>>(20);
    auto granted = std::make_shared<int>(0);  // holds handed out anyway: there must be none
    for (int i = 0; i < 20; ++i)
      m.async_lock([results, granted, i](error_code ec, mutex::hold h) {
        if (h) ++*granted;
        (*results)[i] = ec;
      });
    auto lost = waiting_for_loss();
    held.async_wait_lost(record(lost));
    co_await sleep_for(50ms);
    co_await c.async_lease_revoke(s.lease(), use_awaitable);
    for (int i = 0; i < 300; ++i) {
      if (lost->has_value() && std::all_of(results->begin(), results->end(), [](auto& r) { return r.has_value(); }))
        break;
      co_await sleep_for(10ms);
    }
    BOOST_TEST_REQUIRE(lost->has_value());
    BOOST_TEST(!(*lost)->ec, (*lost)->ec.message());  // the loss is what the wait waits for
    BOOST_TEST(((*lost)->reason.what == loss_reason::kind::lease_gone), (*lost)->reason.cause.message());
    BOOST_TEST(!held);
    for (auto& r : *results) {
      BOOST_TEST_REQUIRE(r.has_value());
      BOOST_TEST(*r == error::session_lost, r->message());
    }
    BOOST_TEST(*granted == 0);
    auto [ec] = co_await held.async_release(asio::as_tuple(use_awaitable));
    BOOST_TEST(ec == error::session_lost);
    auto [again, none] = co_await m.async_lock(asio::as_tuple(use_awaitable));
    BOOST_TEST(again == error::session_lost);
    BOOST_TEST(!none);
    co_await expect_no_keys(c, "local-loss");
  }(c));
}

// Linger: the key stays after the last unlock, so the next lock costs no RPC; another session's
// waiter ends the linger at once; with nobody waiting the key goes when the linger ends.
BOOST_AUTO_TEST_CASE(linger_keeps_the_key_until_another_session_waits) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, use_awaitable);
    auto other = co_await session::async_create(c, use_awaitable);
    mutex m(s, "linger", {.linger = 10s});
    auto first = co_await m.async_lock(use_awaitable);
    co_await first.async_release(use_awaitable);
    BOOST_TEST(co_await count_keys(c, "linger/") == 1);
    const auto key_rev = co_await create_revision_of(c, m.key());
    auto before = writes();
    for (int i = 0; i < 20; ++i) {
      auto held = co_await m.async_lock(use_awaitable);
      BOOST_TEST(bool(held));
      co_await held.async_release(use_awaitable);
    }
    auto tried = co_await m.async_try_lock(use_awaitable);
    co_await tried.async_release(use_awaitable);
    BOOST_TEST(writes() - before == 0.0);
    BOOST_TEST(co_await create_revision_of(c, m.key()) == key_rev);
    // A holder that reads its token: the next hold, after the linger, moves the fence (one put).
    auto fenced = co_await m.async_lock(use_awaitable);
    auto token = fenced.fencing_token();
    co_await fenced.async_release(use_awaitable);
    before = writes();
    auto next = co_await m.async_lock(use_awaitable);
    BOOST_TEST(next.fencing_token() > token);
    token = next.fencing_token();
    co_await next.async_release(use_awaitable);
    BOOST_TEST(writes() - before == 1.0);
    // Another session: the linger ends at once, long before its 10 s.
    mutex m2(other, "linger");
    auto t0 = clock_type::now();
    auto theirs = co_await m2.async_lock(use_awaitable);
    BOOST_TEST((clock_type::now() - t0 < 1s));
    BOOST_TEST(theirs.fencing_token() > token);
    co_await theirs.async_release(use_awaitable);
    // A short linger with nobody waiting ends by itself.
    mutex shortly(s, "linger-short", {.linger = 100ms});
    auto brief = co_await shortly.async_lock(use_awaitable);
    co_await brief.async_release(use_awaitable);
    BOOST_TEST(co_await count_keys(c, "linger-short/") == 1);
    co_await sleep_for(400ms);
    co_await expect_no_keys(c, "linger-short");
    co_await expect_no_keys(c, "linger");
  }(c));
}

// An unlock whose delete cannot reach etcd (the member is paused past the request timeout)
// reports the error, and the delete is retried in the background: once etcd is back the name is
// free, without ending the session.
BOOST_AUTO_TEST_CASE(a_failed_unlock_frees_the_name_when_etcd_is_back) {
  asio::io_context ioc;
  auto quick = options_for(server());
  quick.request_timeout = 1s;
  client c(ioc, quick);
  client other_c(ioc, options_for(server()));
  run_for(ioc, [](client& c, client& other_c) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, session_options{.ttl = 30s}, use_awaitable);
    auto other = co_await session::async_create(other_c, session_options{.ttl = 30s}, use_awaitable);
    mutex m(s, "outage-unlock");
    auto held = co_await m.async_lock(use_awaitable);
    server().pause();
    auto [ec] = co_await held.async_release(asio::as_tuple(use_awaitable));
    server().resume();
    BOOST_TEST(ec, "the release could not have reached etcd");
    BOOST_TEST(!held);
    mutex m2(other, "outage-unlock");
    auto r = co_await (m2.async_lock(use_awaitable) || sleep_for(10s));
    BOOST_TEST_REQUIRE(r.index() == 0u, "the name stayed blocked");
    BOOST_TEST(!s.lost());
    co_await std::get<0>(r).async_release(use_awaitable);
    co_await expect_no_keys(c, "outage-unlock");
  }(c, other_c), 40s);
}

// A waiter cancelled while etcd cannot be reached completes at once (a timed wait returns at its
// deadline, #34), and still removes its key once etcd is back, in the background, so it does not
// block the sessions behind it.
BOOST_AUTO_TEST_CASE(a_waiter_cancelled_during_an_outage_does_not_block_the_name) {
  asio::io_context ioc;
  auto quick = options_for(server());
  quick.request_timeout = 1s;
  client a_c(ioc, options_for(server()));
  client b_c(ioc, quick);
  client c_c(ioc, options_for(server()));
  run_for(ioc, [](client& a_c, client& b_c, client& c_c) -> asio::awaitable<void> {
    auto a = co_await session::async_create(a_c, session_options{.ttl = 30s}, use_awaitable);
    auto b = co_await session::async_create(b_c, session_options{.ttl = 30s}, use_awaitable);
    auto cs = co_await session::async_create(c_c, session_options{.ttl = 30s}, use_awaitable);
    mutex ma(a, "outage-cancel"), mb(b, "outage-cancel"), mc(cs, "outage-cancel");
    auto held_a = co_await ma.async_lock(use_awaitable);
    asio::cancellation_signal sig;
    auto rb = std::make_shared<std::optional<error_code>>();
    mb.async_lock(asio::bind_cancellation_slot(sig.slot(), [rb](error_code ec, mutex::hold) { *rb = ec; }));
    co_await sleep_for(200ms);  // b's key is queued behind a's
    server().pause();
    sig.emit(asio::cancellation_type::terminal);
    // Completed while etcd is still paused: nobody waits for the clean-up.
    std::function<bool()> cancelled = [rb] { return rb->has_value(); };
    const bool in_time = co_await eventually(std::move(cancelled), 500ms);
    auto cleaning = [&b_c] {
      for (const auto& l : b_c.stats().locks)
        if (l.name == "outage-cancel") return l.cleaning;
      return std::int64_t(-1);
    };
    const auto cleaning_while_paused = cleaning();
    // While that clean-up waits out the outage, a new timed lock of the session (which waits
    // for the delete before it queues) still returns at its deadline.
    std::optional<error_code> again;
    asio::cancellation_signal sig2;
    mb.async_lock(asio::bind_cancellation_slot(sig2.slot(), [&again](error_code ec, mutex::hold) { again = ec; }));
    co_await sleep_for(100ms);
    sig2.emit(asio::cancellation_type::terminal);
    std::function<bool()> returned = [&again] { return again.has_value(); };
    const bool again_in_time = co_await eventually(std::move(returned), 500ms);
    co_await sleep_for(1500ms);  // b's clean-up delete fails at least once
    server().resume();
    BOOST_TEST(again_in_time, "a timed lock behind a clean-up waited for it");
    BOOST_TEST((again && *again == asio::error::operation_aborted));
    BOOST_TEST(in_time, "the cancelled lock waited for its clean-up through the outage");
    BOOST_TEST(cleaning_while_paused == 1);
    for (int i = 0; i < 500 && !rb->has_value(); ++i) co_await sleep_for(10ms);
    BOOST_TEST_REQUIRE(rb->has_value());
    BOOST_TEST(**rb == asio::error::operation_aborted);
    std::function<bool()> cleaned = [&] { return cleaning() == 0; };
    BOOST_TEST(co_await eventually(std::move(cleaned), 10s));
    auto rc = acquiring<mutex::hold>();
    mc.async_lock(record(rc));
    co_await sleep_for(200ms);
    co_await held_a.async_release(use_awaitable);
    for (int i = 0; i < 500 && !rc->ec.has_value(); ++i) co_await sleep_for(10ms);
    BOOST_TEST_REQUIRE(rc->ec.has_value(), "c never got the lock: b's key blocked the name");
    BOOST_TEST(!*rc->ec);
    BOOST_TEST(bool(rc->hold));
    co_await rc->hold.async_release(use_awaitable);
    co_await expect_no_keys(a_c, "outage-cancel");
  }(a_c, b_c, c_c), 40s);
}

// `lock || timer` at every delay 0–3 ms, 500 times, with the lock passing between local callers
// and taken from etcd: whenever the timer wins, the lock is not held (a grant already posted
// when the timer fired is given back), and the name never stays blocked.
BOOST_AUTO_TEST_CASE(a_lock_that_loses_a_race_with_a_timer_is_never_held) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, use_awaitable);
    mutex busy(s, "race");
    bool stop = false;
    int busy_holds = 0;
    auto ex = co_await asio::this_coro::executor;
    bool busy_done = false;
    asio::co_spawn(ex, [&]() -> asio::awaitable<void> {
      while (!stop) {
        auto held = co_await busy.async_lock(use_awaitable);
        co_await sleep_for(1ms);
        ++busy_holds;
        co_await held.async_release(use_awaitable);
      }
    }, [&](std::exception_ptr e) {
      BOOST_TEST(!e);
      busy_done = true;
    });
    mutex racer(s, "race");
    int timer_won = 0, lock_won = 0;
    for (int i = 0; i < 500; ++i) {
      // Half on the busy name (local hand-offs), half on a fresh name (the grant comes from etcd).
      mutex fresh(s, "race-" + std::to_string(i));
      mutex& m = i % 2 ? racer : fresh;
      auto r = co_await (m.async_lock(use_awaitable) || sleep_for(std::chrono::microseconds(i % 7 * 500)));
      if (r.index() == 1) {
        ++timer_won;
        co_await sleep_for(2ms);  // a given-back grant is passed on on the strand
        // Nobody holds a fresh name once its grant is given back. (On the busy name the proof is
        // that the busy caller keeps getting it: see below.)
        if (i % 2 == 0) BOOST_TEST(stats_of(c, m.name()).held == 0, "iteration " << i);
      } else {
        ++lock_won;
        auto& held = std::get<0>(r);
        BOOST_TEST(bool(held));
        co_await held.async_release(use_awaitable);
      }
    }
    auto before = busy_holds;
    co_await sleep_for(50ms);
    BOOST_TEST(busy_holds > before);  // the busy caller was never left waiting behind a lost grant
    stop = true;
    while (!busy_done) co_await sleep_for(5ms);
    BOOST_TEST_MESSAGE("timer won " << timer_won << ", lock won " << lock_won);
    BOOST_TEST(timer_won > 0);
    BOOST_TEST(lock_won > 0);
    for (int i = 0; i < 100 && co_await count_keys(c, "race") > 0; ++i) co_await sleep_for(10ms);
    BOOST_TEST(co_await count_keys(c, "race") == 0);  // "race/" and every "race-N/"
  }(c), 60s);
}
