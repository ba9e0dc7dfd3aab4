// The counting semaphore against a real etcd: never more permits held than it has, FIFO (a big
// request is not overtaken), try, bad input and disagreeing processes, cancellation, session loss,
// with_permits, holds that outlive their object and give their permits back when dropped, and a
// SIGKILLed holder whose permits come back after its TTL and not before.
#define BOOST_TEST_MODULE coetcd_semaphore
#include "support/child_process.hpp"
#include "support/fixture.hpp"

#include <coetcd/semaphore.hpp>
#include <coetcd/with_lock.hpp>

#include <boost/asio/experimental/awaitable_operators.hpp>

#include <algorithm>
#include <memory>
#include <optional>
#include <random>
#include <vector>

using namespace coetcd;
using namespace coetcd::test;
using namespace std::chrono_literals;
using namespace boost::asio::experimental::awaitable_operators;

BOOST_TEST_GLOBAL_FIXTURE(shared_etcd);

// One key per acquisition under the session's lease, "<lease hex>_<n hex>" holding
// "<n>/<permits>"; bad arguments fail before any key is made. A hold released twice says
// not_locked; an empty one, bad_descriptor.
BOOST_AUTO_TEST_CASE(keys_values_and_bad_arguments) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, use_awaitable);
    BOOST_CHECK_THROW(semaphore(s, "", 3), boost::system::system_error);
    BOOST_CHECK_THROW(semaphore(s, "sem-layout", 0), boost::system::system_error);
    try {
      semaphore(s, "sem-layout", -1);
    } catch (const boost::system::system_error& e) {
      BOOST_TEST(e.code() == error::invalid_argument);
    }
    semaphore sem(s, "sem-layout", 3);
    BOOST_TEST(sem.permits() == 3);
    auto two = co_await sem.async_acquire(2, use_awaitable);
    auto one = co_await sem.async_acquire(1, use_awaitable);
    BOOST_TEST((two && one));
    BOOST_TEST(two.permits() == 2);
    BOOST_TEST(one.permits() == 1);
    auto r = co_await c.async_get("sem-layout/", get_options{.prefix = true, .order = sort_order::ascend,
                                                             .target = sort_target::create_revision},
                                  use_awaitable);
    BOOST_TEST_REQUIRE(r.kvs.size() == 2u);
    // `<lease>_<n>`: a session numbers its keys on from a random start (see test_exclusion: a
    // session adopting the lease must not number them as another session of it did).
    const std::string mine = "sem-layout/" + hex(s.lease()) + "_";
    BOOST_TEST_REQUIRE(r.kvs[0].key.starts_with(mine));
    BOOST_TEST_REQUIRE(r.kvs[1].key.starts_with(mine));
    const auto n0 = std::stoull(r.kvs[0].key.substr(mine.size()), nullptr, 16);
    const auto n1 = std::stoull(r.kvs[1].key.substr(mine.size()), nullptr, 16);
    BOOST_TEST(n1 == n0 + 1);
    BOOST_TEST(r.kvs[0].value == "2/3");
    BOOST_TEST(r.kvs[1].value == "1/3");
    BOOST_TEST(r.kvs[0].lease == s.lease());
    BOOST_TEST(two.key() == r.kvs[0].key);
    BOOST_TEST(one.key() == r.kvs[1].key);
    for (std::int64_t bad : {0, -1, 4}) {
      auto [e, eh] = co_await sem.async_acquire(bad, asio::as_tuple(use_awaitable));
      BOOST_TEST(e == error::invalid_argument, bad << ": " << e.message());
      BOOST_TEST(!eh);
      auto [t, th] = co_await sem.async_try_acquire(bad, asio::as_tuple(use_awaitable));
      BOOST_TEST(t == error::invalid_argument, bad << ": " << t.message());
      BOOST_TEST(!th);
    }
    BOOST_TEST(co_await count_keys(c, "sem-layout/") == 2);
    semaphore::hold none;
    BOOST_TEST(none.permits() == 0);
    auto [e3] = co_await none.async_release(asio::as_tuple(use_awaitable));
    BOOST_TEST(e3 == asio::error::bad_descriptor, e3.message());
    BOOST_TEST(co_await count_keys(c, "sem-layout/") == 2);
    co_await two.async_release(use_awaitable);
    BOOST_TEST(!two);
    BOOST_TEST(co_await count_keys(c, "sem-layout/") == 1);  // its own key, not the other's
    co_await one.async_release(use_awaitable);
    BOOST_TEST(!one);
    auto [e1] = co_await one.async_release(asio::as_tuple(use_awaitable));
    BOOST_TEST(e1 == error::not_locked, e1.message());
    co_await expect_no_keys(c, "sem-layout");
  }(c));
}

