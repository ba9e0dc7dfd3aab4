// queue, priority_queue, barrier and double_barrier on a 3-member cluster: each item to exactly
// one consumer (also with the raft leader killed mid-run), FIFO and priority order, waits and
// their cancellation, a participant that dies, double barrier participants entering at once or
// late, Go's contrib/recipes on the same names (a helper built from Debian's sources), bad input.
#define BOOST_TEST_MODULE coetcd_queue
#include "support/child_process.hpp"
#include "support/cluster.hpp"

#include <coetcd/barrier.hpp>
#include <coetcd/double_barrier.hpp>
#include <coetcd/priority_queue.hpp>
#include <coetcd/queue.hpp>

#include <map>
#include <set>

using namespace coetcd;
using namespace coetcd::test;
using namespace std::chrono_literals;

namespace {

struct restore_cluster {
  ~restore_cluster() { cluster().start_all(); }
};

/// What consumers took, by value: each must be there once.
struct taken_log {
  std::map<std::string, int> times;
  int errors = 0;
  std::string first_error;
  void error(error_code ec) {
    if (errors++ == 0) first_error = ec.message();
  }
};

asio::awaitable<void> produce(queue& q, std::string tag, int from, int to, taken_log& log) {
  for (int i = from; i < to; ++i) {
    auto [ec, key] = co_await q.async_enqueue(tag + std::to_string(i), asio::as_tuple(use_awaitable));
    if (ec) log.error(ec);
  }
}

asio::awaitable<void> consume(queue& q, int n, taken_log& log) {
  for (int i = 0; i < n; ++i) {
    auto [ec, v] = co_await q.async_dequeue(asio::as_tuple(use_awaitable));
    if (ec) log.error(ec);
    else ++log.times[v];
  }
}

/// Keys left under the queue's prefix and receipts of its objects, once settled.
asio::awaitable<void> expect_empty(client& c, const std::string& name) {
  co_await expect_no_keys(c, name);
  auto receipts = co_await settled_keys(c, "__coetcd-queue/" + name + "/", 0);
  BOOST_TEST(receipts == 0, "receipts left for " << name);
}

#ifdef COETCD_GO_RECIPES_PATH
std::string go(const std::string& args) { return std::string(COETCD_GO_RECIPES_PATH) + " -endpoints " + endpoint_list() + " " + args; }
#endif

}  // namespace

BOOST_TEST_GLOBAL_FIXTURE(shared_cluster);

// 400 items from 40 coroutines over two producer objects, taken by 30 coroutines over three
// consumer objects: each item once, nothing left behind (items, receipts).
BOOST_AUTO_TEST_CASE(each_item_goes_to_exactly_one_consumer) {
  asio::io_context ioc;
  client c1(ioc, cluster_options({0, 1, 2})), c2(ioc, cluster_options({1, 2, 0})), c3(ioc, cluster_options({2, 0, 1}));
  taken_log log;
  run_for(ioc, [](client& c1, client& c2, client& c3, taken_log& log) -> asio::awaitable<void> {
    auto ex = co_await asio::this_coro::executor;
    auto s1 = co_await session::async_create(c1, use_awaitable);
    auto s2 = co_await session::async_create(c2, use_awaitable);
    auto s3 = co_await session::async_create(c3, use_awaitable);
    {
      queue p1(s1, "q-once"), p2(s2, "q-once");
      queue k1(s1, "q-once"), k2(s2, "q-once"), k3(s3, "q-once");
      int done = 0;
      auto count = [&](std::exception_ptr) { ++done; };
      for (int i = 0; i < 20; ++i) asio::co_spawn(ex, produce(p1, "a", i * 10, i * 10 + 10, log), count);
      for (int i = 0; i < 20; ++i) asio::co_spawn(ex, produce(p2, "b", i * 10, i * 10 + 10, log), count);
      queue* consumers[] = {&k1, &k2, &k3};
      for (int i = 0; i < 30; ++i) asio::co_spawn(ex, consume(*consumers[i % 3], 400 / 30 + (i < 400 % 30 ? 1 : 0), log), count);
      co_await eventually([&] { return done == 70; }, 60s);
      BOOST_TEST(done == 70);
    }
    co_await expect_empty(c1, "q-once");
  }(c1, c2, c3, log), 90s);
  BOOST_TEST(log.errors == 0, log.errors << " errors, first: " << log.first_error);
  BOOST_TEST(log.times.size() == 400u);
  for (auto& [v, n] : log.times) BOOST_TEST(n == 1, v << " taken " << n << " times");
}

