// The read-write lock's failure paths against a real etcd: try variants, a wait cancelled at every
// delay, session loss while holding and waiting, and with_lock / with_shared_lock.
#define BOOST_TEST_MODULE coetcd_rw_mutex_failures
#include "support/fixture.hpp"

#include <coetcd/lock_status.hpp>
#include <coetcd/rw_mutex.hpp>
#include <coetcd/with_lock.hpp>

#include <boost/asio/experimental/awaitable_operators.hpp>

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
    co_await a.async_lock_shared(use_awaitable);
    // A reader of another session, created later (its own revision), holds with it at once.
    rw_mutex b2(sb, "rw-try");
    auto joined = started();
    b2.async_lock_shared(record(joined));
    BOOST_TEST_REQUIRE(co_await settled(joined, 2s));
    BOOST_TEST(!**joined);
    co_await b2.async_unlock_shared(use_awaitable);
    co_await b.async_try_lock_shared(use_awaitable);  // readers share
    co_await a2.async_try_lock_shared(use_awaitable);  // and join locally
    // async_lock_status knows the layout: both read keys hold.
    auto st = co_await async_lock_status(c, "rw-try", use_awaitable);
    BOOST_TEST(st.read_write);
    BOOST_TEST_REQUIRE(st.holder.has_value());
    BOOST_TEST(st.also_holding.size() == 1u);
    BOOST_TEST(st.waiters.empty());
    BOOST_TEST(st.nested_names.empty());
    auto [e1] = co_await b.async_try_lock(asio::as_tuple(use_awaitable));
    BOOST_TEST(e1 == error::locked, e1.message());
    BOOST_TEST(co_await settled_keys(c, "rw-try/write/", 0) == 0);
    co_await a.async_unlock_shared(use_awaitable);
    co_await a2.async_unlock_shared(use_awaitable);
    co_await b.async_unlock_shared(use_awaitable);
    co_await b.async_try_lock(use_awaitable);
    BOOST_TEST(b.held());
    auto [e2] = co_await a.async_try_lock_shared(asio::as_tuple(use_awaitable));
    BOOST_TEST(e2 == error::locked, e2.message());
    auto [e3] = co_await a.async_try_lock(asio::as_tuple(use_awaitable));
    BOOST_TEST(e3 == error::locked, e3.message());
    BOOST_TEST(co_await settled_keys(c, "rw-try/", 1) == 1);
    co_await b.async_unlock(use_awaitable);
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
      co_await take(holder, hold_write);
      for (int d = 0; d <= 6; ++d) {
        auto r = co_await (take(waiter, !hold_write) || sleep_for(std::chrono::milliseconds(d)));
        BOOST_TEST(r.index() == 1u);
        BOOST_TEST(!waiter.held());
        BOOST_TEST(waiter.shared_holds() == 0);
        auto left = co_await count_keys(c, "rw-cancel/");
        for (int i = 0; i < 100 && left != 1; ++i) {
          co_await sleep_for(10ms);
          left = co_await count_keys(c, "rw-cancel/");
        }
        BOOST_TEST(left == 1, "delay " << d << " ms, holder " << (hold_write ? "writer" : "reader"));
      }
      if (hold_write) co_await holder.async_unlock(use_awaitable);
      else co_await holder.async_unlock_shared(use_awaitable);
    }
    co_await take(waiter, true);  // still usable
    co_await waiter.async_unlock(use_awaitable);
    co_await expect_no_keys(c, "rw-cancel");
  }(c));
}

// A holder whose lease is revoked is told, and the writer behind it gets its turn; a reader
// waiting behind that writer whose session is closed fails with session_lost.
BOOST_AUTO_TEST_CASE(session_loss_while_holding_and_while_waiting) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    // A short TTL: a revoked lease is noticed at the next renewal, a third of the TTL at most.
    auto sa = co_await session::async_create(c, session_options{.ttl = 3s}, use_awaitable);
    auto sb = co_await session::async_create(c, use_awaitable);
    auto sc = co_await session::async_create(c, use_awaitable);
    rw_mutex reader(sa, "rw-loss"), writer(sb, "rw-loss"), late(sc, "rw-loss");
    co_await reader.async_lock_shared(use_awaitable);
    auto w = started();
    writer.async_lock(record(w));
    co_await sleep_for(200ms);
    auto lost = started();
    reader.async_wait_lost(record(lost));
    auto rev = etcdctl(server(), "lease revoke " + hex(sa.lease()));
    BOOST_TEST_REQUIRE(rev.exit_code == 0, rev.output);
    BOOST_TEST_REQUIRE(co_await settled(lost));
    BOOST_TEST(**lost == error::lease_not_found, (*lost)->message());
    BOOST_TEST_REQUIRE(co_await settled(w));
    BOOST_TEST(!**w, (*w)->message());
    BOOST_TEST(writer.held());
    auto [ul] = co_await reader.async_unlock_shared(asio::as_tuple(use_awaitable));
    BOOST_TEST(ul == error::session_lost, ul.message());
    auto l = started();
    late.async_lock_shared(record(l));
    co_await sleep_for(200ms);
    BOOST_TEST(!l->has_value());
    co_await sc.async_close(use_awaitable);
    BOOST_TEST_REQUIRE(co_await settled(l));
    BOOST_TEST(**l == error::session_lost, (*l)->message());
    co_await writer.async_unlock(use_awaitable);
    co_await expect_no_keys(c, "rw-loss");
  }(c));
}

// with_lock and with_shared_lock hold the right side, return what the body returns and
// always release.
BOOST_AUTO_TEST_CASE(with_lock_and_with_shared_lock) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, use_awaitable);
    rw_mutex m(s, "rw-with");
    auto read_body = [&m]() -> asio::awaitable<int> { co_return m.shared_holds(); };
    BOOST_TEST(co_await with_shared_lock(m, std::move(read_body)) == 1);
    auto write_body = [&m]() -> asio::awaitable<bool> { co_return m.held(); };
    BOOST_TEST(co_await with_lock(m, std::move(write_body)));
    auto throwing = []() -> asio::awaitable<void> {
      throw std::runtime_error("body failed");
      co_return;
    };
    BOOST_CHECK_THROW(co_await with_shared_lock(m, std::move(throwing)), std::runtime_error);
    BOOST_TEST(m.shared_holds() == 0);
    BOOST_TEST(!m.held());
    co_await expect_no_keys(c, "rw-with");
  }(c));
}