// 3 clients x 6 sessions taking 1 or 2 of 4 permits 6 times each, holding a few milliseconds:
// never more than 4 permits held at once, and the semaphore is shared (3 or 4 held at times).
BOOST_AUTO_TEST_CASE(never_more_than_its_permits_held) {
  asio::io_context ioc;
  client c1(ioc, options_for(server())), c2(ioc, options_for(server())), c3(ioc, options_for(server()));
  struct tally {
    std::int64_t in_use = 0, most = 0;
    int violations = 0, errors = 0, done = 0, acquisitions = 0;
    std::string first_error;
  };
  auto st = std::make_shared<tally>();
  constexpr int workers = 18, rounds = 6, permits = 4;
  auto worker = [](client& c, std::shared_ptr<tally> st, std::int64_t n, int seed) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, use_awaitable);
    semaphore sem(s, "sem-check", permits);
    std::minstd_rand rng(seed);
    for (int i = 0; i < rounds; ++i) {
      auto [ec, held] = co_await sem.async_acquire(n, asio::as_tuple(use_awaitable));
      if (ec) {
        if (st->errors++ == 0) st->first_error = ec.message();
        break;
      }
      if (held.permits() != n) ++st->violations;
      ++st->acquisitions;
      st->in_use += n;
      st->most = std::max(st->most, st->in_use);
      if (st->in_use > permits) ++st->violations;
      co_await sleep_for(std::chrono::milliseconds(2 + rng() % 8));
      st->in_use -= n;
      co_await held.async_release(use_awaitable);
    }
    co_await s.async_close(use_awaitable);
    ++st->done;
  };
  client* clients[] = {&c1, &c2, &c3};
  for (int i = 0; i < workers; ++i) asio::co_spawn(ioc, worker(*clients[i % 3], st, 1 + i % 2, i), asio::detached);
  run_for(ioc, [](client& c, std::shared_ptr<tally> st) -> asio::awaitable<void> {
    std::function<bool()> all_done = [st] { return st->done == workers; };
    BOOST_TEST_REQUIRE(co_await eventually(std::move(all_done), 50s));
    BOOST_TEST(st->violations == 0);
    BOOST_TEST(st->errors == 0, st->first_error);
    BOOST_TEST(st->acquisitions == workers * rounds);
    BOOST_TEST(st->most >= 3, "the most permits held at once: " << st->most);
    co_await expect_no_keys(c, "sem-check");
  }(c1, st), 60s);
}

// 60 sessions trying for 1 of 5 permits at once, 40 times each: their puts leave in shared txns,
// so many keys share a create revision, which etcd orders as it likes and the rule orders by key.
// A try decides from its txn's read alone: it never admits a sixth holder.
BOOST_AUTO_TEST_CASE(acquisitions_sharing_a_revision_never_over_admit) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  struct tally {
    int in_use = 0, most = 0, violations = 0, errors = 0, done = 0, taken = 0;
    std::string first_error;
  };
  auto st = std::make_shared<tally>();
  constexpr int workers = 60, rounds = 40, permits = 5;
  auto worker = [](client& c, std::shared_ptr<tally> st) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, use_awaitable);
    for (int i = 0; i < rounds; ++i) {
      semaphore sem(s, "sem-ties", permits);
      auto [ec, held] = co_await sem.async_try_acquire(1, asio::as_tuple(use_awaitable));
      if (ec == error::locked) {
        co_await sleep_for(1ms);
        continue;
      }
      if (ec) {
        if (st->errors++ == 0) st->first_error = ec.message();
        break;
      }
      ++st->taken;
      if (++st->in_use > permits) ++st->violations;
      st->most = std::max(st->most, st->in_use);
      co_await asio::post(co_await asio::this_coro::executor, use_awaitable);
      --st->in_use;
      co_await held.async_release(use_awaitable);
    }
    co_await s.async_close(use_awaitable);
    ++st->done;
  };
  for (int i = 0; i < workers; ++i) asio::co_spawn(ioc, worker(c, st), asio::detached);
  run_for(ioc, [](client& c, std::shared_ptr<tally> st) -> asio::awaitable<void> {
    std::function<bool()> all_done = [st] { return st->done == workers; };
    BOOST_TEST_REQUIRE(co_await eventually(std::move(all_done), 50s));
    BOOST_TEST(st->violations == 0, "holders at most: " << st->most);
    BOOST_TEST(st->errors == 0, st->first_error);
    BOOST_TEST(st->taken > 0);
    co_await expect_no_keys(c, "sem-ties");
  }(c, st), 60s);
}