// One producer, one consumer: the order of enqueue is the order of dequeue; priorities go lowest
// number first, FIFO within one.
BOOST_AUTO_TEST_CASE(fifo_and_priority_order) {
  asio::io_context ioc;
  client c(ioc, cluster_options());
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, use_awaitable);
    {
      queue q(s, "q-order");
      for (int i = 0; i < 30; ++i) co_await q.async_enqueue("v" + std::to_string(i), use_awaitable);
      for (int i = 0; i < 30; ++i) BOOST_TEST(co_await q.async_dequeue(use_awaitable) == "v" + std::to_string(i));
      priority_queue pq(s, "pq-order");
      std::string key = co_await pq.async_enqueue("low-a", 7, use_awaitable);
      BOOST_TEST(key == "pq-order/00007/0000000000000000");
      co_await pq.async_enqueue("high-a", 0, use_awaitable);
      co_await pq.async_enqueue("mid", 3, use_awaitable);
      co_await pq.async_enqueue("high-b", 0, use_awaitable);
      co_await pq.async_enqueue("low-b", 7, use_awaitable);
      for (auto want : {"high-a", "high-b", "mid", "low-a", "low-b"}) BOOST_TEST(co_await pq.async_dequeue(use_awaitable) == want);
    }
    co_await expect_empty(c, "q-order");
    co_await expect_empty(c, "pq-order");
    co_await c.async_delete("__pq-order/", delete_options{.prefix = true}, use_awaitable);
  }(c));
}

// A dequeue waits for an item; a cancelled one takes none (the next item goes to the other
// consumer); a lost session fails the waiting dequeue, and the object after it.
BOOST_AUTO_TEST_CASE(waits_cancellation_and_a_lost_session) {
  asio::io_context ioc;
  client c(ioc, cluster_options());
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, use_awaitable);
    // A short TTL: the keepalive, which learns of the revoke below, renews every second.
    auto t = co_await session::async_create(c, session_options{.ttl = 3s}, use_awaitable);
    queue producer(s, "q-wait"), a(s, "q-wait"), b(t, "q-wait");
    std::optional<error_code> cancelled_ec;
    asio::cancellation_signal cancel;
    a.async_dequeue(asio::bind_cancellation_slot(cancel.slot(), [&](error_code ec, std::string) { cancelled_ec = ec; }));
    std::optional<std::string> got;
    b.async_dequeue([&](error_code ec, std::string v) { got = ec ? "error: " + ec.message() : v; });
    co_await sleep_for(300ms);
    BOOST_TEST(!cancelled_ec.has_value());
    BOOST_TEST(!got.has_value());
    cancel.emit(asio::cancellation_type::terminal);
    co_await eventually([&] { return cancelled_ec.has_value(); }, 5s);
    BOOST_TEST_REQUIRE(cancelled_ec.has_value());
    BOOST_TEST(*cancelled_ec == asio::error::operation_aborted);
    co_await producer.async_enqueue("only", use_awaitable);
    co_await eventually([&] { return got.has_value(); }, 5s);
    BOOST_TEST(got.value_or("nothing") == "only");

    std::optional<error_code> lost_ec;
    b.async_dequeue([&](error_code ec, std::string) { lost_ec = ec; });
    co_await sleep_for(100ms);
    co_await c.async_lease_revoke(t.lease(), use_awaitable);
    co_await eventually([&] { return lost_ec.has_value(); }, 10s);
    BOOST_TEST_REQUIRE(lost_ec.has_value());
    BOOST_TEST(*lost_ec == error::session_lost, lost_ec->message());
    auto [ec, v] = co_await b.async_dequeue(asio::as_tuple(use_awaitable));
    BOOST_TEST(ec == error::session_lost);
  }(c));
  run_for(ioc, [](client& c) -> asio::awaitable<void> { co_await expect_empty(c, "q-wait"); }(c));
}

