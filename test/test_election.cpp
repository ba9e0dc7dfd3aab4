// Leader election and observation against a real etcd, including etcdctl interop.
#define BOOST_TEST_MODULE coetcd_election
#include "support/fixture.hpp"

using namespace coetcd;
using namespace coetcd::test;
using namespace std::chrono_literals;

BOOST_TEST_GLOBAL_FIXTURE(shared_etcd);

namespace {
asio::awaitable<std::optional<key_value>> next_leader(election_observer& o) {
  co_return co_await o.async_next(use_awaitable);
}

/// The quickest of `rounds` locks (each released again) of `m`, in microseconds.
asio::awaitable<std::int64_t> quickest_lock_us(mutex& m, int rounds) {
  auto quickest = std::chrono::steady_clock::duration::max();
  for (int i = 0; i < rounds; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    auto held = co_await m.async_lock(use_awaitable);
    quickest = std::min(quickest, std::chrono::steady_clock::now() - t0);
    co_await held.async_release(use_awaitable);
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
    // Nothing to resign without leading: an empty hold says so.
    election::hold nothing;
    auto [no] = co_await nothing.async_release(asio::as_tuple(use_awaitable));
    BOOST_TEST(no == asio::error::bad_descriptor, no.message());
    BOOST_TEST(!nothing);
    auto [nl, none] = co_await a.async_leader(asio::as_tuple(use_awaitable));
    BOOST_TEST(nl == error::no_leader);

    auto alpha = co_await a.async_campaign("alpha", use_awaitable);
    BOOST_TEST(bool(alpha));
    BOOST_TEST(alpha.key() == a.key());
    BOOST_TEST(alpha.lease() == sa.lease());
    // Each winner's hold is kept by its handler's record: a dropped one would resign at once.
    struct won {
      std::vector<std::string> order;
      election::hold beta, gamma;
    };
    auto done = std::make_shared<won>();
    b.async_campaign("beta", [done](error_code ec, election::hold h) {
      done->order.push_back(ec ? ec.message() : "beta");
      done->beta = std::move(h);
    });
    co_await sleep_for(100ms);
    cc.async_campaign("gamma", [done](error_code ec, election::hold h) {
      done->order.push_back(ec ? ec.message() : "gamma");
      done->gamma = std::move(h);
    });
    co_await sleep_for(300ms);
    BOOST_TEST(done->order.empty());  // both wait behind alpha
    // A waiting candidate has no leadership to proclaim with: the leader's value stays.
    auto [pe] = co_await done->beta.async_proclaim("not yet", asio::as_tuple(use_awaitable));
    BOOST_TEST(pe == asio::error::bad_descriptor, pe.message());

    auto l = co_await a.async_leader(use_awaitable);
    BOOST_TEST(l.value == "alpha");
    BOOST_TEST(l.key == a.key());
    BOOST_TEST(l.create_revision == alpha.fencing_token());
    co_await alpha.async_proclaim("alpha-2", use_awaitable);
    const auto alpha_token = alpha.fencing_token();
    co_await alpha.async_release(use_awaitable);
    BOOST_TEST(!alpha);
    BOOST_TEST(alpha.fencing_token() == 0);
    auto [twice] = co_await alpha.async_release(asio::as_tuple(use_awaitable));
    BOOST_TEST(twice == error::not_locked, twice.message());
    for (int i = 0; i < 100 && done->order.size() < 1; ++i) co_await sleep_for(10ms);
    BOOST_TEST_REQUIRE(done->order.size() == 1u);
    BOOST_TEST(done->order.at(0) == "beta");
    BOOST_TEST(bool(done->beta));
    BOOST_TEST(done->beta.fencing_token() > alpha_token);
    const auto beta_token = done->beta.fencing_token();
    co_await done->beta.async_release(use_awaitable);
    for (int i = 0; i < 100 && done->order.size() < 2; ++i) co_await sleep_for(10ms);
    BOOST_TEST_REQUIRE(done->order.size() == 2u);
    BOOST_TEST(done->order.at(1) == "gamma");
    BOOST_TEST(bool(done->gamma));
    BOOST_TEST(done->gamma.fencing_token() > beta_token);
    co_await done->gamma.async_release(use_awaitable);

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
    auto held = co_await m.async_lock(use_awaitable);
    auto lead = co_await e.async_campaign("v", use_awaitable);
    BOOST_TEST(bool(lead));
    BOOST_TEST(co_await count_keys(c, "elect-shared/") == 1);  // one key for both
    BOOST_TEST(lead.key() == held.key());
    co_await lead.async_release(use_awaitable);
    BOOST_TEST(!lead);
    BOOST_TEST(co_await count_keys(c, "elect-shared/") == 1, "resign removed the key the mutex holds");
    auto owned_check = txn().when(held.fence());
    auto owned = co_await c.async_txn(owned_check, use_awaitable);
    BOOST_TEST(owned.succeeded);
    // The leadership is over though its key stays: its fence no longer holds.
    auto led_check = txn().when(lead.fence());
    auto led = co_await c.async_txn(led_check, use_awaitable);
    BOOST_TEST(!led.succeeded, "the fence of a resigned leadership still held");
    mutex theirs(other, "elect-shared");
    auto [busy, none] = co_await theirs.async_try_lock(asio::as_tuple(use_awaitable));
    BOOST_TEST(busy == error::locked);
    BOOST_TEST(!none);
    co_await held.async_release(use_awaitable);
    BOOST_TEST(co_await count_keys(c, "elect-shared/") == 0);
    auto next = co_await theirs.async_lock(use_awaitable);
    co_await next.async_release(use_awaitable);
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
    auto one = co_await e1.async_campaign("one", use_awaitable);
    const auto one_token = one.fencing_token();
    auto got = acquiring<election::hold>();
    e2.async_campaign("two", record(got));
    co_await sleep_for(200ms);
    const auto lease = s1.lease();
    s1.orphan();  // the leader's process "dies": its lease expires after the TTL
    auto t0 = std::chrono::steady_clock::now();
    // What etcd says is left of the lease at that moment: the next leader must wait that long.
    // "> 1 s" passed a library that elected e2 up to two seconds early.
    auto left = co_await c.async_lease_time_to_live(lease, false, use_awaitable);
    BOOST_TEST_REQUIRE(left.ttl.count() > 0, "the orphaned lease is already gone");
    for (int i = 0; i < 600 && !got->ec.has_value(); ++i) co_await sleep_for(10ms);
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    BOOST_TEST_REQUIRE(got->ec.has_value());
    BOOST_TEST(!*got->ec);
    BOOST_TEST(bool(got->hold));
    BOOST_TEST(got->hold.fencing_token() > one_token);
    // The orphaned leader's hold is lost with its lease (told by the local deadline at the latest).
    BOOST_TEST(!one);
    BOOST_TEST_MESSAGE("the lease had " << left.ttl.count() << " s left at the orphaning; the next leader after " << waited
                                        << " s");
    // etcd gives the whole seconds left, rounded down (int64 of Remaining().Seconds()), asked
    // after t0: the lease cannot expire sooner than that after t0. Its expiry is checked every
    // 500 ms: not long after either.
    BOOST_TEST(waited >= static_cast<double>(left.ttl.count()));
    BOOST_TEST(waited < left.ttl.count() + 3.0);
    co_await got->hold.async_release(use_awaitable);
    // Cancelling a waiting campaign removes the proposal.
    auto s3 = co_await session::async_create(c, use_awaitable);
    election e3(s3, "elect-loss");
    auto two = co_await e2.async_campaign("two again", use_awaitable);
    asio::cancellation_signal sig;
    auto r3 = acquiring<election::hold>();
    e3.async_campaign("three", asio::bind_cancellation_slot(sig.slot(), record(r3)));
    co_await sleep_for(200ms);
    BOOST_TEST(co_await count_keys(c, "elect-loss/") == 2);
    sig.emit(asio::cancellation_type::terminal);
    BOOST_TEST_REQUIRE(co_await settled(r3, 1s));
    BOOST_TEST(*r3->ec == asio::error::operation_aborted);
    BOOST_TEST(!r3->hold);
    BOOST_TEST(co_await count_keys(c, "elect-loss/") == 1);
    co_await two.async_release(use_awaitable);
    BOOST_TEST(co_await count_keys(c, "elect-loss/") == 0);
  }(c));
}

