// Leader election and observation against a real etcd, including etcdctl interop.
#define BOOST_TEST_MODULE coetcd_election
#include "support/fixture.hpp"

#include <boost/asio/experimental/awaitable_operators.hpp>

using namespace coetcd;
using namespace coetcd::test;
using namespace std::chrono_literals;
using namespace boost::asio::experimental::awaitable_operators;

BOOST_TEST_GLOBAL_FIXTURE(shared_etcd);

namespace {
asio::awaitable<std::optional<key_value>> next_leader(election_observer& o) {
  co_return co_await o.async_next(use_awaitable);
}

/// The quickest of `rounds` locks (each unlocked again) of `m`, in microseconds.
asio::awaitable<std::int64_t> quickest_lock_us(mutex& m, int rounds) {
  auto quickest = std::chrono::steady_clock::duration::max();
  for (int i = 0; i < rounds; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    co_await m.async_lock(use_awaitable);
    quickest = std::min(quickest, std::chrono::steady_clock::now() - t0);
    co_await m.async_unlock(use_awaitable);
  }
  co_return std::chrono::duration_cast<std::chrono::microseconds>(quickest).count();
}
}  // namespace

BOOST_AUTO_TEST_CASE(staggered_candidates_lead_in_order_and_observers_see_it) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    election_observer watch(c, "elect-order");
    auto first = co_await next_leader(watch);
    BOOST_TEST(!first.has_value());  // nobody yet

    auto sa = co_await session::async_create(c, use_awaitable);
    auto sb = co_await session::async_create(c, use_awaitable);
    auto sc = co_await session::async_create(c, use_awaitable);
    election a(sa, "elect-order"), b(sb, "elect-order"), cc(sc, "elect-order");
    auto [no] = co_await a.async_resign(asio::as_tuple(use_awaitable));
    BOOST_TEST(!no);  // resign without leading is a no-op
    auto [nl, none] = co_await a.async_leader(asio::as_tuple(use_awaitable));
    BOOST_TEST(nl == error::no_leader);

    co_await a.async_campaign("alpha", use_awaitable);
    BOOST_TEST(a.is_leader());
    auto done = std::make_shared<std::vector<std::string>>();
    b.async_campaign("beta", [done](error_code ec) { done->push_back(ec ? ec.message() : "beta"); });
    co_await sleep_for(100ms);
    cc.async_campaign("gamma", [done](error_code ec) { done->push_back(ec ? ec.message() : "gamma"); });
    co_await sleep_for(300ms);
    BOOST_TEST(done->empty());  // both wait behind alpha
    auto [pe] = co_await b.async_proclaim("not yet", asio::as_tuple(use_awaitable));
    BOOST_TEST(pe == error::not_leader);

    auto l = co_await a.async_leader(use_awaitable);
    BOOST_TEST(l.value == "alpha");
    BOOST_TEST(l.key == a.key());
    co_await a.async_proclaim("alpha-2", use_awaitable);
    co_await a.async_resign(use_awaitable);
    BOOST_TEST(!a.is_leader());
    for (int i = 0; i < 100 && done->size() < 1; ++i) co_await sleep_for(10ms);
    BOOST_TEST_REQUIRE(done->size() == 1u);
    BOOST_TEST(done->at(0) == "beta");
    co_await b.async_resign(use_awaitable);
    for (int i = 0; i < 100 && done->size() < 2; ++i) co_await sleep_for(10ms);
    BOOST_TEST_REQUIRE(done->size() == 2u);
    BOOST_TEST(done->at(1) == "gamma");
    BOOST_TEST(cc.is_leader());
    co_await cc.async_resign(use_awaitable);

    // The observer saw every leader state, in order.
    std::vector<std::string> seen;
    for (int i = 0; i < 5; ++i) {
      auto v = co_await next_leader(watch);
      seen.push_back(v ? v->value : "<none>");
    }
    std::vector<std::string> expected = {"alpha", "alpha-2", "beta", "gamma", "<none>"};
    BOOST_TEST(seen == expected, boost::test_tools::per_element());
    BOOST_TEST(co_await count_keys(c, "elect-order/") == 0);
  }(c));
}