// Acquisitions of one client that leave in one batch share a create revision, and the rule
// orders them by key; a nested txn's read sees only the puts before it in the batch. Started
// in descending key order (the order that hides from each read the keys that go before its
// own), 8 sessions on a 1-permit semaphore, trying and waiting, never hold two at once.
BOOST_AUTO_TEST_CASE(a_batch_started_in_reverse_key_order_admits_one) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    constexpr int sessions = 8, rounds = 12;
    std::vector<session> ss;
    for (int i = 0; i < sessions; ++i) ss.push_back(co_await session::async_create(c, use_awaitable));
    // Lease ids as hex decide the key order: largest first.
    std::sort(ss.begin(), ss.end(), [](const session& a, const session& b) {
      return hex(a.lease()) > hex(b.lease());
    });
    struct tally {
      int in_use = 0, most = 0, granted = 0, refused = 0, done = 0, errors = 0;
      std::string first_error;
    };
    for (int round = 0; round < rounds; ++round) {
      const bool try_only = round % 2 == 0;
      const std::string name = "sem-batch-" + std::to_string(round);
      auto st = std::make_shared<tally>();
      std::vector<std::unique_ptr<semaphore>> sems;
      for (auto& s : ss) sems.push_back(std::make_unique<semaphore>(s, name, 1));
      auto ex = co_await asio::this_coro::executor;
      // A write on the wire first (it leaves at once, alone), so the eight gather in one turn of
      // the strand and leave as one batch beside it.
      semaphore lead(ss.front(), name + "-lead", 1);
      auto led = acquiring<semaphore::hold>();
      lead.async_try_acquire(1, record(led));
      for (int k = 0; k < 40; ++k) co_await asio::post(ex, use_awaitable);
      for (auto& sem : sems)
        asio::co_spawn(ex, [](semaphore& sem, std::shared_ptr<tally> st, bool try_only) -> asio::awaitable<void> {
          error_code ec;
          semaphore::hold held;
          if (try_only) std::tie(ec, held) = co_await sem.async_try_acquire(1, asio::as_tuple(use_awaitable));
          else std::tie(ec, held) = co_await sem.async_acquire(1, asio::as_tuple(use_awaitable));
          if (ec == error::locked) {
            ++st->refused;
          } else if (ec) {
            if (st->errors++ == 0) st->first_error = ec.message();
          } else {
            ++st->granted;
            st->most = std::max(st->most, ++st->in_use);
            co_await sleep_for(2ms);
            --st->in_use;
            co_await held.async_release(use_awaitable);
          }
          ++st->done;
        }(*sem, st, try_only), asio::detached);
      std::function<bool()> all_done = [st] { return st->done == sessions; };
      BOOST_TEST_REQUIRE(co_await eventually(std::move(all_done), 10s));
      BOOST_TEST_REQUIRE(co_await settled(led));
      BOOST_TEST(!led->ec.value());
      co_await led->hold.async_release(use_awaitable);
      BOOST_TEST(st->most == 1, "round " << round << ": " << st->most << " held at once");
      BOOST_TEST(st->errors == 0, st->first_error);
      BOOST_TEST(st->granted == (try_only ? 1 : sessions), "round " << round);
      co_await expect_no_keys(c, name);
    }
    for (auto& s : ss) co_await s.async_close(use_awaitable);
  }(c));
}

