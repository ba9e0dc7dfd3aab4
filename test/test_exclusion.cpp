// Who may hold, on a real etcd: grants whose object is destroyed before their handler runs,
// permits and fences under an adopted lease, refused tries that are cancelled or destroyed.
#define BOOST_TEST_MODULE coetcd_exclusion
#include "support/fixture.hpp"
#include "support/tcp_proxy.hpp"

#include <boost/asio/bind_executor.hpp>

#include <algorithm>

using namespace coetcd;
using namespace coetcd::test;
using namespace std::chrono_literals;

BOOST_TEST_GLOBAL_FIXTURE(shared_etcd);

namespace {

/// Successful acquisitions of `name` by this client's objects so far: bumped by the grant's body,
/// before its handler is posted.
std::uint64_t acquired_count(const client& c, const std::string& name) {
  for (const auto& l : c.stats().locks)
    if (l.name == name) return l.acquired;
  return 0;
}

/// Runs the handlers waiting on `gate` (an io_context the test runs by hand) until `o` is set,
/// for up to 5 s; whether it was.
template <class Hold>
asio::awaitable<bool> settled_through(asio::io_context& gate, acquired<Hold> o) {
  for (int i = 0; i < 500 && !o->ec.has_value(); ++i) {
    gate.restart();
    gate.poll();
    if (!o->ec.has_value()) co_await sleep_for(10ms);
  }
  co_return o->ec.has_value();
}

}  // namespace

// ~mutex promises operation_aborted to the object's pending locks. A grant already on its way
// (the release before it ran in the same turn) used to complete with success after orphan() had
// released it, so the caller went on as a holder while another session held the name. Now such a
// grant is given back and its caller gets an empty hold.
BOOST_AUTO_TEST_CASE(a_mutex_destroyed_while_its_grant_is_on_the_way_reports_aborted) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, use_awaitable);
    auto other = co_await session::async_create(c, use_awaitable);
    for (int round = 0; round < 10; ++round) {
      const std::string name = "destroyed-grant-" + std::to_string(round);
      mutex b(s, name);
      auto held = co_await b.async_lock(use_awaitable);
      // Round 0..4: a callback (no cancellation slot); 5..9: a handler with a slot, as a
      // coroutine's, which takes the other delivery path.
      auto a = std::make_unique<mutex>(s, name);
      auto result = acquiring<mutex::hold>();
      asio::cancellation_signal never;
      if (round < 5) a->async_lock(record(result));
      else a->async_lock(asio::bind_cancellation_slot(never.slot(), record(result)));
      co_await sleep_for(50ms);  // a queues behind b locally
      BOOST_TEST_REQUIRE(!result->ec.has_value());
      auto released = started();
      held.async_release(record(released));
      a.reset();  // before the strand runs the release that grants a
      BOOST_TEST_REQUIRE(co_await settled(result));
      BOOST_TEST(*result->ec == asio::error::operation_aborted, result->ec->message());
      BOOST_TEST(!result->hold, "round " << round << ": the aborted lock handed over a hold");
      BOOST_TEST_REQUIRE(co_await settled(released));
      // The name is free once the given-back key's delete is done: another session takes it.
      BOOST_TEST(co_await settled_keys(c, name + "/", 0) == 0);
      mutex third(other, name);
      auto t = acquiring<mutex::hold>();
      third.async_try_lock(record(t));
      BOOST_TEST_REQUIRE(co_await settled(t));
      BOOST_TEST(!*t->ec, "round " << round << ": " << t->ec->message());
      BOOST_TEST(bool(t->hold));
      co_await t->hold.async_release(use_awaitable);
      co_await expect_no_keys(c, name);
    }
  }(c));
}

