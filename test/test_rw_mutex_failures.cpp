// The read-write lock's failure paths against a real etcd: try variants, a wait cancelled at every
// delay, session loss while holding and waiting, and with_lock / with_shared_lock.
#define BOOST_TEST_MODULE coetcd_rw_mutex_failures
#include "support/fixture.hpp"

#include <coetcd/lock_status.hpp>
#include <coetcd/rw_mutex.hpp>
#include <coetcd/with_lock.hpp>

#include <boost/asio/experimental/awaitable_operators.hpp>

#include <memory>
#include <vector>

using namespace coetcd;
using namespace coetcd::test;
using namespace std::chrono_literals;
using namespace boost::asio::experimental::awaitable_operators;

BOOST_TEST_GLOBAL_FIXTURE(shared_etcd);

// try_lock / try_lock_shared take it only when they would not wait, and leave no key otherwise.
BOOST_AUTO_TEST_CASE(try_variants_never_wait_and_leave_no_key) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto sa = co_await session::async_create(c, use_awaitable);
    auto sb = co_await session::async_create(c, use_awaitable);
    rw_mutex a(sa, "rw-try"), b(sb, "rw-try"), a2(sa, "rw-try");
    auto ra = co_await a.async_lock_shared(use_awaitable);
    // A reader of another session, created later (its own revision), holds with it at once.
    rw_mutex b2(sb, "rw-try");
    auto joined = acquiring<rw_mutex::shared_hold>();
    b2.async_lock_shared(record(joined));
    BOOST_TEST_REQUIRE(co_await settled(joined, 2s));
    BOOST_TEST(!*joined->ec);
    BOOST_TEST(bool(joined->hold));
    co_await joined->hold.async_release(use_awaitable);
    auto rb = co_await b.async_try_lock_shared(use_awaitable);    // readers share
    auto ra2 = co_await a2.async_try_lock_shared(use_awaitable);  // and join locally
    BOOST_TEST((ra && rb && ra2));
    // async_lock_status knows the layout: both read keys hold.
    auto st = co_await async_lock_status(c, "rw-try", use_awaitable);
    BOOST_TEST(st.read_write);
    BOOST_TEST_REQUIRE(st.holder.has_value());
    BOOST_TEST(st.also_holding.size() == 1u);
    BOOST_TEST(st.waiters.empty());
    BOOST_TEST(st.nested_names.empty());
    auto [e1, w1] = co_await b.async_try_lock(asio::as_tuple(use_awaitable));
    BOOST_TEST(e1 == error::locked, e1.message());
    BOOST_TEST(!w1);
    BOOST_TEST(co_await settled_keys(c, "rw-try/write/", 0) == 0);
    co_await ra.async_release(use_awaitable);
    co_await ra2.async_release(use_awaitable);
    co_await rb.async_release(use_awaitable);
    auto wb = co_await b.async_try_lock(use_awaitable);
    BOOST_TEST(bool(wb));
    auto [e2, r2] = co_await a.async_try_lock_shared(asio::as_tuple(use_awaitable));
    BOOST_TEST(e2 == error::locked, e2.message());
    BOOST_TEST(!r2);
    auto [e3, w3] = co_await a.async_try_lock(asio::as_tuple(use_awaitable));
    BOOST_TEST(e3 == error::locked, e3.message());
    BOOST_TEST(!w3);
    BOOST_TEST(co_await settled_keys(c, "rw-try/", 1) == 1);
    co_await wb.async_release(use_awaitable);
    co_await expect_no_keys(c, "rw-try");
  }(c));
}

// A reader behind a writer and a writer behind a reader, each its session's only caller,
// cancelled at every delay from 0 to 6 ms: when the handler has run the key is gone (or goes as
// soon as a put still on the wire completes), and the lock still works.
BOOST_AUTO_TEST_CASE(cancelled_at_every_delay_leaves_no_key) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto sh = co_await session::async_create(c, use_awaitable);
    auto sw = co_await session::async_create(c, use_awaitable);
    rw_mutex holder(sh, "rw-cancel"), waiter(sw, "rw-cancel");
    for (bool hold_write : {true, false}) {
      rw_mutex::hold excl;
      rw_mutex::shared_hold shared;
      if (hold_write) excl = co_await holder.async_lock(use_awaitable);
      else shared = co_await holder.async_lock_shared(use_awaitable);
      for (int d = 0; d <= 6; ++d) {
        // The waiter takes the other side; a lock that won the race would leave its hold in the
        // variant (and release it as the variant goes).
        std::size_t won = 0;
        if (hold_write) {
          auto r = co_await (waiter.async_lock_shared(use_awaitable) || sleep_for(std::chrono::milliseconds(d)));
          won = r.index();
        } else {
          auto r = co_await (waiter.async_lock(use_awaitable) || sleep_for(std::chrono::milliseconds(d)));
          won = r.index();
        }
        BOOST_TEST(won == 1u);
        auto left = co_await count_keys(c, "rw-cancel/");
        for (int i = 0; i < 100 && left != 1; ++i) {
          co_await sleep_for(10ms);
          left = co_await count_keys(c, "rw-cancel/");
        }
        BOOST_TEST(left == 1, "delay " << d << " ms, holder " << (hold_write ? "writer" : "reader"));
      }
      BOOST_TEST((hold_write ? bool(excl) : bool(shared)));  // the waiters' cancellations left the holder alone
      if (hold_write) co_await excl.async_release(use_awaitable);
      else co_await shared.async_release(use_awaitable);
    }
    auto after = co_await waiter.async_lock(use_awaitable);  // still usable
    BOOST_TEST(bool(after));
    co_await after.async_release(use_awaitable);
    co_await expect_no_keys(c, "rw-cancel");
  }(c));
}