// FIFO: with 1 of 3 permits free, a waiting request for 2 is not overtaken by a later request
// for 1 that would fit; once 2 are free both hold.
BOOST_AUTO_TEST_CASE(a_big_request_is_not_overtaken) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto sh = co_await session::async_create(c, use_awaitable);
    auto sa = co_await session::async_create(c, use_awaitable);
    auto sb = co_await session::async_create(c, use_awaitable);
    semaphore h(sh, "sem-fifo", 3), a(sa, "sem-fifo", 3), b(sb, "sem-fifo", 3);
    auto held2 = co_await h.async_acquire(2, use_awaitable);
    auto held1 = co_await h.async_acquire(1, use_awaitable);
    auto big = acquiring<semaphore::hold>(), small = acquiring<semaphore::hold>();
    a.async_acquire(2, record(big));
    co_await sleep_for(100ms);
    b.async_acquire(1, record(small));
    co_await sleep_for(100ms);
    BOOST_TEST(!big->ec.has_value());
    BOOST_TEST(!small->ec.has_value());
    co_await held1.async_release(use_awaitable);  // 1 free: the 2 ahead still waits, so does the 1
    co_await sleep_for(300ms);
    BOOST_TEST(!big->ec.has_value());
    BOOST_TEST(!small->ec.has_value(), "the later request for 1 overtook the request for 2");
    auto [t, none] = co_await b.async_try_acquire(1, asio::as_tuple(use_awaitable));  // nor does a try
    BOOST_TEST(t == error::locked, t.message());
    BOOST_TEST(!none);
    co_await held2.async_release(use_awaitable);
    BOOST_TEST_REQUIRE(co_await settled(big));
    BOOST_TEST_REQUIRE(co_await settled(small));
    BOOST_TEST(!*big->ec, big->ec->message());
    BOOST_TEST(!*small->ec, small->ec->message());
    BOOST_TEST(bool(big->hold));
    BOOST_TEST(bool(small->hold));
    BOOST_TEST(big->hold.permits() == 2);
    BOOST_TEST(small->hold.permits() == 1);
    co_await big->hold.async_release(use_awaitable);
    co_await small->hold.async_release(use_awaitable);
    co_await expect_no_keys(c, "sem-fifo");
  }(c));
}

// try_acquire takes free permits at once and otherwise fails with locked, leaving no key.
BOOST_AUTO_TEST_CASE(try_acquire_never_waits_and_leaves_no_key) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto sa = co_await session::async_create(c, use_awaitable);
    auto sb = co_await session::async_create(c, use_awaitable);
    semaphore a(sa, "sem-try", 2), b(sb, "sem-try", 2);
    auto ha = co_await a.async_try_acquire(1, use_awaitable);
    auto hb = co_await b.async_try_acquire(1, use_awaitable);
    auto [e, none] = co_await b.async_try_acquire(1, asio::as_tuple(use_awaitable));
    BOOST_TEST(e == error::locked, e.message());
    BOOST_TEST(!none);
    BOOST_TEST(bool(hb));  // the refused try left b's first hold alone
    BOOST_TEST(co_await settled_keys(c, "sem-try/", 2) == 2);
    co_await ha.async_release(use_awaitable);
    auto [e2, none2] = co_await a.async_try_acquire(2, asio::as_tuple(use_awaitable));
    BOOST_TEST(e2 == error::locked, e2.message());
    BOOST_TEST(!none2);
    auto ha2 = co_await a.async_try_acquire(1, use_awaitable);
    co_await ha2.async_release(use_awaitable);
    co_await hb.async_release(use_awaitable);
    auto both = co_await a.async_try_acquire(2, use_awaitable);
    BOOST_TEST(both.permits() == 2);
    co_await both.async_release(use_awaitable);
    co_await expect_no_keys(c, "sem-try");
  }(c));
}

