// Fences across local hand-offs against a real etcd: a holder's fenced write fails under the next
// caller of its session, and only a hand-off after a fenced holder costs a write.
#define BOOST_TEST_MODULE coetcd_mutex_local_fences
#include "support/fixture.hpp"

#include <coetcd/election.hpp>

#include <boost/asio/experimental/awaitable_operators.hpp>

using namespace coetcd;
using namespace coetcd::test;
using namespace std::chrono_literals;
using namespace boost::asio::experimental::awaitable_operators;

BOOST_TEST_GLOBAL_FIXTURE(shared_etcd);

// Fences between the local holders of one session (#34): a compare built by one holder fails once
// the lock has passed to the next caller of the session, and tokens increase across holders that
// read them. Holders that never ask for a fence still hand off with no write.
namespace {

lock_stats stats_of(client& c, const std::string& name) {
  for (auto& l : c.stats().locks)
    if (l.name == name) return l;
  return {};
}

// A builds a fenced write and hands the lock to B, queued on the same session; the write is
// delayed on its way (a slow link, a paused process) and arrives while B holds.
asio::awaitable<void> a_stale_fence_after_a_local_hand_off(client& c, std::string name, bool share_object) {
  auto s = co_await session::async_create(c, use_awaitable);
  mutex a(s, name);
  std::optional<mutex> own;
  mutex& b = share_object ? a : own.emplace(s, name);
  const std::string data = name + "-data";
  auto held_a = co_await a.async_lock(use_awaitable);
  const auto key_rev = co_await create_revision_of(c, held_a.key());
  const auto stale = txn().when(held_a.fence()).then(txn_op::put(data, "from A"));
  const auto token_a = held_a.fencing_token();
  std::optional<error_code> b_locked;
  mutex::hold held_b;
  b.async_lock([&b_locked, &held_b](error_code ec, mutex::hold h) {
    held_b = std::move(h);
    b_locked = ec;
  });
  BOOST_TEST_REQUIRE(co_await eventually([&] { return stats_of(c, name).waiting == 1; }, 5s));
  co_await held_a.async_release(use_awaitable);
  BOOST_TEST_REQUIRE(co_await eventually([&] { return b_locked.has_value(); }, 5s));
  BOOST_TEST_REQUIRE(!*b_locked);
  BOOST_TEST(bool(held_b));
  auto late = co_await c.async_txn(stale, use_awaitable);
  BOOST_TEST(!late.succeeded, "a fenced write built by the previous holder passed while B holds");
  const auto token_b = held_b.fencing_token();
  BOOST_TEST(token_b > token_a);
  auto mine = co_await c.async_txn(txn().when(held_b.fence()).then(txn_op::put(data, "from B")), use_awaitable);
  BOOST_TEST(mine.succeeded);
  auto got = co_await c.async_get(data, {}, use_awaitable);
  BOOST_TEST_REQUIRE(got.kvs.size() == 1u);
  BOOST_TEST(got.kvs.front().value == "from B");
  // The hand-off kept the key and its create revision: Go's and etcdctl's queue order is unchanged.
  BOOST_TEST(co_await create_revision_of(c, held_b.key()) == key_rev);
  const auto st = stats_of(c, name);
  BOOST_TEST(st.handoffs == 1u);
  BOOST_TEST(st.fenced_handoffs == 1u);
  co_await held_b.async_release(use_awaitable);
  co_await expect_no_keys(c, name);
  co_await c.async_delete(data, {}, use_awaitable);
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_fence_passes_only_for_the_local_holder_that_built_it_one_object) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, a_stale_fence_after_a_local_hand_off(c, "fence-shared-object", true));
}

BOOST_AUTO_TEST_CASE(a_fence_passes_only_for_the_local_holder_that_built_it_an_object_each) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, a_stale_fence_after_a_local_hand_off(c, "fence-object-each", false));
}

// with_lock's max_hold cancels a body whose fenced write is still on its way; the next caller
// of the session then holds, and the write arrives: rejected.
BOOST_AUTO_TEST_CASE(a_fence_built_by_a_body_cut_off_by_max_hold_fails_under_the_next_holder) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, use_awaitable);
    mutex m(s, "fence-max-hold");
    std::optional<txn> stale;
    auto body = [&](mutex::hold& h) -> asio::awaitable<void> {
      stale = txn().when(h.fence()).then(txn_op::put("fence-max-hold-data", "stale"));
      co_await sleep_for(10s);
    };
    const with_lock_options short_hold{.max_hold = 200ms};
    std::optional<error_code> cut;
    auto ex = co_await asio::this_coro::executor;
    asio::co_spawn(ex, [&]() -> asio::awaitable<void> {
      try {
        co_await with_lock(m, std::move(body), short_hold);
        cut = error_code{};
      } catch (const boost::system::system_error& e) {
        cut = e.code();
      }
    }, asio::detached);
    BOOST_TEST_REQUIRE(co_await eventually([&] { return stale.has_value(); }, 5s));
    std::optional<error_code> next;
    mutex::hold next_hold;
    m.async_lock([&next, &next_hold](error_code ec, mutex::hold h) {
      next_hold = std::move(h);
      next = ec;
    });
    BOOST_TEST_REQUIRE(co_await eventually([&] { return next.has_value(); }, 5s));
    BOOST_TEST_REQUIRE(!*next);
    BOOST_TEST((cut && *cut == error::max_hold_exceeded));
    auto late = co_await c.async_txn(*stale, use_awaitable);
    BOOST_TEST(!late.succeeded);
    auto own = co_await c.async_txn(txn().when(next_hold.fence()).then(txn_op::put("fence-max-hold-data", "next")), use_awaitable);
    BOOST_TEST(own.succeeded);
    co_await next_hold.async_release(use_awaitable);
    co_await expect_no_keys(c, "fence-max-hold");
    co_await c.async_delete("fence-max-hold-data", {}, use_awaitable);
  }(c));
}

