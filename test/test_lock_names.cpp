// Lock names that prefix one another with a "/" between (`jobs`, `jobs/x`, `jobs/`): each is a lock of its own.
#define BOOST_TEST_MODULE coetcd_lock_names
#include "support/child_process.hpp"
#include "support/fixture.hpp"

#include <boost/asio/experimental/awaitable_operators.hpp>

#include <csignal>
#include <regex>

using namespace coetcd;
using namespace coetcd::test;
using namespace std::chrono_literals;
using namespace boost::asio::experimental::awaitable_operators;

BOOST_TEST_GLOBAL_FIXTURE(shared_etcd);

namespace {

using clock_type = std::chrono::steady_clock;

/// The holds of one name by the callers of a test, and the longest time it was free meanwhile.
struct holds_log {
  clock_type::time_point last_free = clock_type::now();  // the start, or the last release
  clock_type::duration longest_gap{0};
  int holds = 0, inside = 0, max_inside = 0, running = 0;
};

/// Locks `m`, holds 1 ms and releases, until `until`.
asio::awaitable<void> take_turns(mutex& m, holds_log& log, clock_type::time_point until) {
  while (clock_type::now() < until) {
    auto held = co_await m.async_lock(use_awaitable);
    log.longest_gap = std::max(log.longest_gap, clock_type::now() - log.last_free);
    log.max_inside = std::max(log.max_inside, ++log.inside);
    co_await sleep_for(1ms);
    --log.inside;
    ++log.holds;
    log.last_free = clock_type::now();
    co_await held.async_release(use_awaitable);
  }
}

asio::awaitable<void> release_after(mutex::hold h, clock_type::duration d) {
  co_await sleep_for(d);
  co_await h.async_release(use_awaitable);
}

double ms(clock_type::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

}  // namespace

// A session whose two callers take turns on `ln-jobs` while another client's session holds
// `ln-jobs/x`. The view of `ln-jobs/` counted the `ln-jobs/x/<lease>` key as the oldest in the
// queue and as another session's waiter: the first lock waited until `ln-jobs/x` was released
// (3 s here), and a busy session yielded its turn to that key. Now the longest time `ln-jobs` is
// free between holds stays a local hand-off (bound: 500 ms).
BOOST_AUTO_TEST_CASE(a_longer_name_held_elsewhere_neither_blocks_nor_takes_turns) {
  asio::io_context ioc;
  client c(ioc, options_for(server())), d(ioc, options_for(server()));
  run_for(ioc, [](client& c, client& d) -> asio::awaitable<void> {
    auto busy = co_await session::async_create(c, use_awaitable);
    auto other = co_await session::async_create(d, use_awaitable);
    mutex longer(other, "ln-jobs/x"), jobs(busy, "ln-jobs");
    auto longer_hold = co_await longer.async_lock(use_awaitable);
    auto ex = co_await asio::this_coro::executor;
    bool released = false;
    asio::co_spawn(ex, release_after(std::move(longer_hold), 3s), [&released](std::exception_ptr e) {
      BOOST_TEST(!e);
      released = true;
    });
    holds_log log;
    const auto until = clock_type::now() + 1s;
    for (int i = 0; i < 2; ++i) {
      ++log.running;
      asio::co_spawn(ex, take_turns(jobs, log, until), [&log](std::exception_ptr e) {
        BOOST_TEST(!e);
        --log.running;
      });
    }
    while (log.running > 0) co_await sleep_for(5ms);
    BOOST_TEST_MESSAGE(log.holds << " holds, longest gap " << ms(log.longest_gap) << " ms");
    BOOST_TEST(ms(log.longest_gap) < 500.0, "ln-jobs waited " << ms(log.longest_gap) << " ms for ln-jobs/x");
    BOOST_TEST(log.holds > 20);
    BOOST_TEST(log.max_inside == 1);
    BOOST_TEST(!released, "ln-jobs/x was released before the turns ended");
    while (!released) co_await sleep_for(10ms);
    co_await expect_no_keys(c, "ln-jobs");
    co_await busy.async_close(use_awaitable);
    co_await other.async_close(use_awaitable);
  }(c, d), 60s);
}

// A process holding `ln-self/x` locks `ln-self`: in Go (and here before) its own key under
// `ln-self/` was older than the new one, and it waited for itself for ever; a try said `locked`.
// The same for an rw_mutex whose blockers' prefix (`NAME/write`) covers a longer name
// (`NAME/writer`), an election (and what it reports as leader), and a name ending in "/"
// (`ln-trail/`, keys `ln-trail//<lease>` as in Go: a name of its own).
BOOST_AUTO_TEST_CASE(holding_a_longer_name_does_not_block_the_shorter_one) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, use_awaitable);
    auto s2 = co_await session::async_create(c, use_awaitable);
    mutex longer(s, "ln-self/x"), shorter(s, "ln-self"), theirs(s2, "ln-self");
    auto longer_hold = co_await longer.async_lock(use_awaitable);
    // A try reads the oldest key, the longer name's: one more read decides.
    auto [tried, tried_hold] = co_await shorter.async_try_lock(asio::as_tuple(use_awaitable));
    BOOST_TEST(!tried, tried.message());
    if (!tried) co_await tried_hold.async_release(use_awaitable);
    auto got = co_await (shorter.async_lock(asio::as_tuple(use_awaitable)) || sleep_for(5s));
    BOOST_TEST_REQUIRE(got.index() == 0u, "the lock waited for its own process's ln-self/x");
    auto& [ec, shorter_hold] = std::get<0>(got);
    BOOST_TEST_REQUIRE(!ec, ec.message());
    BOOST_TEST(bool(shorter_hold));
    // The name's own keys still exclude.
    auto [busy, none] = co_await theirs.async_try_lock(asio::as_tuple(use_awaitable));
    BOOST_TEST(busy == error::locked, busy.message());
    BOOST_TEST(!none);
    // The status names our key as the holder, the longer name's (older) among the rest.
    auto st = co_await async_lock_status(c, "ln-self", use_awaitable);
    BOOST_TEST_REQUIRE(st.holder.has_value());
    BOOST_TEST(st.holder->key == shorter_hold.key());
    BOOST_TEST_REQUIRE(st.waiters.size() == 1u);
    BOOST_TEST(st.waiters[0].key == longer_hold.key());
    BOOST_TEST(st.waiters[0].other_name == "ln-self/x");
    co_await shorter_hold.async_release(use_awaitable);

    // rw_mutex: `ln-rw/writer` is under the readers' blockers' prefix and the writers' queue.
    mutex writer_name(s2, "ln-rw/writer");
    rw_mutex rw(s, "ln-rw");
    auto writer_name_hold = co_await writer_name.async_lock(use_awaitable);
    auto [w, wh] = co_await rw.async_try_lock(asio::as_tuple(use_awaitable));
    BOOST_TEST(!w, w.message());
    if (!w) co_await wh.async_release(use_awaitable);
    auto [r, rh] = co_await rw.async_try_lock_shared(asio::as_tuple(use_awaitable));
    BOOST_TEST(!r, r.message());
    if (!r) co_await rh.async_release(use_awaitable);
    co_await writer_name_hold.async_release(use_awaitable);

    // An election wins over a longer name's key, and leader() and observers report it.
    mutex el_longer(s2, "ln-el/x");
    auto el_longer_hold = co_await el_longer.async_lock(use_awaitable);
    election e(s, "ln-el");
    auto won = co_await (e.async_campaign("v", asio::as_tuple(use_awaitable)) || sleep_for(5s));
    BOOST_TEST_REQUIRE(won.index() == 0u, "the campaign waited for ln-el/x");
    auto& [campaigned, lead] = std::get<0>(won);
    BOOST_TEST_REQUIRE(!campaigned, campaigned.message());
    BOOST_TEST_REQUIRE(bool(lead));
    auto leader = co_await e.async_leader(use_awaitable);
    BOOST_TEST(leader.key == lead.key());
    election_observer watching(c, "ln-el");
    auto seen = co_await watching.async_next(use_awaitable);
    BOOST_TEST_REQUIRE(seen.has_value());
    BOOST_TEST(seen->key == lead.key());
    co_await lead.async_release(use_awaitable);  // resigns
    co_await el_longer_hold.async_release(use_awaitable);

    // A trailing "/" makes `ln-trail//<lease>`, as Go does: a lock of its own.
    mutex trail(s, "ln-trail/"), bare(s2, "ln-trail"), trail2(s2, "ln-trail/");
    BOOST_TEST(trail.key() == "ln-trail//" + hex(s.lease()));
    auto trail_hold = co_await trail.async_lock(use_awaitable);
    auto [b, bh] = co_await bare.async_try_lock(asio::as_tuple(use_awaitable));
    BOOST_TEST(!b, b.message());
    if (!b) co_await bh.async_release(use_awaitable);
    auto [t2, t2h] = co_await trail2.async_try_lock(asio::as_tuple(use_awaitable));
    BOOST_TEST(t2 == error::locked, t2.message());
    BOOST_TEST(!t2h);
    co_await trail_hold.async_release(use_awaitable);

    co_await longer_hold.async_release(use_awaitable);
    for (const char* name : {"ln-self", "ln-rw", "ln-el", "ln-trail"}) co_await expect_no_keys(c, name);
    co_await s.async_close(use_awaitable);
    co_await s2.async_close(use_awaitable);
  }(c));
}