// The raft leader is killed while 4 coroutines over 2 producer objects and 8 over 2 consumer
// objects move 600 items: every item arrives, none twice (txns resent after the loss apply once).
BOOST_AUTO_TEST_CASE(no_item_lost_or_taken_twice_when_the_leader_is_killed) {
  restore_cluster restore;
  asio::io_context ioc;
  client c1(ioc, cluster_options({0, 1, 2})), c2(ioc, cluster_options({1, 2, 0}));
  taken_log log;
  int killed = -1;
  run_for(ioc, [](client& c1, client& c2, taken_log& log, int& killed) -> asio::awaitable<void> {
    auto ex = co_await asio::this_coro::executor;
    auto s1 = co_await session::async_create(c1, session_options{.ttl = 30s}, use_awaitable);
    auto s2 = co_await session::async_create(c2, session_options{.ttl = 30s}, use_awaitable);
    {
      queue p1(s1, "q-kill"), p2(s2, "q-kill"), k1(s1, "q-kill"), k2(s2, "q-kill");
      int done = 0;
      auto count = [&](std::exception_ptr) { ++done; };
      for (int i = 0; i < 2; ++i) asio::co_spawn(ex, produce(p1, "a", i * 150, i * 150 + 150, log), count);
      for (int i = 0; i < 2; ++i) asio::co_spawn(ex, produce(p2, "b", i * 150, i * 150 + 150, log), count);
      for (int i = 0; i < 8; ++i) asio::co_spawn(ex, consume(i % 2 ? k2 : k1, 75, log), count);
      while (log.times.size() < 100) co_await sleep_for(5ms);
      killed = cluster().leader();
      BOOST_TEST_REQUIRE(killed >= 0);
      cluster().member(killed).kill();
      co_await eventually([&] { return done == 12; }, 100s);
      BOOST_TEST(done == 12);
      BOOST_TEST_MESSAGE("killed m" << killed << " after 100 items; all " << log.times.size() << " arrived");
    }
    co_await expect_empty(c1, "q-kill");
  }(c1, c2, log, killed), 120s);
  BOOST_TEST(log.errors == 0, log.errors << " errors, first: " << log.first_error);
  BOOST_TEST(log.times.size() == 600u);
  for (auto& [v, n] : log.times) BOOST_TEST(n == 1, v << " taken " << n << " times");
}

// A barrier holds waiters until released; one held under a session opens when the holder's lease
// is gone. A double barrier lets its participants in together and out together, and a
// participant that dies does not keep the others in.
BOOST_AUTO_TEST_CASE(barriers_hold_release_and_survive_a_dead_participant) {
  asio::io_context ioc;
  client c(ioc, cluster_options());
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    barrier b(c, "bar-plain");
    co_await b.async_wait(use_awaitable);  // not held: at once
    co_await b.async_hold(use_awaitable);
    auto [again] = co_await b.async_hold(asio::as_tuple(use_awaitable));
    BOOST_TEST(again == error::key_exists);
    bool released = false;
    b.async_wait([&](error_code ec) { released = !ec; });
    co_await sleep_for(300ms);
    BOOST_TEST(!released);
    co_await b.async_release(use_awaitable);
    co_await eventually([&] { return released; }, 5s);
    BOOST_TEST(released);

    auto holder = co_await session::async_create(c, use_awaitable);
    barrier held(holder, "bar-lease");
    co_await held.async_hold(use_awaitable);
    bool opened = false;
    barrier watching(c, "bar-lease");  // kept: destroying a barrier aborts its pending wait
    watching.async_wait([&](error_code ec) { opened = !ec; });
    co_await sleep_for(200ms);
    BOOST_TEST(!opened);
    co_await c.async_lease_revoke(holder.lease(), use_awaitable);  // the holder dies
    co_await eventually([&] { return opened; }, 5s);
    BOOST_TEST(opened);

    // Three participants; the third dies once inside: the other two still leave.
    auto sa = co_await session::async_create(c, use_awaitable);
    auto sb = co_await session::async_create(c, use_awaitable);
    auto sc = co_await session::async_create(c, use_awaitable);
    double_barrier da(sa, "dbar", 3), db(sb, "dbar", 3), dc(sc, "dbar", 3);
    int entered = 0, left = 0;
    da.async_enter([&](error_code ec) { entered += !ec; });
    db.async_enter([&](error_code ec) { entered += !ec; });
    co_await sleep_for(300ms);
    BOOST_TEST(entered == 0);
    co_await dc.async_enter(use_awaitable);
    co_await eventually([&] { return entered == 2; }, 5s);
    BOOST_TEST(entered == 2);
    auto extra_session = co_await session::async_create(c, use_awaitable);
    double_barrier extra(extra_session, "dbar", 3);
    auto [too_many] = co_await extra.async_enter(asio::as_tuple(use_awaitable));
    BOOST_TEST(too_many == error::too_many_clients, too_many.message());
    co_await c.async_lease_revoke(sc.lease(), use_awaitable);  // the third dies inside
    da.async_leave([&](error_code ec) { left += !ec; });
    db.async_leave([&](error_code ec) { left += !ec; });
    co_await eventually([&] { return left == 2; }, 10s);
    BOOST_TEST(left == 2);
    BOOST_TEST(co_await count_keys(c, "dbar/") == 0);
  }(c));
}

