// Items claimed for dequeues that no longer want them (cancelled with the claim on the wire, the
// object destroyed, the session closed) go back into the queue for any consumer, once.
#define BOOST_TEST_MODULE coetcd_queue_claims
#include "support/fixture.hpp"
#include "support/tcp_proxy.hpp"

#include <coetcd/priority_queue.hpp>
#include <coetcd/queue.hpp>
#include <coetcd/watcher.hpp>

#include <set>

#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>

using namespace coetcd;
using namespace coetcd::test;
using namespace std::chrono_literals;
using namespace asio::experimental::awaitable_operators;

BOOST_TEST_GLOBAL_FIXTURE(shared_etcd);

namespace {

/// The keys under `prefix` now.
asio::awaitable<std::vector<std::string>> keys_under(client& c, const std::string& prefix) {
  get_options o;
  o.prefix = true;
  o.keys_only = true;
  auto r = co_await c.async_get(prefix, o, use_awaitable);
  std::vector<std::string> out;
  for (auto& kv : r.kvs) out.push_back(kv.key);
  co_return out;
}

/// Reads the keys under `prefix` until there are `n` (for up to 10 s); returns the last read.
asio::awaitable<std::vector<std::string>> wait_for_keys(client& c, const std::string& prefix, std::size_t n) {
  auto keys = co_await keys_under(c, prefix);
  for (int i = 0; i < 100 && keys.size() != n; ++i) {
    co_await sleep_for(100ms);
    keys = co_await keys_under(c, prefix);
  }
  co_return keys;
}

/// A dequeue from `q` given 5 s: what it completed with, or nothing when it did not complete.
template <class Queue>
asio::awaitable<std::optional<std::tuple<error_code, std::string>>> take_within_5s(Queue& q) {
  asio::steady_timer limit(co_await asio::this_coro::executor, 5s);
  auto take = q.async_dequeue(asio::as_tuple(use_awaitable)) || limit.async_wait(asio::as_tuple(use_awaitable));
  auto got = co_await std::move(take);
  if (got.index() != 0) co_return std::nullopt;
  co_return std::get<0>(std::move(got));
}

/// Waits for the delete of a key under `prefix` in `w` (the claim applied on the server).
asio::awaitable<bool> claim_applied(watcher& w) {
  for (;;) {
    auto [ec, batch] = co_await w.async_next(asio::as_tuple(use_awaitable));
    if (ec) co_return false;
    for (auto& e : batch.events)
      if (e.type == watch_event::kind::del) co_return true;
  }
}

/// A dequeue on `q` (whose client passes a proxy that delays every byte by 300 ms), cancelled as
/// soon as a direct watch sees its claim applied: its answer is then at least 300 ms away.
/// Returns what the dequeue completed with.
template <class Queue>
asio::awaitable<std::optional<error_code>> cancel_on_the_wire(client& direct, Queue& q, const std::string& prefix,
                                                              std::function<void()> after_cancel) {
  watch_options wo;
  wo.prefix = true;
  auto w = co_await direct.async_watch(prefix, wo, use_awaitable);
  auto done = std::make_shared<std::optional<error_code>>();
  asio::cancellation_signal cancel;
  q.async_dequeue(asio::bind_cancellation_slot(cancel.slot(), [done](error_code ec, std::string) { *done = ec; }));
  auto applied = claim_applied(w);
  BOOST_TEST_REQUIRE(co_await std::move(applied));
  BOOST_TEST_REQUIRE(!done->has_value(), "the dequeue ended before its claim's answer could arrive");
  cancel.emit(asio::cancellation_type::terminal);
  after_cancel();
  // (named first: g++ 12 destroys a by-value capture written inside a co_await expression twice)
  std::function<bool()> finished = [done] { return done->has_value(); };
  co_await eventually(std::move(finished), 10s);
  co_return *done;
}

}  // namespace