// Two processes that disagree on the permits, or a key under the name that is not an
// acquisition (another lock named the same), fail with a clear error instead of over-admitting,
// and leave no key; the txn's read and the view both see it. A name below this one is a lock of
// its own: its keys neither take permits nor count as foreign.
BOOST_AUTO_TEST_CASE(disagreeing_permits_and_foreign_keys_fail_clearly) {
  asio::io_context ioc;
  client c(ioc, options_for(server())), other(ioc, options_for(server()));
  run_for(ioc, [](client& c, client& other) -> asio::awaitable<void> {
    auto sa = co_await session::async_create(c, use_awaitable);
    auto sb = co_await session::async_create(c, use_awaitable);
    auto so = co_await session::async_create(other, use_awaitable);
    semaphore two(sa, "sem-bad", 2), three(sb, "sem-bad", 3);
    auto first = co_await two.async_acquire(1, use_awaitable);
    // The first look (the txn's read) sees "1/2" before our "1/3".
    auto [e1, h1] = co_await three.async_acquire(1, asio::as_tuple(use_awaitable));
    BOOST_TEST(e1 == error::permits_mismatch, e1.message());
    auto [e2, h2] = co_await three.async_try_acquire(1, asio::as_tuple(use_awaitable));
    BOOST_TEST(e2 == error::permits_mismatch, e2.message());
    BOOST_TEST((!h1 && !h2));
    BOOST_TEST(co_await settled_keys(c, "sem-bad/", 1) == 1);
    // While the client's view of the name runs (a waiter of its own), a new acquisition goes
    // through the view, which sees the mismatch.
    semaphore full(so, "sem-bad", 2);
    auto second = co_await two.async_acquire(1, use_awaitable);
    auto waiting = acquiring<semaphore::hold>();
    semaphore queued(sa, "sem-bad", 2);
    queued.async_acquire(1, record(waiting));
    co_await sleep_for(200ms);
    BOOST_TEST(!waiting->ec.has_value());
    auto [e3, h3] = co_await three.async_acquire(1, asio::as_tuple(use_awaitable));
    BOOST_TEST(e3 == error::permits_mismatch, e3.message());
    BOOST_TEST(!h3);
    BOOST_TEST(!waiting->ec.has_value());
    co_await first.async_release(use_awaitable);
    BOOST_TEST_REQUIRE(co_await settled(waiting));
    BOOST_TEST(!*waiting->ec, waiting->ec->message());
    co_await waiting->hold.async_release(use_awaitable);
    co_await second.async_release(use_awaitable);
    co_await expect_no_keys(c, "sem-bad");
    // A name below this one ("sem-nest/inner") has its keys under ours, older than ours: the
    // try's second read and the view (for the txn's read they fill its places) leave them out.
    semaphore inner(so, "sem-nest/inner", 1), outer(sb, "sem-nest", 1);
    auto inner_hold = co_await inner.async_acquire(1, use_awaitable);
    auto [e4, tried] = co_await outer.async_try_acquire(1, asio::as_tuple(use_awaitable));
    BOOST_TEST(!e4, e4.message());
    if (!e4) co_await tried.async_release(use_awaitable);
    auto e4w = co_await (outer.async_acquire(1, asio::as_tuple(use_awaitable)) || sleep_for(5s));
    BOOST_TEST_REQUIRE(e4w.index() == 0u, "a semaphore waited for a longer name's acquisition");
    auto& [waited, outer_hold] = std::get<0>(e4w);
    BOOST_TEST(!waited, waited.message());
    BOOST_TEST(outer_hold.permits() == 1);
    if (!waited) co_await outer_hold.async_release(use_awaitable);
    co_await inner_hold.async_release(use_awaitable);
    co_await expect_no_keys(c, "sem-nest");
    // A mutex of the same name.
    mutex m(so, "sem-mutex");
    semaphore same(sb, "sem-mutex", 1);
    auto locked = co_await m.async_lock(use_awaitable);
    auto [e5, h5] = co_await same.async_acquire(1, asio::as_tuple(use_awaitable));
    BOOST_TEST(e5 == error::foreign_key, e5.message());
    BOOST_TEST(e5.message().find("same name") != std::string::npos, e5.message());
    BOOST_TEST(!h5);
    co_await locked.async_release(use_awaitable);
    co_await expect_no_keys(c, "sem-mutex");
  }(c, other));
}