// Count 2, A waiting, B and D entering at once from clients on different members, 8 rounds: the
// older key of B and D opens (A passes with it), the other gets too_many_clients and takes its key
// out. Counting the keys (Go 3.4.23's Enter) let both count 3 and give up, leaving A shut in.
BOOST_AUTO_TEST_CASE(double_barrier_admits_one_of_two_entering_together) {
  asio::io_context ioc;
  client ca(ioc, cluster_options({0, 1, 2})), cb(ioc, cluster_options({1, 2, 0})), cd(ioc, cluster_options({2, 0, 1}));
  run_for(ioc, [](client& ca, client& cb, client& cd) -> asio::awaitable<void> {
    auto passed = [](const outcome& o) { return o->has_value() && !**o; };
    auto refused = [](const outcome& o) { return o->has_value() && **o == error::too_many_clients; };
    auto text = [](const outcome& o) { return o->has_value() ? (*o)->message() : std::string("pending"); };
    for (int round = 0; round < 8; ++round) {
      const std::string name = "dbar-race-" + std::to_string(round);
      auto sa = co_await session::async_create(ca, use_awaitable);
      auto sb = co_await session::async_create(cb, use_awaitable);
      auto sd = co_await session::async_create(cd, use_awaitable);
      double_barrier a(sa, name, 2), b(sb, name, 2), d(sd, name, 2);
      auto ea = started(), eb = started(), ed = started();
      a.async_enter(record(ea));
      const auto a_in = co_await settled_keys(ca, name + "/waiters/", 1);
      BOOST_TEST(a_in == 1);
      b.async_enter(record(eb));
      d.async_enter(record(ed));
      co_await settled(eb, 10s);
      co_await settled(ed, 10s);
      const bool opened = co_await settled(ea);
      BOOST_TEST(opened, "round " << round << ": A shut in; B " << text(eb) << ", D " << text(ed));
      if (!opened) {  // let A out, so that the next rounds run
        co_await ca.async_put(name + "/ready", "", use_awaitable);
        co_await settled(ea);
      }
      BOOST_TEST(passed(ea), "round " << round << ": A " << text(ea));
      BOOST_TEST(passed(eb) + passed(ed) == 1, "round " << round << ": B " << text(eb) << ", D " << text(ed));
      BOOST_TEST(refused(eb) + refused(ed) == 1, "round " << round << ": B " << text(eb) << ", D " << text(ed));
      const auto in = co_await settled_keys(ca, name + "/waiters/", 2);
      BOOST_TEST(in == 2, "round " << round << ": keys of A and the one let in, none of the refused");
      auto la = started(), lx = started();
      a.async_leave(record(la));
      if (passed(eb)) b.async_leave(record(lx));
      else if (passed(ed)) d.async_leave(record(lx));
      else *lx = error_code{};
      const bool a_out = co_await settled(la, 10s);
      const bool x_out = co_await settled(lx, 10s);
      BOOST_TEST((a_out && x_out), "round " << round << ": the two let in did not leave");
      co_await expect_no_keys(ca, name);
    }
  }(ca, cb, cd), 120s);
}