// A holder whose lease is revoked is told (its hold's loss wait succeeds with the revoke's
// reason), and the writer behind it gets its turn; a reader waiting behind that writer whose
// session is closed fails with session_lost.
BOOST_AUTO_TEST_CASE(session_loss_while_holding_and_while_waiting) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    // A short TTL: a revoked lease is noticed at the next renewal, a third of the TTL at most.
    auto sa = co_await session::async_create(c, session_options{.ttl = 3s}, use_awaitable);
    auto sb = co_await session::async_create(c, use_awaitable);
    auto sc = co_await session::async_create(c, use_awaitable);
    rw_mutex reader(sa, "rw-loss"), writer(sb, "rw-loss"), late(sc, "rw-loss");
    auto rh = co_await reader.async_lock_shared(use_awaitable);
    auto w = acquiring<rw_mutex::hold>();
    writer.async_lock(record(w));
    co_await sleep_for(200ms);
    auto lost = waiting_for_loss();
    rh.async_wait_lost(record(lost));
    auto rev = etcdctl(server(), "lease revoke " + hex(sa.lease()));
    BOOST_TEST_REQUIRE(rev.exit_code == 0, rev.output);
    BOOST_TEST_REQUIRE(co_await settled(lost));
    BOOST_TEST(!(*lost)->ec, (*lost)->ec.message());
    BOOST_TEST((*lost)->reason.cause == error::lease_not_found, (*lost)->reason.cause.message());
    BOOST_TEST(((*lost)->reason.what == loss_reason::kind::lease_gone));
    BOOST_TEST(!rh);
    BOOST_TEST_REQUIRE(co_await settled(w));
    BOOST_TEST(!*w->ec, w->ec->message());
    BOOST_TEST(bool(w->hold));
    auto [ul] = co_await rh.async_release(asio::as_tuple(use_awaitable));
    BOOST_TEST(ul == error::session_lost, ul.message());
    auto l = acquiring<rw_mutex::shared_hold>();
    late.async_lock_shared(record(l));
    co_await sleep_for(200ms);
    BOOST_TEST(!l->ec.has_value());
    co_await sc.async_close(use_awaitable);
    BOOST_TEST_REQUIRE(co_await settled(l));
    BOOST_TEST(*l->ec == error::session_lost, l->ec->message());
    BOOST_TEST(!l->hold);
    co_await w->hold.async_release(use_awaitable);
    co_await expect_no_keys(c, "rw-loss");
  }(c));
}

// with_lock and with_shared_lock hold the right side, hand the body its hold, return what the
// body returns and always release: a fence the body built fails once with_lock is done.
BOOST_AUTO_TEST_CASE(with_lock_and_with_shared_lock) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, use_awaitable);
    rw_mutex m(s, "rw-with");
    auto fences = std::make_shared<std::vector<compare>>();
    auto read_body = [&c, fences](rw_mutex::shared_hold& h) -> asio::awaitable<bool> {
      fences->push_back(h.fence());
      const auto readers = co_await count_keys(c, "rw-with/read/");
      const auto writers = co_await count_keys(c, "rw-with/write/");
      co_return h && readers == 1 && writers == 0;
    };
    BOOST_TEST(co_await with_shared_lock(m, std::move(read_body)));
    auto write_body = [&c, fences](rw_mutex::hold& h) -> asio::awaitable<bool> {
      fences->push_back(h.fence());
      const auto writers = co_await count_keys(c, "rw-with/write/");
      co_return h && writers == 1;
    };
    BOOST_TEST(co_await with_lock(m, std::move(write_body)));
    auto throwing = [fences](rw_mutex::shared_hold& h) -> asio::awaitable<void> {
      fences->push_back(h.fence());
      throw std::runtime_error("body failed");
      co_return;
    };
    BOOST_CHECK_THROW(co_await with_shared_lock(m, std::move(throwing)), std::runtime_error);
    BOOST_TEST_REQUIRE(fences->size() == 3u);
    for (const auto& f : *fences) {
      auto late = co_await c.async_txn(txn().when(f).then(txn_op::put("rw-with-data", "late")), use_awaitable);
      BOOST_TEST(!late.succeeded, "a body's hold outlived its with_lock");
    }
    co_await expect_no_keys(c, "rw-with");
  }(c));
}