// A mutex and an election of one session on one name share the key NAME/<lease> (as in Go,
// where they would also share it). Resigning while the mutex still holds must not delete that
// key: the mutex would go on holding nothing while another session takes the lock. Unlocking
// then removes it.
BOOST_AUTO_TEST_CASE(resign_leaves_the_key_to_a_mutex_of_the_same_session) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, use_awaitable);
    auto other = co_await session::async_create(c, use_awaitable);
    mutex m(s, "elect-shared");
    election e(s, "elect-shared");
    co_await m.async_lock(use_awaitable);
    co_await e.async_campaign("v", use_awaitable);
    BOOST_TEST(e.is_leader());
    BOOST_TEST(co_await count_keys(c, "elect-shared/") == 1);  // one key for both
    co_await e.async_resign(use_awaitable);
    BOOST_TEST(!e.is_leader());
    BOOST_TEST(co_await count_keys(c, "elect-shared/") == 1, "resign removed the key the mutex holds");
    auto owned = co_await c.async_txn(txn().when(m.is_owner()), use_awaitable);
    BOOST_TEST(owned.succeeded);
    mutex theirs(other, "elect-shared");
    auto [busy] = co_await theirs.async_try_lock(asio::as_tuple(use_awaitable));
    BOOST_TEST(busy == error::locked);
    co_await m.async_unlock(use_awaitable);
    BOOST_TEST(co_await count_keys(c, "elect-shared/") == 0);
    co_await theirs.async_lock(use_awaitable);
    co_await theirs.async_unlock(use_awaitable);
    co_await s.async_close(use_awaitable);
    co_await other.async_close(use_awaitable);
  }(c));
}

BOOST_AUTO_TEST_CASE(session_loss_of_the_leader_elects_the_next) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto s1 = co_await session::async_create(c, session_options{.ttl = 3s}, use_awaitable);
    auto s2 = co_await session::async_create(c, use_awaitable);
    election e1(s1, "elect-loss"), e2(s2, "elect-loss");
    co_await e1.async_campaign("one", use_awaitable);
    auto got = std::make_shared<std::optional<error_code>>();
    e2.async_campaign("two", [got](error_code ec) { *got = ec; });
    co_await sleep_for(200ms);
    const auto lease = s1.lease();
    s1.orphan();  // the leader's process "dies": its lease expires after the TTL
    auto t0 = std::chrono::steady_clock::now();
    // What etcd says is left of the lease at that moment: the next leader must wait that long.
    // "> 1 s" passed a library that elected e2 up to two seconds early.
    auto left = co_await c.async_lease_time_to_live(lease, false, use_awaitable);
    BOOST_TEST_REQUIRE(left.ttl > 0, "the orphaned lease is already gone");
    for (int i = 0; i < 600 && !got->has_value(); ++i) co_await sleep_for(10ms);
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    BOOST_TEST_REQUIRE(got->has_value());
    BOOST_TEST(!**got);
    BOOST_TEST(e2.is_leader());
    BOOST_TEST_MESSAGE("the lease had " << left.ttl << " s left at the orphaning; the next leader after " << waited
                                        << " s");
    // etcd gives the whole seconds left, rounded down (int64 of Remaining().Seconds()), asked
    // after t0: the lease cannot expire sooner than that after t0. Its expiry is checked every
    // 500 ms: not long after either.
    BOOST_TEST(waited >= static_cast<double>(left.ttl));
    BOOST_TEST(waited < left.ttl + 3.0);
    co_await e2.async_resign(use_awaitable);
    // Cancelling a waiting campaign removes the proposal.
    auto s3 = co_await session::async_create(c, use_awaitable);
    election e3(s3, "elect-loss");
    co_await e2.async_campaign("two again", use_awaitable);
    asio::cancellation_signal sig;
    auto r3 = std::make_shared<std::optional<error_code>>();
    e3.async_campaign("three", asio::bind_cancellation_slot(sig.slot(), [r3](error_code ec) { *r3 = ec; }));
    co_await sleep_for(200ms);
    BOOST_TEST(co_await count_keys(c, "elect-loss/") == 2);
    sig.emit(asio::cancellation_type::terminal);
    for (int i = 0; i < 100 && !r3->has_value(); ++i) co_await sleep_for(10ms);
    BOOST_TEST_REQUIRE(r3->has_value());
    BOOST_TEST(**r3 == asio::error::operation_aborted);
    BOOST_TEST(co_await count_keys(c, "elect-loss/") == 1);
    co_await e2.async_resign(use_awaitable);
    BOOST_TEST(co_await count_keys(c, "elect-loss/") == 0);
  }(c));
}