// The same promise for the grant ops (semaphore, election, multi_lock): the body has succeeded
// and posted the handler when the object goes. The handlers run on `gate`, an io_context this
// test runs by hand, so the destruction falls between the two for certain: the object kept no
// state that said "granted" once the hold went to the handler, so the window can no longer be
// watched from the loop.
BOOST_AUTO_TEST_CASE(grant_ops_destroyed_before_their_handler_runs_report_aborted) {
  asio::io_context ioc, gate;
  auto won = std::make_shared<std::vector<std::string>>();  // keys whose campaign's body succeeded
  auto o = options_for(server());
  o.on_event = [won](const event& e) {
    if (e.kind == event_kind::leader_changed && !e.key.empty()) won->push_back(e.key);
  };
  client c(ioc, o);
  run_for(ioc, [](client& c, asio::io_context& gate, std::shared_ptr<std::vector<std::string>> won) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, use_awaitable);
    auto other = co_await session::async_create(c, use_awaitable);
    for (int round = 0; round < 5; ++round) {
      {  // semaphore: 1 permit, held by b; a waits, b releases, a is destroyed as its turn comes
        const std::string name = "destroyed-sem-" + std::to_string(round);
        semaphore b(s, name, 1);
        auto held = co_await b.async_acquire(1, use_awaitable);
        auto a = std::make_unique<semaphore>(other, name, 1);
        auto result = acquiring<semaphore::hold>();
        a->async_acquire(1, asio::bind_executor(gate, record(result)));
        co_await sleep_for(50ms);
        held.async_release([](error_code) {});
        // b's acquisition was the name's first; a's grant is the second.
        std::function<bool()> granted = [&c, &name] { return acquired_count(c, name) >= 2; };
        BOOST_TEST_REQUIRE(co_await eventually(std::move(granted), 5000ms));
        BOOST_TEST_REQUIRE(!result->ec.has_value());
        a.reset();
        BOOST_TEST_REQUIRE(co_await settled_through(gate, result));
        BOOST_TEST(*result->ec == asio::error::operation_aborted, result->ec->message());
        BOOST_TEST(!result->hold, "the aborted acquisition handed over a hold");
        // The permit went back: b takes it again.
        BOOST_TEST(co_await settled_keys(c, name + "/", 0) == 0);
        auto again = acquiring<semaphore::hold>();
        b.async_try_acquire(1, record(again));
        BOOST_TEST_REQUIRE(co_await settled(again));
        BOOST_TEST(!*again->ec, again->ec->message());
        co_await again->hold.async_release(use_awaitable);
        co_await expect_no_keys(c, name);
      }
      {  // election: a campaigns behind b, b resigns, a is destroyed as it wins
        const std::string name = "destroyed-election-" + std::to_string(round);
        election b(s, name);
        auto lead = co_await b.async_campaign("b", use_awaitable);
        auto a = std::make_unique<election>(other, name);
        const std::string a_key = a->key();
        auto result = acquiring<election::hold>();
        a->async_campaign("a", asio::bind_executor(gate, record(result)));
        co_await sleep_for(50ms);
        lead.async_release([](error_code) {});
        // The campaign's body tells of its win (leader_changed, our key) just before it succeeds.
        std::function<bool()> wins = [won, a_key] { return std::find(won->begin(), won->end(), a_key) != won->end(); };
        BOOST_TEST_REQUIRE(co_await eventually(std::move(wins), 5000ms));
        BOOST_TEST_REQUIRE(!result->ec.has_value());
        a.reset();
        BOOST_TEST_REQUIRE(co_await settled_through(gate, result));
        BOOST_TEST(*result->ec == asio::error::operation_aborted, result->ec->message());
        BOOST_TEST(!result->hold, "the aborted campaign handed over a leadership");
        co_await expect_no_keys(c, name);
      }
      {  // multi_lock over two names
        const std::string n1 = "destroyed-multi-a-" + std::to_string(round), n2 = "destroyed-multi-b-" + std::to_string(round);
        mutex b1(s, n1), b2(s, n2);
        auto held = co_await b1.async_lock(use_awaitable);
        mutex a1(other, n1), a2(other, n2);
        auto a = std::make_unique<multi_lock>(std::vector<multi_lock::part>{a1, a2});
        auto result = acquiring<multi_lock::hold>();
        a->async_lock(asio::bind_executor(gate, record(result)));
        co_await sleep_for(50ms);
        held.async_release([](error_code) {});
        // n2 is the last part: its grant is the name's first. After it the body only resumes and
        // succeeds, locally; the pause lets it.
        std::function<bool()> last_part = [&c, &n2] { return acquired_count(c, n2) >= 1; };
        BOOST_TEST_REQUIRE(co_await eventually(std::move(last_part), 5000ms));
        co_await sleep_for(100ms);
        BOOST_TEST_REQUIRE(!result->ec.has_value());
        a.reset();
        BOOST_TEST_REQUIRE(co_await settled_through(gate, result));
        BOOST_TEST(*result->ec == asio::error::operation_aborted, result->ec->message());
        BOOST_TEST(!result->hold, "the aborted multi_lock handed over a hold");
        BOOST_TEST(co_await settled_keys(c, n1 + "/", 0) == 0);
        BOOST_TEST(co_await settled_keys(c, n2 + "/", 0) == 0);
        auto t1 = acquiring<mutex::hold>(), t2 = acquiring<mutex::hold>();
        b1.async_try_lock(record(t1));
        b2.async_try_lock(record(t2));
        BOOST_TEST_REQUIRE(co_await settled(t1));
        BOOST_TEST_REQUIRE(co_await settled(t2));
        BOOST_TEST(!*t1->ec, t1->ec->message());
        BOOST_TEST(!*t2->ec, t2->ec->message());
        co_await t1->hold.async_release(use_awaitable);
        co_await t2->hold.async_release(use_awaitable);
        co_await expect_no_keys(c, n1);
        co_await expect_no_keys(c, n2);
      }
    }
  }(c, gate, won));
}