// A round opened, and B, not the lowest, left (its key gone, waiting for A): a third that enters now
// ranks second among the keys left but comes too late: too_many_clients, and no key of it stays.
// Go 3.4.23 counted 2 keys and opened for it, and ranking alone would let it in too.
BOOST_AUTO_TEST_CASE(double_barrier_refuses_a_late_comer_while_a_round_leaves) {
  asio::io_context ioc;
  client c(ioc, cluster_options());
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto sa = co_await session::async_create(c, use_awaitable);
    auto sb = co_await session::async_create(c, use_awaitable);
    auto sr = co_await session::async_create(c, use_awaitable);
    double_barrier a(sa, "dbar-late", 2), b(sb, "dbar-late", 2), late(sr, "dbar-late", 2);
    auto ea = started();
    a.async_enter(record(ea));
    const auto a_in = co_await settled_keys(c, "dbar-late/waiters/", 1);
    BOOST_TEST(a_in == 1);
    co_await b.async_enter(use_awaitable);
    const bool opened = co_await settled(ea);
    BOOST_TEST(opened);
    auto lb = started();
    b.async_leave(record(lb));
    const auto b_out = co_await settled_keys(c, "dbar-late/waiters/", 1);
    BOOST_TEST(b_out == 1);
    auto [ec] = co_await late.async_enter(asio::as_tuple(use_awaitable));
    BOOST_TEST(ec == error::too_many_clients, ec.message());
    const auto left = co_await settled_keys(c, "dbar-late/waiters/", 1);
    BOOST_TEST(left == 1, "only A's key");
    BOOST_TEST(!lb->has_value(), "B left before A");
    auto la = started();
    a.async_leave(record(la));
    const bool a_done = co_await settled(la, 10s);
    const bool b_done = co_await settled(lb, 10s);
    BOOST_TEST((a_done && b_done));
    co_await expect_no_keys(c, "dbar-late");
  }(c), 60s);
}