BOOST_AUTO_TEST_CASE(etcdctl_elect_and_coetcd_see_each_other) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, use_awaitable);
    election e(s, "elect-interop");
    co_await e.async_campaign("coetcd-leader", use_awaitable);
    auto listen = run_command("timeout 2 env ETCDCTL_API=3 " + etcdctl_binary() + " --endpoints=" + server().client_url() +
                              " elect -l elect-interop");
    BOOST_TEST(listen.output.find("coetcd-leader") != std::string::npos, listen.output);
    BOOST_TEST(listen.output.find(e.key()) != std::string::npos, listen.output);
    co_await e.async_resign(use_awaitable);

    election_observer watch(c, "elect-interop");
    auto empty = co_await next_leader(watch);
    BOOST_TEST(!empty.has_value());
    auto candidate = std::async(std::launch::async, [] {
      return run_command("timeout 3 env ETCDCTL_API=3 " + etcdctl_binary() + " --endpoints=" + server().client_url() +
                         " elect elect-interop etcdctl-proposal");
    });
    auto leader = co_await next_leader(watch);
    BOOST_TEST_REQUIRE(leader.has_value());
    BOOST_TEST(leader->value == "etcdctl-proposal");
    BOOST_TEST(leader->key.rfind("elect-interop/", 0) == 0u);
    // While etcdctl leads, our campaign waits; it wins once etcdctl exits and its lease is revoked.
    auto t0 = std::chrono::steady_clock::now();
    co_await e.async_campaign("after-etcdctl", use_awaitable);
    BOOST_TEST((std::chrono::steady_clock::now() - t0 > 1s));
    candidate.get();
    auto next = co_await next_leader(watch);  // etcdctl's leadership ended...
    if (!next) next = co_await next_leader(watch);
    BOOST_TEST_REQUIRE(next.has_value());
    BOOST_TEST(next->value == "after-etcdctl");  // ...and ours began
    co_await e.async_resign(use_awaitable);
    BOOST_TEST(co_await count_keys(c, "elect-interop/") == 0);
  }(c));
}

// b. An election destroyed while it leads resigns in the background, as a mutex unlocks and a
// semaphore gives its permits back: the name is free for others at once, and the session's next
// election or mutex on the name does not adopt a key whose count nobody will ever give back
// (its resign or unlock would then leave the key in etcd until the session ends).
BOOST_AUTO_TEST_CASE(an_election_destroyed_while_leading_resigns) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, session_options{.ttl = 60s}, use_awaitable);
    auto other = co_await session::async_create(c, session_options{.ttl = 60s}, use_awaitable);
    auto first = std::make_unique<election>(s, "elect-destroyed");
    co_await first->async_campaign("first", use_awaitable);
    BOOST_TEST_REQUIRE(first->is_leader());
    first.reset();
    // Another session wins once the key is gone; before the fix it waited for the 60 s lease.
    election theirs(other, "elect-destroyed");
    auto won = co_await (theirs.async_campaign("theirs", use_awaitable) || sleep_for(5s));
    BOOST_TEST_REQUIRE(won.index() == 0u, "the destroyed leader's key still blocks the name");
    co_await theirs.async_resign(use_awaitable);
    // The session's next election and mutex on the name start from a clean count.
    election again(s, "elect-destroyed");
    co_await again.async_campaign("again", use_awaitable);
    co_await again.async_resign(use_awaitable);
    BOOST_TEST(co_await count_keys(c, "elect-destroyed/") == 0, "resign left the key to a count of the destroyed object");
    mutex m(s, "elect-destroyed");
    co_await m.async_lock(use_awaitable);
    co_await m.async_unlock(use_awaitable);
    BOOST_TEST(co_await count_keys(c, "elect-destroyed/") == 0, "unlock left the key to a count of the destroyed object");
    // Destroyed while its campaign still waits: the campaign gives up and leaves no key.
    election holder(other, "elect-destroyed");
    co_await holder.async_campaign("holder", use_awaitable);
    auto waiting = std::make_unique<election>(s, "elect-destroyed");
    auto got = std::make_shared<std::optional<error_code>>();
    waiting->async_campaign("waiting", [got](error_code ec) { *got = ec; });
    auto two_keys = [&c]() -> asio::awaitable<bool> { co_return co_await count_keys(c, "elect-destroyed/") == 2; };
    for (int i = 0; i < 200 && !co_await two_keys(); ++i) co_await sleep_for(10ms);
    waiting.reset();
    co_await holder.async_resign(use_awaitable);
    auto done = [got] { return got->has_value(); };
    BOOST_TEST_REQUIRE(co_await eventually(done, 5s));
    BOOST_TEST(**got == asio::error::operation_aborted);
    auto none = [&c]() -> asio::awaitable<bool> { co_return co_await count_keys(c, "elect-destroyed/") == 0; };
    bool clean = co_await none();
    for (int i = 0; i < 200 && !clean; ++i) {
      co_await sleep_for(10ms);
      clean = co_await none();
    }
    BOOST_TEST(clean, "a campaign that won for a destroyed object kept its key");
  }(c));
}