// Permit keys are `name/<lease>_<n>`. A session that adopts a lease (a restarted process, or
// another client) used to count n from 1 again, and its acquire txn adopted the other holder's
// key: two holders on one key, so a 2-permit semaphore admitted a third, and one release deleted
// the other holder's key.
BOOST_AUTO_TEST_CASE(a_semaphore_under_an_adopted_lease_never_over_admits) {
  asio::io_context ioc;
  client c1(ioc, options_for(server()));
  client c2(ioc, options_for(server()));
  run_for(ioc, [](client& c1, client& c2) -> asio::awaitable<void> {
    const std::string name = "adopted-permits";
    auto s1 = co_await session::async_create(c1, use_awaitable);
    auto s2 = co_await session::async_create(c2, session_options{.lease = s1.lease()}, use_awaitable);
    auto s3 = co_await session::async_create(c1, use_awaitable);
    semaphore a(s1, name, 2), b(s2, name, 2), third(s3, name, 2);
    auto a_hold = co_await a.async_acquire(1, use_awaitable);
    auto b_hold = co_await b.async_acquire(1, use_awaitable);
    BOOST_TEST(a_hold.key() != b_hold.key());
    BOOST_TEST(co_await count_keys(c1, name + "/") == 2, "each acquisition keeps a key of its own");
    auto t = acquiring<semaphore::hold>();
    third.async_try_acquire(1, record(t));
    BOOST_TEST_REQUIRE(co_await settled(t));
    BOOST_TEST(*t->ec == error::locked, "a third holder of 2 permits: " << t->ec->message());
    BOOST_TEST(!t->hold);
    co_await b_hold.async_release(use_awaitable);
    BOOST_TEST(co_await count_keys(c1, name + "/") == 1, "b's release deleted only its own key");
    BOOST_TEST(bool(a_hold));
    co_await a_hold.async_release(use_awaitable);
    co_await expect_no_keys(c1, name);
  }(c1, c2));
}

// Two sessions of one lease are one holder as far as etcd can tell (as in Go), but a fence must
// still tell their holds apart: the adopting hold puts the key again, so the compare built by the
// hold before it fails.
BOOST_AUTO_TEST_CASE(a_hold_under_an_adopted_lease_moves_the_fence) {
  asio::io_context ioc;
  client c1(ioc, options_for(server()));
  client c2(ioc, options_for(server()));
  run_for(ioc, [](client& c1, client& c2) -> asio::awaitable<void> {
    const std::string name = "adopted-fence";
    auto s1 = co_await session::async_create(c1, use_awaitable);
    mutex first(s1, name);
    auto first_hold = co_await first.async_lock(use_awaitable);
    const auto old_fence = first_hold.fence();
    const auto old_token = first_hold.fencing_token();
    auto s2 = co_await session::async_create(c2, session_options{.lease = s1.lease()}, use_awaitable);
    mutex second(s2, name);
    auto second_hold = co_await second.async_lock(use_awaitable);
    BOOST_TEST(second_hold.fencing_token() > old_token);
    auto stale_txn = txn().when(old_fence).then(txn_op::put(name + "-data", "stale"));
    auto stale = co_await c1.async_txn(stale_txn, use_awaitable);
    BOOST_TEST(!stale.succeeded, "the first hold's fence still passes under the adopting hold");
    auto fresh_txn = txn().when(second_hold.fence()).then(txn_op::put(name + "-data", "fresh"));
    auto fresh = co_await c2.async_txn(fresh_txn, use_awaitable);
    BOOST_TEST(fresh.succeeded);
    co_await second_hold.async_release(use_awaitable);
    first_hold.async_release([](error_code) {});  // its key is gone: session_lost
    co_await c1.async_delete(name + "-data", use_awaitable);
    co_await expect_no_keys(c1, name);
  }(c1, c2));
}