BOOST_AUTO_TEST_CASE(etcdctl_elect_and_coetcd_see_each_other) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, use_awaitable);
    election e(s, "elect-interop");
    auto lead = co_await e.async_campaign("coetcd-leader", use_awaitable);
    auto listen = run_command("timeout 2 env ETCDCTL_API=3 " + etcdctl_binary() + " --endpoints=" + server().client_url() +
                              " elect -l elect-interop");
    BOOST_TEST(listen.output.find("coetcd-leader") != std::string::npos, listen.output);
    BOOST_TEST(listen.output.find(lead.key()) != std::string::npos, listen.output);
    co_await lead.async_release(use_awaitable);

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
    auto after = co_await e.async_campaign("after-etcdctl", use_awaitable);
    BOOST_TEST((std::chrono::steady_clock::now() - t0 > 1s));
    BOOST_TEST(bool(after));
    candidate.get();
    auto next = co_await next_leader(watch);  // etcdctl's leadership ended...
    if (!next) next = co_await next_leader(watch);
    BOOST_TEST_REQUIRE(next.has_value());
    BOOST_TEST(next->value == "after-etcdctl");  // ...and ours began
    BOOST_TEST(next->create_revision == after.fencing_token());
    co_await after.async_release(use_awaitable);
    BOOST_TEST(co_await count_keys(c, "elect-interop/") == 0);
  }(c));
}