// A waiter cancelled at every delay from 0 to 6 ms: when its handler has run its key is gone (or
// goes as soon as a put still on the wire completes), and the semaphore still works.
BOOST_AUTO_TEST_CASE(cancelled_at_every_delay_leaves_no_key) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto sh = co_await session::async_create(c, use_awaitable);
    auto sw = co_await session::async_create(c, use_awaitable);
    semaphore holder(sh, "sem-cancel", 2), waiter(sw, "sem-cancel", 2);
    auto held = co_await holder.async_acquire(2, use_awaitable);
    for (int d = 0; d <= 6; ++d) {
      auto r = co_await (waiter.async_acquire(1, use_awaitable) || sleep_for(std::chrono::milliseconds(d)));
      BOOST_TEST(r.index() == 1u);
      BOOST_TEST(co_await settled_keys(c, "sem-cancel/", 1) == 1, "delay " << d << " ms");
    }
    BOOST_TEST(bool(held));
    co_await held.async_release(use_awaitable);
    auto after = co_await waiter.async_acquire(2, use_awaitable);  // still usable
    BOOST_TEST(after.permits() == 2);
    co_await after.async_release(use_awaitable);
    co_await expect_no_keys(c, "sem-cancel");
  }(c));
}

// A holder whose lease is revoked is told (its hold's loss wait succeeds with the revoke's
// reason) and its permits pass to the waiter; a waiter whose session is closed fails with
// session_lost.
BOOST_AUTO_TEST_CASE(session_loss_while_holding_and_while_waiting) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    // A short TTL: a revoked lease is noticed at the next renewal, a third of the TTL at most.
    auto sa = co_await session::async_create(c, session_options{.ttl = 3s}, use_awaitable);
    auto sb = co_await session::async_create(c, use_awaitable);
    auto sc = co_await session::async_create(c, use_awaitable);
    semaphore a(sa, "sem-loss", 2), b(sb, "sem-loss", 2), late(sc, "sem-loss", 2);
    auto ha = co_await a.async_acquire(2, use_awaitable);
    auto w = acquiring<semaphore::hold>();
    b.async_acquire(1, record(w));
    co_await sleep_for(200ms);
    BOOST_TEST(!w->ec.has_value());
    auto lost = waiting_for_loss();
    ha.async_wait_lost(record(lost));
    auto rev = etcdctl(server(), "lease revoke " + hex(sa.lease()));
    BOOST_TEST_REQUIRE(rev.exit_code == 0, rev.output);
    BOOST_TEST_REQUIRE(co_await settled(w));
    BOOST_TEST(!*w->ec, w->ec->message());
    BOOST_TEST(bool(w->hold));
    BOOST_TEST_REQUIRE(co_await settled(lost));
    BOOST_TEST(!(*lost)->ec, (*lost)->ec.message());
    BOOST_TEST((*lost)->reason.cause == error::lease_not_found, (*lost)->reason.cause.message());
    BOOST_TEST(((*lost)->reason.what == loss_reason::kind::lease_gone));
    BOOST_TEST(!ha);
    auto [ul] = co_await ha.async_release(asio::as_tuple(use_awaitable));
    BOOST_TEST(ul == error::session_lost, ul.message());
    auto l = acquiring<semaphore::hold>();
    late.async_acquire(2, record(l));  // 1 held by b: waits
    co_await sleep_for(200ms);
    BOOST_TEST(!l->ec.has_value());
    co_await sc.async_close(use_awaitable);
    BOOST_TEST_REQUIRE(co_await settled(l));
    BOOST_TEST(*l->ec == error::session_lost, l->ec->message());
    BOOST_TEST(!l->hold);
    co_await w->hold.async_release(use_awaitable);
    co_await expect_no_keys(c, "sem-loss");
  }(c));
}