// The write side of an rw_mutex fences by its key's create revision (Go's recipe orders its queue
// by mod revision, so the key is never put again): under an adopted lease it gives the key up and
// queues again with a new one, so the hold before it fails its compare there too.
BOOST_AUTO_TEST_CASE(a_write_hold_under_an_adopted_lease_moves_the_fence) {
  asio::io_context ioc;
  client c1(ioc, options_for(server()));
  client c2(ioc, options_for(server()));
  run_for(ioc, [](client& c1, client& c2) -> asio::awaitable<void> {
    const std::string name = "adopted-rw-fence";
    auto s1 = co_await session::async_create(c1, use_awaitable);
    rw_mutex first(s1, name);
    auto first_hold = co_await first.async_lock(use_awaitable);
    const auto old_fence = first_hold.fence();
    auto s2 = co_await session::async_create(c2, session_options{.lease = s1.lease()}, use_awaitable);
    rw_mutex second(s2, name);
    auto second_hold = co_await second.async_lock(use_awaitable);
    auto stale_txn = txn().when(old_fence).then(txn_op::put(name + "-data", "stale"));
    auto stale = co_await c1.async_txn(stale_txn, use_awaitable);
    BOOST_TEST(!stale.succeeded, "the first write hold's fence still passes under the adopting hold");
    auto fresh_txn = txn().when(second_hold.fence()).then(txn_op::put(name + "-data", "fresh"));
    auto fresh = co_await c2.async_txn(fresh_txn, use_awaitable);
    BOOST_TEST(fresh.succeeded);
    co_await second_hold.async_release(use_awaitable);
    first_hold.async_release([](error_code) {});
    co_await c1.async_delete(name + "-data", use_awaitable);
    co_await expect_no_keys(c1, name);
  }(c1, c2));
}

// A refused try deletes the key its txn made before it completes, so a process that exits on
// `locked` leaves none. Cancelled meanwhile, it must complete at once (the delete goes on in the
// background), as every other wait does: it used to wait out the delete, up to the session's TTL
// through an outage. Every byte through the proxy takes 1.5 s each way, so the delete takes ~3 s.
BOOST_AUTO_TEST_CASE(a_refused_try_cancelled_during_its_clean_up_completes_at_once) {
  asio::io_context ioc;
  tcp_proxy proxy(server().endpoint());
  client direct(ioc, options_for(server()));
  client slow(ioc, via(proxy, 20s));
  run_for(
      ioc,
      [](tcp_proxy& proxy, client& direct, client& slow) -> asio::awaitable<void> {
        auto holder = co_await session::async_create(direct, use_awaitable);
        auto s = co_await session::async_create(slow, session_options{.ttl = 30s}, use_awaitable);
        // 0: a mutex's try, cancelled; 1: a semaphore's; 2: a mutex's, its mutex destroyed (as
        // ~mutex promises its pending locks: operation_aborted at once).
        for (int variant : {0, 1, 2}) {
          const bool sem = variant == 1;
          const std::string name = "refused-try-" + std::to_string(variant);
          mutex hm(holder, name);
          semaphore hs(holder, name, 1);
          mutex::hold lock_held;
          semaphore::hold permit_held;
          if (sem) permit_held = co_await hs.async_acquire(1, use_awaitable);
          else lock_held = co_await hm.async_lock(use_awaitable);
          auto m = std::make_unique<mutex>(s, name);
          semaphore p(s, name, 1);
          proxy.delay(1500ms);
          asio::cancellation_signal sig;
          auto lock_got = acquiring<mutex::hold>();
          auto permit_got = acquiring<semaphore::hold>();
          const std::optional<error_code>& result = sem ? permit_got->ec : lock_got->ec;  // the one started
          const auto txns = rpcs_sent(slow, "Txn");
          if (sem) p.async_try_acquire(1, asio::bind_cancellation_slot(sig.slot(), record(permit_got)));
          else m->async_try_lock(asio::bind_cancellation_slot(sig.slot(), record(lock_got)));
          // The try's txn, then (once it is answered, ~3 s) the clean-up's guarded delete, a txn
          // too, answered ~3 s after it went out: cancel halfway.
          BOOST_TEST_REQUIRE(co_await eventually([&] { return rpcs_sent(slow, "Txn") >= txns + 2; }, 15000ms));
          co_await sleep_for(1500ms);
          BOOST_TEST_REQUIRE(!result.has_value(), "the try completed before its delete was answered");
          const auto cancelled_at = std::chrono::steady_clock::now();
          if (variant == 2) m.reset();
          else sig.emit(asio::cancellation_type::terminal);
          std::function<bool()> done = [&result] { return result.has_value(); };
          BOOST_TEST_REQUIRE(co_await eventually(std::move(done), 5000ms));
          const auto took = std::chrono::steady_clock::now() - cancelled_at;
          BOOST_TEST(*result == asio::error::operation_aborted, result->message());
          BOOST_TEST(!lock_got->hold);
          BOOST_TEST(!permit_got->hold);
          BOOST_TEST(took < 500ms, "variant " << variant << ": the cancelled try took "
                                   << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                                   << " ms after its cancellation");
          proxy.delay(0ms);
          if (sem) co_await permit_held.async_release(use_awaitable);
          else co_await lock_held.async_release(use_awaitable);
          co_await sleep_for(2s);  // the clean-up's delete is answered 1.5 s after the cancellation
          co_await expect_no_keys(direct, name);
        }
      }(proxy, direct, slow),
      60s);
}