// b. A leadership (election::hold) destroyed while it leads resigns in the background, as a mutex
// hold releases and a semaphore hold gives its permits back: the name is free for others at once,
// and the session's next election or mutex on the name does not adopt a key whose count nobody
// will ever give back (its resign or release would then leave the key in etcd until the session
// ends). Destroying the election object leaves its leadership alone; with a campaign pending, it
// aborts that campaign, which leaves no key.
BOOST_AUTO_TEST_CASE(a_leadership_destroyed_while_leading_resigns) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, session_options{.ttl = 60s}, use_awaitable);
    auto other = co_await session::async_create(c, session_options{.ttl = 60s}, use_awaitable);
    auto first = std::make_unique<election>(s, "elect-destroyed");
    auto lead = co_await first->async_campaign("first", use_awaitable);
    BOOST_TEST_REQUIRE(bool(lead));
    // The object goes; the leadership stays (it used to resign with the object).
    first.reset();
    election theirs(other, "elect-destroyed");
    co_await sleep_for(200ms);
    BOOST_TEST(bool(lead));
    auto still = co_await theirs.async_leader(use_awaitable);
    BOOST_TEST(still.value == "first");
    BOOST_TEST(still.create_revision == lead.fencing_token());
    co_await lead.async_proclaim("first-2", use_awaitable);  // the hold still works without its object
    // Another session waits behind it, and wins once the hold is destroyed; had the hold not
    // resigned, it would wait for the 60 s lease.
    auto their = acquiring<election::hold>();
    theirs.async_campaign("theirs", record(their));
    BOOST_TEST_REQUIRE(co_await settled_keys(c, "elect-destroyed/", 2) == 2);
    BOOST_TEST(!their->ec.has_value());
    { auto dying = std::move(lead); }
    BOOST_TEST(!lead);  // moved from: empty
    BOOST_TEST_REQUIRE(co_await settled(their), "the destroyed leadership's key still blocks the name");
    BOOST_TEST_REQUIRE(!*their->ec, their->ec->message());
    BOOST_TEST(bool(their->hold));
    auto now = co_await theirs.async_leader(use_awaitable);
    BOOST_TEST(now.value == "theirs");
    co_await their->hold.async_release(use_awaitable);
    // The session's next election and mutex on the name start from a clean count.
    election again(s, "elect-destroyed");
    auto again_lead = co_await again.async_campaign("again", use_awaitable);
    co_await again_lead.async_release(use_awaitable);
    BOOST_TEST(co_await count_keys(c, "elect-destroyed/") == 0, "resign left the key to a count of the destroyed hold");
    mutex m(s, "elect-destroyed");
    auto held = co_await m.async_lock(use_awaitable);
    co_await held.async_release(use_awaitable);
    BOOST_TEST(co_await count_keys(c, "elect-destroyed/") == 0, "release left the key to a count of the destroyed hold");
    // Destroyed while its campaign still waits: the campaign gives up and leaves no key.
    election holder(other, "elect-destroyed");
    auto holder_lead = co_await holder.async_campaign("holder", use_awaitable);
    auto waiting = std::make_unique<election>(s, "elect-destroyed");
    auto got = acquiring<election::hold>();
    waiting->async_campaign("waiting", record(got));
    auto two_keys = [&c]() -> asio::awaitable<bool> { co_return co_await count_keys(c, "elect-destroyed/") == 2; };
    for (int i = 0; i < 200 && !co_await two_keys(); ++i) co_await sleep_for(10ms);
    waiting.reset();
    co_await holder_lead.async_release(use_awaitable);
    BOOST_TEST_REQUIRE(co_await settled(got));
    BOOST_TEST(*got->ec == asio::error::operation_aborted);
    BOOST_TEST(!got->hold);
    auto none = [&c]() -> asio::awaitable<bool> { co_return co_await count_keys(c, "elect-destroyed/") == 0; };
    bool clean = co_await none();
    for (int i = 0; i < 200 && !clean; ++i) {
      co_await sleep_for(10ms);
      clean = co_await none();
    }
    BOOST_TEST(clean, "a campaign that won for a destroyed object kept its key");
  }(c));
}