// A fences, B does not, C does: only the hand-off after A writes (a put of the key); B hands
// to C with no RPC, and C's token is still above A's.
BOOST_AUTO_TEST_CASE(only_a_hand_off_after_a_fenced_holder_costs_a_write) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, use_awaitable);
    const std::string name = "fence-mixed";
    mutex a(s, name), b(s, name), d(s, name);
    auto held_a = co_await a.async_lock(use_awaitable);
    const auto token_a = held_a.fencing_token();
    std::optional<error_code> b_locked, d_locked;
    mutex::hold held_b, held_d;
    b.async_lock([&b_locked, &held_b](error_code ec, mutex::hold h) {
      held_b = std::move(h);
      b_locked = ec;
    });
    d.async_lock([&d_locked, &held_d](error_code ec, mutex::hold h) {
      held_d = std::move(h);
      d_locked = ec;
    });
    BOOST_TEST_REQUIRE(co_await eventually([&] { return stats_of(c, name).waiting == 2; }, 5s));
    co_await held_a.async_release(use_awaitable);
    BOOST_TEST_REQUIRE(co_await eventually([&] { return b_locked.has_value(); }, 5s));
    BOOST_TEST_REQUIRE(!*b_locked);
    BOOST_TEST(stats_of(c, name).fenced_handoffs == 1u);
    const auto txns_before = server().grpc_handled("Txn") + server().grpc_handled("Put");
    co_await held_b.async_release(use_awaitable);  // b asked for no fence
    BOOST_TEST_REQUIRE(co_await eventually([&] { return d_locked.has_value(); }, 5s));
    BOOST_TEST_REQUIRE(!*d_locked);
    BOOST_TEST(server().grpc_handled("Txn") + server().grpc_handled("Put") == txns_before);
    const auto st = stats_of(c, name);
    BOOST_TEST(st.handoffs == 2u);
    BOOST_TEST(st.fenced_handoffs == 1u);
    BOOST_TEST(held_d.fencing_token() > token_a);
    co_await held_d.async_release(use_awaitable);
    co_await expect_no_keys(c, name);
  }(c));
}

// A mutex and an election of one session on one name share the key (Go's layout). A fenced
// holder's unlock then keeps the key for the election; the next lock of the session adopts it
// and must still move the fence first, and the fence's put keeps the election's value.
BOOST_AUTO_TEST_CASE(a_fence_moves_on_a_key_an_election_of_the_session_keeps) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, use_awaitable);
    const std::string name = "fence-elect";
    election e(s, name);
    mutex a(s, name), b(s, name);
    auto lead = co_await e.async_campaign("leader-value", use_awaitable);
    auto held_a = co_await a.async_lock(use_awaitable);
    const auto stale = txn().when(held_a.fence()).then(txn_op::put(name + "-data", "from a"));
    co_await held_a.async_release(use_awaitable);  // the election keeps the key: no delete
    BOOST_TEST(co_await count_keys(c, name + "/") == 1);
    auto held_b = co_await b.async_lock(use_awaitable);
    auto late = co_await c.async_txn(stale, use_awaitable);
    BOOST_TEST(!late.succeeded, "a's fence passed under b, on the key the election kept");
    auto own = co_await c.async_txn(txn().when(held_b.fence()).then(txn_op::put(name + "-data", "from b")), use_awaitable);
    BOOST_TEST(own.succeeded);
    auto got = co_await c.async_get(held_b.key(), {}, use_awaitable);
    BOOST_TEST_REQUIRE(got.kvs.size() == 1u);
    BOOST_TEST(got.kvs.front().value == "leader-value", "the fence's put overwrote the election's value");
    co_await held_b.async_release(use_awaitable);
    BOOST_TEST(bool(lead));  // the mutex's holds came and went; the leadership stands
    co_await lead.async_release(use_awaitable);
    co_await expect_no_keys(c, name);
    co_await c.async_delete(name + "-data", {}, use_awaitable);
  }(c));
}