// Exclusion with Go's layout is kept: `etcdctl lock ln-go` holds, this process holds `ln-go/x`
// (its own prefix is empty), and a lock of `ln-go` still waits for etcdctl's key.
BOOST_AUTO_TEST_CASE(a_shorter_name_still_waits_for_etcdctl_holders_of_it) {
  child_process holder("ETCDCTL_API=3 " + etcdctl_binary() + " --endpoints=" + server().client_url() +
                       " lock ln-go");  // prints its key, holds until killed
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](child_process& holder, client& c) -> asio::awaitable<void> {
    std::function<bool()> holds = [&holder] { return holder.output().find("ln-go/") != std::string::npos; };
    BOOST_TEST_REQUIRE(co_await eventually(holds, 10000ms), holder.output());
    auto s = co_await session::async_create(c, use_awaitable);
    mutex longer(s, "ln-go/x"), shorter(s, "ln-go");
    auto longer_hold = co_await longer.async_lock(use_awaitable);
    auto [busy, none] = co_await shorter.async_try_lock(asio::as_tuple(use_awaitable));
    BOOST_TEST(busy == error::locked, busy.message());
    BOOST_TEST(!none);
    auto early = co_await (shorter.async_lock(asio::as_tuple(use_awaitable)) || sleep_for(300ms));
    BOOST_TEST(early.index() == 1u, "ln-go was taken while etcdctl held it");
    holder.signal(SIGKILL);  // its lease lives on: revoke it to free the name now
    auto st = co_await async_lock_status(c, "ln-go", use_awaitable);
    BOOST_TEST_REQUIRE(st.holder.has_value());
    BOOST_TEST(st.holder->key != shorter.key());
    co_await c.async_lease_revoke(st.holder->lease, use_awaitable);
    auto got = co_await (shorter.async_lock(asio::as_tuple(use_awaitable)) || sleep_for(5s));
    BOOST_TEST_REQUIRE(got.index() == 0u, "ln-go was not taken once etcdctl's key was gone");
    auto& [ec, shorter_hold] = std::get<0>(got);
    BOOST_TEST(!ec, ec.message());
    BOOST_TEST(bool(shorter_hold));
    if (!ec) co_await shorter_hold.async_release(use_awaitable);
    co_await longer_hold.async_release(use_awaitable);
    co_await expect_no_keys(c, "ln-go");
    co_await s.async_close(use_awaitable);
  }(holder, c), 30s);
}