// One session is one candidate per name: a second campaign of the session while its first waits
// or leads is refused with already_started, through the same election object or another one, and
// changes nothing (it used to proclaim its value over the leader's). Once the first leadership
// ends, the session campaigns again.
BOOST_AUTO_TEST_CASE(a_second_campaign_of_one_session_is_refused) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, use_awaitable);
    auto other = co_await session::async_create(c, use_awaitable);
    election e(s, "elect-twice"), e_too(s, "elect-twice");
    auto lead = co_await e.async_campaign("first", use_awaitable);
    BOOST_TEST_REQUIRE(bool(lead));
    const auto first_token = lead.fencing_token();
    // While it leads.
    auto [same, none] = co_await e.async_campaign("second", asio::as_tuple(use_awaitable));
    BOOST_TEST(same == asio::error::already_started, same.message());
    BOOST_TEST(!none);
    auto [another, none_too] = co_await e_too.async_campaign("third", asio::as_tuple(use_awaitable));
    BOOST_TEST(another == asio::error::already_started, another.message());
    BOOST_TEST(!none_too);
    BOOST_TEST(bool(lead));
    auto l = co_await e.async_leader(use_awaitable);
    BOOST_TEST(l.value == "first", "a refused campaign proclaimed " << l.value);
    BOOST_TEST(co_await count_keys(c, "elect-twice/") == 1);

    // While it waits: a campaign of the other session queues behind `lead`.
    election theirs(other, "elect-twice"), theirs_too(other, "elect-twice");
    auto waiting = acquiring<election::hold>();
    theirs.async_campaign("waiting", record(waiting));
    BOOST_TEST_REQUIRE(co_await settled_keys(c, "elect-twice/", 2) == 2);
    auto [queued, none_queued] = co_await theirs_too.async_campaign("queued", asio::as_tuple(use_awaitable));
    BOOST_TEST(queued == asio::error::already_started, queued.message());
    BOOST_TEST(!none_queued);
    auto [again, none_again] = co_await theirs.async_campaign("again", asio::as_tuple(use_awaitable));
    BOOST_TEST(again == asio::error::already_started, again.message());
    BOOST_TEST(!none_again);
    BOOST_TEST(!waiting->ec.has_value(), "the refusal ended the waiting campaign");
    BOOST_TEST(co_await count_keys(c, "elect-twice/") == 2);

    // The first leadership ends: the waiting campaign wins with its own value, and the session
    // that led campaigns again (behind it).
    co_await lead.async_release(use_awaitable);
    BOOST_TEST_REQUIRE(co_await settled(waiting));
    BOOST_TEST_REQUIRE(!*waiting->ec, waiting->ec->message());
    auto now = co_await e.async_leader(use_awaitable);
    BOOST_TEST(now.value == "waiting");
    auto back = acquiring<election::hold>();
    e_too.async_campaign("back", record(back));
    BOOST_TEST_REQUIRE(co_await settled_keys(c, "elect-twice/", 2) == 2);
    BOOST_TEST(!back->ec.has_value());
    co_await waiting->hold.async_release(use_awaitable);
    BOOST_TEST_REQUIRE(co_await settled(back));
    BOOST_TEST_REQUIRE(!*back->ec, back->ec->message());
    BOOST_TEST(back->hold.fencing_token() > first_token);
    co_await back->hold.async_release(use_awaitable);
    co_await expect_no_keys(c, "elect-twice");
    co_await s.async_close(use_awaitable);
    co_await other.async_close(use_awaitable);
  }(c));
}