// g. A leader whose key someone deleted (by hand, or `etcdctl del`) has lost the leadership. A
// campaign then says so (session_lost, as for a proposal that vanished while waiting) and resets
// the state, so that the next campaign starts over and can win; before, it answered not_leader
// and is_leader() stayed true for good.
BOOST_AUTO_TEST_CASE(a_campaign_of_a_leader_whose_key_was_deleted_starts_over) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, use_awaitable);
    election e(s, "elect-deleted");
    co_await e.async_campaign("one", use_awaitable);
    BOOST_TEST_REQUIRE(e.is_leader());
    const auto first_rev = e.revision();
    co_await c.async_delete(e.key(), use_awaitable);
    auto [ec] = co_await e.async_campaign("two", asio::as_tuple(use_awaitable));
    BOOST_TEST(ec == error::session_lost, ec.message());
    BOOST_TEST(!e.is_leader());
    BOOST_TEST(e.revision() == 0);
    auto [pe] = co_await e.async_proclaim("three", asio::as_tuple(use_awaitable));
    BOOST_TEST(pe == error::not_leader);
    co_await e.async_campaign("four", use_awaitable);
    BOOST_TEST(e.is_leader());
    BOOST_TEST(e.revision() > first_rev);
    auto l = co_await e.async_leader(use_awaitable);
    BOOST_TEST(l.value == "four");
    co_await e.async_resign(use_awaitable);
    BOOST_TEST(co_await count_keys(c, "elect-deleted/") == 0);
  }(c));
}

// A mutex and an election of one session share the key NAME/<lease>. The client's view of the
// name parks an exclusive lock's txn (up to lock_view_core::park_limit, 3 ms) while a local holder
// is about to release, so that the txn rides on that release. It took for such a holder a mutex
// that unlocked while the election kept the key (a), and an election that had waited for its
// turn (b), whose resign never goes through the view: every later lock of the name in that
// client then parked for a release that never came, for as long as the election led. Measured
// as the quickest of 20 locks of the session's mutex while the election leads: at least 3 ms
// with the stale holder, one txn round trip (about 1 ms here) without.
BOOST_AUTO_TEST_CASE(a_key_an_election_keeps_does_not_park_later_locks) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, use_awaitable);
    auto rival = co_await session::async_create(c, use_awaitable);
    {
      // (a) The election wins at once; an observer runs the client's view of the name, through
      // which the mutex's locks then go. The first lock holds through the view, and its unlock
      // leaves the key to the election.
      election e(s, "elect-park-a");
      election_observer watching(c, "elect-park-a");
      mutex m(s, "elect-park-a");
      co_await e.async_campaign("v", use_awaitable);
      BOOST_TEST_REQUIRE(e.is_leader());
      const auto us = co_await quickest_lock_us(m, 20);
      BOOST_TEST_MESSAGE("(a) quickest lock: " << us << " us");
      BOOST_TEST(us < 3000, "every lock after the first parked for the mutex's unlock, which left the key");
      BOOST_TEST(e.is_leader());
      co_await e.async_resign(use_awaitable);
    }
    {
      // (b) The election waits behind another candidate, on the client's view, and wins there.
      election first(rival, "elect-park-b"), e(s, "elect-park-b");
      mutex m(s, "elect-park-b");
      co_await first.async_campaign("r", use_awaitable);
      auto won = started();
      e.async_campaign("v", record(won));
      BOOST_TEST_REQUIRE(co_await settled_keys(c, "elect-park-b/", 2) == 2);
      co_await first.async_resign(use_awaitable);
      BOOST_TEST_REQUIRE(co_await settled(won));
      BOOST_TEST_REQUIRE(!**won, (*won)->message());
      const auto us = co_await quickest_lock_us(m, 20);
      BOOST_TEST_MESSAGE("(b) quickest lock: " << us << " us");
      BOOST_TEST(us < 3000, "every lock parked for the leading election, which never releases through the view");
      co_await e.async_resign(use_awaitable);
    }
    co_await expect_no_keys(c, "elect-park-a");
    co_await expect_no_keys(c, "elect-park-b");
    co_await s.async_close(use_awaitable);
    co_await rival.async_close(use_awaitable);
  }(c));
}