// A FIFO queue: the cancelled dequeue is told operation_aborted, and its item is back in etcd
// while its object still lives (before, it waited in that object for a dequeue that might never
// come, and went with it); a consumer of another client and session takes it; nothing is left.
// Then a priority queue whose object and session go right after the cancel: the item comes back
// at its old key, and another consumer takes it.
BOOST_AUTO_TEST_CASE(an_item_claimed_for_a_cancelled_dequeue_goes_back_into_the_queue) {
  tcp_proxy slow(server().endpoint());
  slow.delay(300ms);
  asio::io_context ioc;
  client_options o;
  o.endpoints = {slow.endpoint()};
  o.request_timeout = 10s;
  client far(ioc, o), near(ioc, options_for(server()));
  run_for(ioc, [](client& far, client& near) -> asio::awaitable<void> {
    auto fs = co_await session::async_create(far, use_awaitable);
    auto ns = co_await session::async_create(near, use_awaitable);
    {
      queue producer(ns, "qc-fifo"), taker(ns, "qc-fifo");
      auto a = std::make_unique<queue>(fs, "qc-fifo");
      co_await producer.async_enqueue("stuck", use_awaitable);
      auto ended = co_await cancel_on_the_wire(near, *a, "qc-fifo/", [] {});
      BOOST_TEST_REQUIRE(ended.has_value());
      BOOST_TEST(*ended == asio::error::operation_aborted, ended->message());
      // Back in etcd while `a` lives and nobody dequeues from it.
      BOOST_TEST((co_await wait_for_keys(near, "qc-fifo/", 1)).size() == 1u, "the claimed item is not back in the queue");
      auto taking = take_within_5s(taker);
      auto got = co_await std::move(taking);
      BOOST_TEST_REQUIRE(got.has_value(), "no consumer could take the item");
      auto& [ec, value] = *got;
      BOOST_TEST(!ec, ec.message());
      BOOST_TEST(value == "stuck");
      a.reset();
    }
    co_await expect_no_keys(near, "qc-fifo");
    BOOST_TEST(co_await settled_keys(near, "__coetcd-queue/qc-fifo/", 0) == 0, "receipts left");

    {
      auto gone = co_await session::async_create(far, use_awaitable);
      priority_queue producer(ns, "qc-prio"), taker(ns, "qc-prio");
      auto a = std::make_unique<priority_queue>(gone, "qc-prio");
      co_await producer.async_enqueue("urgent", 3, use_awaitable);
      const auto before = co_await keys_under(near, "qc-prio/");
      BOOST_TEST_REQUIRE(before.size() == 1u);
      // The object and its session go while the claim's answer is on its way.
      auto ended = co_await cancel_on_the_wire(near, *a, "qc-prio/", [&] { a.reset(); });
      BOOST_TEST_REQUIRE(ended.has_value());
      BOOST_TEST(*ended == asio::error::operation_aborted, ended->message());
      auto closing = gone.async_close(asio::as_tuple(use_awaitable));
      co_await std::move(closing);
      BOOST_TEST((co_await wait_for_keys(near, "qc-prio/", 1)) == before, "the item is not back at its old key");
      auto taking = take_within_5s(taker);
      auto got = co_await std::move(taking);
      BOOST_TEST_REQUIRE(got.has_value(), "no consumer could take the item");
      auto& [ec, value] = *got;
      BOOST_TEST(!ec, ec.message());
      BOOST_TEST(value == "urgent");
    }
    co_await expect_no_keys(near, "qc-prio");
    BOOST_TEST(co_await settled_keys(near, "__coetcd-queue/qc-prio/", 0) == 0, "receipts left");
  }(far, near), 60s);
}

// Eight dequeues of one object cancelled while their claim of eight items of 200 KiB is on the
// wire: all eight go back, though one txn of them would pass etcd's 1.5 MiB request limit (the
// put-back is cut into txns within it), and another consumer takes every one.
BOOST_AUTO_TEST_CASE(a_large_put_back_is_cut_into_txns_etcd_takes) {
  tcp_proxy slow(server().endpoint());
  slow.delay(300ms);
  asio::io_context ioc;
  client_options o;
  o.endpoints = {slow.endpoint()};
  o.request_timeout = 10s;
  client far(ioc, o), near(ioc, options_for(server()));
  run_for(ioc, [](client& far, client& near) -> asio::awaitable<void> {
    auto fs = co_await session::async_create(far, use_awaitable);
    auto ns = co_await session::async_create(near, use_awaitable);
    queue producer(ns, "qc-large"), taker(ns, "qc-large"), a(fs, "qc-large");
    std::set<std::string> values;
    for (int i = 0; i < 8; ++i) {
      auto v = std::to_string(i) + std::string(200 * 1024, 'x');
      co_await producer.async_enqueue(v, use_awaitable);
      values.insert(v);
    }
    watch_options wo;
    wo.prefix = true;
    auto w = co_await near.async_watch("qc-large/", wo, use_awaitable);
    auto ended = std::make_shared<std::vector<error_code>>();
    std::vector<std::unique_ptr<asio::cancellation_signal>> cancels;
    for (int i = 0; i < 8; ++i) {
      cancels.push_back(std::make_unique<asio::cancellation_signal>());
      a.async_dequeue(asio::bind_cancellation_slot(cancels.back()->slot(), [ended](error_code ec, std::string) { ended->push_back(ec); }));
    }
    auto applied = claim_applied(w);
    BOOST_TEST_REQUIRE(co_await std::move(applied));
    BOOST_TEST_REQUIRE(ended->empty(), "a dequeue ended before the claim's answer could arrive");
    for (auto& c : cancels) c->emit(asio::cancellation_type::terminal);
    std::function<bool()> all_ended = [ended] { return ended->size() == 8; };  // named: see above
    co_await eventually(std::move(all_ended), 10s);
    BOOST_TEST_REQUIRE(ended->size() == 8u);
    for (auto& ec : *ended) BOOST_TEST(ec == asio::error::operation_aborted, ec.message());
    BOOST_TEST((co_await wait_for_keys(near, "qc-large/", 8)).size() == 8u, "not every claimed item is back");
    std::set<std::string> got;
    for (int i = 0; i < 8; ++i) {
      auto taking = take_within_5s(taker);
      auto r = co_await std::move(taking);
      if (!r) break;
      auto& [ec, value] = *r;
      BOOST_TEST(!ec, ec.message());
      if (!ec) got.insert(value);
    }
    BOOST_TEST((got == values), got.size() << " of 8 items taken again");
  }(far, near), 60s);
}