// g. A leader whose key someone deleted (by hand, or `etcdctl del`) has lost the leadership; its
// hold learns it when it acts: a proclaim finds the key gone (not_leader, and it writes nothing),
// the hold turns false, and its loss waits complete with success and loss_reason::kind::key_gone.
// Until then the hold counts as leading, so a second campaign of the session is refused
// (already_started); after, the next campaign starts over and can win. (The old campaign over a
// deleted key answered session_lost, and a proclaim left is_leader() true.)
BOOST_AUTO_TEST_CASE(a_proclaim_of_a_leader_whose_key_was_deleted_ends_the_leadership) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, use_awaitable);
    election e(s, "elect-deleted");
    auto lead = co_await e.async_campaign("one", use_awaitable);
    BOOST_TEST_REQUIRE(bool(lead));
    const auto first_rev = lead.fencing_token();
    BOOST_TEST(first_rev > 0);
    auto lost = waiting_for_loss();
    lead.async_wait_lost(record(lost));
    co_await c.async_delete(lead.key(), use_awaitable);
    auto [ec, none] = co_await e.async_campaign("two", asio::as_tuple(use_awaitable));
    BOOST_TEST(ec == asio::error::already_started, ec.message());
    BOOST_TEST(!none);

    auto [pe] = co_await lead.async_proclaim("three", asio::as_tuple(use_awaitable));
    BOOST_TEST(pe == error::not_leader, pe.message());
    BOOST_TEST(!lead);
    BOOST_TEST(lead.fencing_token() == 0);
    BOOST_TEST(co_await count_keys(c, "elect-deleted/") == 0, "the failed proclaim wrote the key again");
    BOOST_TEST_REQUIRE(co_await settled(lost));
    BOOST_TEST(!(*lost)->ec, (*lost)->ec.message());
    BOOST_TEST(((*lost)->reason.what == loss_reason::kind::key_gone));
    BOOST_TEST((*lost)->reason.cause == error::not_leader, (*lost)->reason.cause.message());
    // A wait begun after the loss hears it too.
    auto [late, why] = co_await lead.async_wait_lost(asio::as_tuple(use_awaitable));
    BOOST_TEST(!late, late.message());
    BOOST_TEST((why.what == loss_reason::kind::key_gone));
    // Its fence never holds again.
    auto check = txn().when(lead.fence());
    auto fenced = co_await c.async_txn(check, use_awaitable);
    BOOST_TEST(!fenced.succeeded);

    auto next = co_await e.async_campaign("four", use_awaitable);
    BOOST_TEST(bool(next));
    BOOST_TEST(next.fencing_token() > first_rev);
    auto l = co_await e.async_leader(use_awaitable);
    BOOST_TEST(l.value == "four");
    co_await next.async_release(use_awaitable);
    BOOST_TEST(co_await count_keys(c, "elect-deleted/") == 0);
  }(c));
}

// A mutex and an election of one session share the key NAME/<lease>. The client's view of the
// name parks an exclusive lock's txn (up to lock_view_core::park_limit, 3 ms) while a local holder
// is about to release, so that the txn rides on that release. It took for such a holder a mutex
// that released while the election kept the key (a), and an election that had waited for its
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
      auto lead = co_await e.async_campaign("v", use_awaitable);
      BOOST_TEST_REQUIRE(bool(lead));
      const auto us = co_await quickest_lock_us(m, 20);
      BOOST_TEST_MESSAGE("(a) quickest lock: " << us << " us");
      BOOST_TEST(us < 3000, "every lock after the first parked for the mutex's release, which left the key");
      BOOST_TEST(bool(lead));
      co_await lead.async_release(use_awaitable);
    }
    {
      // (b) The election waits behind another candidate, on the client's view, and wins there.
      election first(rival, "elect-park-b"), e(s, "elect-park-b");
      mutex m(s, "elect-park-b");
      auto theirs = co_await first.async_campaign("r", use_awaitable);
      auto won = acquiring<election::hold>();
      e.async_campaign("v", record(won));
      BOOST_TEST_REQUIRE(co_await settled_keys(c, "elect-park-b/", 2) == 2);
      co_await theirs.async_release(use_awaitable);
      BOOST_TEST_REQUIRE(co_await settled(won));
      BOOST_TEST_REQUIRE(!*won->ec, won->ec->message());
      const auto us = co_await quickest_lock_us(m, 20);
      BOOST_TEST_MESSAGE("(b) quickest lock: " << us << " us");
      BOOST_TEST(us < 3000, "every lock parked for the leading election, which never releases through the view");
      BOOST_TEST(bool(won->hold));
      co_await won->hold.async_release(use_awaitable);
    }
    co_await expect_no_keys(c, "elect-park-a");
    co_await expect_no_keys(c, "elect-park-b");
    co_await s.async_close(use_awaitable);
    co_await rival.async_close(use_awaitable);
  }(c));
}