// Go's contrib/recipes on the same names: items cross both ways in both queues; Go waits on our
// barrier; a double barrier of two Go participants and one of ours.
BOOST_AUTO_TEST_CASE(go_recipes_share_the_queues_and_barriers) {
#ifndef COETCD_GO_RECIPES_PATH
  BOOST_TEST_MESSAGE("skipped: Go or Debian's etcd sources were not found at configure time");
  BOOST_TEST(true);
#else
  asio::io_context ioc;
  client c(ioc, cluster_options());
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, use_awaitable);
    {
      queue q(s, "q-go");
      auto put = run_command(go("queue-put q-go 20"));
      BOOST_TEST(put.output == "put 20\n", put.output);
      for (int i = 0; i < 20; ++i) BOOST_TEST(co_await q.async_dequeue(use_awaitable) == "go-" + std::to_string(i));
      for (int i = 0; i < 20; ++i) co_await q.async_enqueue("co-" + std::to_string(i), use_awaitable);
      auto take = run_command(go("queue-take q-go 20"));
      std::string want;
      for (int i = 0; i < 20; ++i) want += "co-" + std::to_string(i) + "\n";
      BOOST_TEST(take.output == want, take.output);

      priority_queue pq(s, "pq-go");
      auto pput = run_command(go("pq-put pq-go 9"));  // go-i at priority i % 3
      BOOST_TEST(pput.output == "put 9\n", pput.output);
      for (auto v : {"go-0", "go-3", "go-6", "go-1", "go-4", "go-7", "go-2", "go-5", "go-8"})
        BOOST_TEST(co_await pq.async_dequeue(use_awaitable) == v);
      co_await pq.async_enqueue("co-2", 2, use_awaitable);
      co_await pq.async_enqueue("co-0", 0, use_awaitable);
      co_await pq.async_enqueue("co-1", 1, use_awaitable);
      auto ptake = run_command(go("pq-take pq-go 3"));
      BOOST_TEST(ptake.output == "co-0\nco-1\nco-2\n", ptake.output);
    }
    // Go's Barrier.Wait watches for the hold's PUT and then a DELETE from the revision it read,
    // so it sees a release only when nothing was written between the hold and its read (a quirk
    // of Go's, not copied): the queues' receipts are gone first, and nothing writes meanwhile.
    co_await settled_keys(c, "__coetcd-queue/", 0);
    barrier b(c, "bar-go");
    co_await b.async_hold(use_awaitable);
    child_process waiter("exec " + go("barrier-wait bar-go"));
    co_await sleep_for(1s);
    BOOST_TEST(waiter.output().find("released") == std::string::npos, waiter.output());
    co_await b.async_release(use_awaitable);
    BOOST_TEST(waiter.wait_for_output("released", 10s), waiter.output());
    // Go holds, we wait, we release.
    auto held = run_command(go("barrier-hold bar-go"));
    BOOST_TEST(held.output == "held\n", held.output);
    bool released = false;
    b.async_wait([&](error_code ec) { released = !ec; });
    co_await sleep_for(300ms);
    BOOST_TEST(!released);
    co_await b.async_release(use_awaitable);
    co_await eventually([&] { return released; }, 5s);
    BOOST_TEST(released);

    child_process g1("exec " + go("double dbar-go 3 200ms")), g2("exec " + go("double dbar-go 3 200ms"));
    co_await sleep_for(500ms);
    BOOST_TEST(g1.output().find("entered") == std::string::npos, g1.output());
    double_barrier ours(s, "dbar-go", 3);
    co_await ours.async_enter(use_awaitable);
    BOOST_TEST(g1.wait_for_output("entered", 10s), g1.output());
    BOOST_TEST(g2.wait_for_output("entered", 10s), g2.output());
    co_await ours.async_leave(use_awaitable);
    BOOST_TEST(g1.wait_for_output("left", 10s), g1.output());
    BOOST_TEST(g2.wait_for_output("left", 10s), g2.output());
    co_await expect_empty(c, "q-go");
    co_await expect_empty(c, "pq-go");
    co_await c.async_delete("__pq-go/", delete_options{.prefix = true}, use_awaitable);
    BOOST_TEST(co_await count_keys(c, "dbar-go/") == 0);
  }(c), 90s);
#endif
}

BOOST_AUTO_TEST_CASE(bad_input) {
  asio::io_context ioc;
  client c(ioc, cluster_options());
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, use_awaitable);
    session empty;
    BOOST_TEST(thrown_code([&] { queue q(s, ""); }) == error::empty_key);
    BOOST_TEST(thrown_code([&] { queue q(empty, "x"); }) == error::session_lost);
    BOOST_TEST(thrown_code([&] { queue q(s, "x", queue_options{.max_batch = 0}); }) == error::invalid_argument);
    BOOST_TEST(thrown_code([&] { priority_queue q(s, "", {}); }) == error::empty_key);
    BOOST_TEST(thrown_code([&] { barrier b(c, ""); }) == error::empty_key);
    BOOST_TEST(thrown_code([&] { barrier b(empty, "x"); }) == error::session_lost);
    BOOST_TEST(thrown_code([&] { double_barrier b(s, "x", 0); }) == error::invalid_argument);
    BOOST_TEST(thrown_code([&] { double_barrier b(empty, "x", 2); }) == error::session_lost);
    queue q(s, "q-bad");
    queue moved(std::move(q));
    auto [ec, v] = co_await q.async_dequeue(asio::as_tuple(use_awaitable));
    BOOST_TEST(ec == asio::error::bad_descriptor);
    co_await s.async_close(use_awaitable);
    auto [lec, key] = co_await moved.async_enqueue("x", asio::as_tuple(use_awaitable));
    BOOST_TEST(lec == error::session_lost, lec.message());
    BOOST_TEST(co_await count_keys(c, "q-bad/") == 0);
  }(c));
}