// with_permits holds n permits for the body (which may take the hold), returns what it returns
// and always releases: the fences the bodies built fail afterwards, and every permit is free.
BOOST_AUTO_TEST_CASE(with_permits_holds_and_releases) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, use_awaitable);
    semaphore sem(s, "sem-with", 3);
    auto fences = std::make_shared<std::vector<compare>>();
    auto body = [fences](semaphore::hold& h) -> asio::awaitable<std::int64_t> {
      fences->push_back(h.fence());
      co_return h ? h.permits() : 0;
    };
    BOOST_TEST(co_await with_permits(sem, 2, std::move(body)) == 2);
    auto throwing = [fences](semaphore::hold& h) -> asio::awaitable<void> {
      fences->push_back(h.fence());
      throw std::runtime_error("body failed");
      co_return;
    };
    BOOST_CHECK_THROW(co_await with_permits(sem, 1, std::move(throwing)), std::runtime_error);
    BOOST_TEST_REQUIRE(fences->size() == 2u);
    for (const auto& f : *fences) {
      auto late = co_await c.async_txn(txn().when(f).then(txn_op::put("sem-with-data", "late")), use_awaitable);
      BOOST_TEST(!late.succeeded, "a body's permits outlived its with_permits");
    }
    auto all = co_await sem.async_try_acquire(3, use_awaitable);
    co_await all.async_release(use_awaitable);
    co_await expect_no_keys(c, "sem-with");
  }(c));
}

// Holds do not point at their object: a semaphore destroyed while its holds last leaves them
// holding (it gave its permits back before). A hold destroyed without a release gives its
// permits back, so a waiter of another session gets in; one assigned over does the same.
BOOST_AUTO_TEST_CASE(a_dropped_hold_gives_its_permits_back_and_the_object_does_not) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, use_awaitable);
    auto so = co_await session::async_create(c, use_awaitable);
    std::optional<semaphore::hold> first;
    semaphore::hold second;
    {
      semaphore sem(s, "sem-gone", 2);
      auto h = co_await sem.async_acquire(1, use_awaitable);
      first.emplace(std::move(h));
      second = co_await sem.async_acquire(1, use_awaitable);
    }
    co_await sleep_for(100ms);  // a give-back the object's end started would be done by now
    BOOST_TEST(bool(*first));
    BOOST_TEST(bool(second));
    BOOST_TEST(co_await count_keys(c, "sem-gone/") == 2, "destroying the semaphore gave its holds' permits back");
    semaphore other(so, "sem-gone", 2);
    auto w = acquiring<semaphore::hold>();
    other.async_acquire(1, record(w));
    co_await sleep_for(200ms);
    BOOST_TEST(!w->ec.has_value());
    first.reset();  // destroyed, never released
    BOOST_TEST_REQUIRE(co_await settled(w), "a dropped hold kept its permits");
    BOOST_TEST(!*w->ec, w->ec->message());
    BOOST_TEST(bool(w->hold));
    second = semaphore::hold();  // assigned over: given back as the destructor does
    BOOST_TEST(co_await settled_keys(c, "sem-gone/", 1) == 1);
    co_await w->hold.async_release(use_awaitable);
    auto all = co_await other.async_try_acquire(2, use_awaitable);
    BOOST_TEST(all.permits() == 2);
    co_await all.async_release(use_awaitable);
    co_await expect_no_keys(c, "sem-gone");
  }(c));
}

#ifdef COETCD_CLI_PATH
// A holder process SIGKILLed with its permits: they come back when its lease expires (TTL 4 s,
// renewed every third of it, so between 2.6 and 4 s after the kill), not before.
BOOST_AUTO_TEST_CASE(a_killed_holders_permits_return_after_its_ttl) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    child_process holder(std::string(COETCD_CLI_PATH) + " --endpoints " + server().endpoint() +
                         " --ttl 4 sem sem-kill 2 --count 2");
    BOOST_TEST_REQUIRE(holder.wait_for_output("sem-kill 2/2", 10s), holder.output());
    auto s = co_await session::async_create(c, use_awaitable);
    semaphore sem(s, "sem-kill", 2);
    auto [busy, none] = co_await sem.async_try_acquire(1, asio::as_tuple(use_awaitable));
    BOOST_TEST(busy == error::locked, busy.message());
    BOOST_TEST(!none);
    holder.signal(SIGKILL);
    const auto killed = std::chrono::steady_clock::now();
    auto held = co_await sem.async_acquire(1, use_awaitable);
    const auto after = std::chrono::steady_clock::now() - killed;
    BOOST_TEST(after >= 2500ms, "permits came back " << after / 1ms << " ms after the kill");
    BOOST_TEST(after <= 7000ms, "permits came back " << after / 1ms << " ms after the kill");
    co_await held.async_release(use_awaitable);
    co_await expect_no_keys(c, "sem-kill");
  }(c));
}
#endif
