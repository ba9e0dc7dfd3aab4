// The read-write lock against a real etcd: who may hold together, FIFO without writer starvation,
// local readers on one key, and a writer's fence (the failure paths: test_rw_mutex_failures.cpp;
// etcd's Go recipe.RWMutex: test_rw_mutex_interop.cpp).
#define BOOST_TEST_MODULE coetcd_rw_mutex
#include "support/fixture.hpp"

#include <coetcd/rw_mutex.hpp>

#include <boost/asio/experimental/awaitable_operators.hpp>

#include <algorithm>
#include <map>
#include <memory>
#include <vector>

using namespace coetcd;
using namespace coetcd::test;
using namespace std::chrono_literals;
using namespace boost::asio::experimental::awaitable_operators;

BOOST_TEST_GLOBAL_FIXTURE(shared_etcd);

namespace {

/// Who is inside one name's critical section, as its holders report it (one event loop, so the
/// counts are exact).
struct checker {
  int readers = 0, writers = 0;
  int max_readers = 0;
  int violations = 0;  // a writer with anyone inside, or a reader with a writer inside
  int reads = 0, writes = 0, errors = 0, finished = 0;
  void enter(bool write) {
    if (write) {
      if (readers || writers) ++violations;
      ++writers;
    } else {
      if (writers) ++violations;
      max_readers = std::max(max_readers, ++readers);
    }
  }
  void leave(bool write) { --(write ? writers : readers); }
};
}  // namespace

// Keys as Go's recipe.RWMutex lays them out, under the session's lease; none left after release.
// A hold released twice says not_locked; an empty one, bad_descriptor.
BOOST_AUTO_TEST_CASE(keys_are_laid_out_as_gos_recipe) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, use_awaitable);
    rw_mutex m(s, "rw-layout");
    BOOST_TEST(m.write_key() == "rw-layout/write/" + hex(s.lease()));
    BOOST_TEST(m.read_key() == "rw-layout/read/" + hex(s.lease()));
    auto shared = co_await m.async_lock_shared(use_awaitable);
    BOOST_TEST(bool(shared));
    BOOST_TEST(shared.key() == m.read_key());
    BOOST_TEST(co_await count_keys(c, "rw-layout/write/") == 0);  // a reader makes no write key
    auto r = co_await c.async_get(m.read_key(), use_awaitable);
    BOOST_TEST_REQUIRE(r.kvs.size() == 1u);
    BOOST_TEST(r.kvs[0].lease == s.lease());
    BOOST_TEST(shared.fencing_token() == r.kvs[0].create_revision);
    auto fenced = co_await c.async_txn(txn().when(shared.fence()).then(txn_op::put("rw-layout-data", "r")), use_awaitable);
    BOOST_TEST(fenced.succeeded);
    co_await shared.async_release(use_awaitable);
    BOOST_TEST(!shared);
    BOOST_TEST(shared.fencing_token() == 0);
    BOOST_TEST(co_await count_keys(c, "rw-layout/") == 0);
    auto excl = co_await m.async_lock(use_awaitable);
    BOOST_TEST(bool(excl));
    BOOST_TEST(excl.key() == m.write_key());
    auto w = co_await c.async_get(m.write_key(), use_awaitable);
    BOOST_TEST_REQUIRE(w.kvs.size() == 1u);
    BOOST_TEST(excl.fencing_token() == w.kvs[0].create_revision);
    // The shared hold, released already, cannot let the writer's key go.
    auto [e] = co_await shared.async_release(asio::as_tuple(use_awaitable));
    BOOST_TEST(e == error::not_locked, e.message());
    BOOST_TEST(co_await count_keys(c, "rw-layout/write/") == 1);
    co_await excl.async_release(use_awaitable);
    BOOST_TEST(!excl);
    auto stale = co_await c.async_txn(txn().when(excl.fence()).then(txn_op::put("rw-layout-data", "w")), use_awaitable);
    BOOST_TEST(!stale.succeeded);
    auto [e2] = co_await excl.async_release(asio::as_tuple(use_awaitable));
    BOOST_TEST(e2 == error::not_locked, e2.message());
    rw_mutex::shared_hold none;
    BOOST_TEST(!none);
    auto [e3] = co_await none.async_release(asio::as_tuple(use_awaitable));
    BOOST_TEST(e3 == asio::error::bad_descriptor, e3.message());
    co_await c.async_delete("rw-layout-data", use_awaitable);
    co_await expect_no_keys(c, "rw-layout");
    BOOST_CHECK_THROW(rw_mutex(s, ""), boost::system::system_error);
  }(c));
}

// 3 clients x 8 sessions, a quarter of them writers, each taking the lock 8 times: a writer
// never holds with anyone, readers do hold together, and every fenced write of a writer lands.
BOOST_AUTO_TEST_CASE(writers_exclude_everyone_and_readers_share) {
  asio::io_context ioc;
  client c1(ioc, options_for(server())), c2(ioc, options_for(server())), c3(ioc, options_for(server()));
  auto st = std::make_shared<checker>();
  constexpr int workers = 24, rounds = 8;
  auto worker = [](client& c, std::shared_ptr<checker> st, bool write) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, use_awaitable);
    rw_mutex m(s, "rw-check");
    for (int i = 0; i < rounds; ++i) {
      error_code ec;
      rw_mutex::hold excl;
      rw_mutex::shared_hold shared;
      if (write) std::tie(ec, excl) = co_await m.async_lock(asio::as_tuple(use_awaitable));
      else std::tie(ec, shared) = co_await m.async_lock_shared(asio::as_tuple(use_awaitable));
      if (ec) {
        ++st->errors;
        continue;
      }
      st->enter(write);
      if (write) {
        auto r = co_await c.async_get("rw-check-counter", use_awaitable);
        int n = r.kvs.empty() ? 0 : std::stoi(r.kvs[0].value);
        auto w = co_await c.async_txn(
            txn().when(excl.fence()).then(txn_op::put("rw-check-counter", std::to_string(n + 1))), use_awaitable);
        if (w.succeeded) ++st->writes;
      } else {
        ++st->reads;
        co_await sleep_for(3ms);
      }
      st->leave(write);
      if (write) co_await excl.async_release(use_awaitable);
      else co_await shared.async_release(use_awaitable);
    }
    co_await s.async_close(use_awaitable);
    ++st->finished;
  };
  run_for(ioc, [](client& c1, client& c2, client& c3, std::shared_ptr<checker> st, auto worker) -> asio::awaitable<void> {
    auto ex = co_await asio::this_coro::executor;
    client* clients[] = {&c1, &c2, &c3};
    for (int w = 0; w < workers; ++w) asio::co_spawn(ex, worker(*clients[w % 3], st, w % 4 == 0), asio::detached);
    while (st->finished < workers) co_await sleep_for(20ms);
    auto r = co_await c1.async_get("rw-check-counter", use_awaitable);
    BOOST_TEST_REQUIRE(r.kvs.size() == 1u);
    BOOST_TEST(std::stoi(r.kvs[0].value) == workers / 4 * rounds);
    co_await c1.async_delete("rw-check-counter", use_awaitable);
    co_await expect_no_keys(c1, "rw-check");
  }(c1, c2, c3, st, worker), 120s);
  BOOST_TEST(st->errors == 0);
  BOOST_TEST(st->violations == 0);
  BOOST_TEST(st->writes == workers / 4 * rounds);
  BOOST_TEST(st->reads == workers * 3 / 4 * rounds);
  BOOST_TEST(st->max_readers > 1);  // readers did hold together
}

// Twenty readers of one session, an object each: they hold together on the session's one read
// key (one token), and the ones that come while it is held join without an RPC.
BOOST_AUTO_TEST_CASE(readers_of_one_session_share_one_key) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, use_awaitable);
    std::vector<std::unique_ptr<rw_mutex>> readers;
    for (int i = 0; i < 20; ++i) readers.push_back(std::make_unique<rw_mutex>(s, "rw-local"));
    std::vector<rw_mutex::shared_hold> holds;
    auto h0 = co_await readers[0]->async_lock_shared(use_awaitable);
    holds.push_back(std::move(h0));
    const auto txns = server().grpc_handled("Txn");
    for (int i = 1; i < 20; ++i) {
      auto h = co_await readers[i]->async_lock_shared(use_awaitable);
      holds.push_back(std::move(h));
    }
    BOOST_TEST(server().grpc_handled("Txn") == txns);  // joined locally
    for (auto& h : holds) {
      BOOST_TEST(bool(h));
      BOOST_TEST(h.key() == readers[0]->read_key());
      BOOST_TEST(h.fencing_token() == holds[0].fencing_token());
    }
    BOOST_TEST(co_await count_keys(c, "rw-local/") == 1);
    // One object may hold it shared more than once.
    auto again = co_await readers[0]->async_lock_shared(use_awaitable);
    BOOST_TEST(bool(again));
    for (auto& h : holds) co_await h.async_release(use_awaitable);
    BOOST_TEST(co_await count_keys(c, "rw-local/") == 1);  // `again` still holds
    BOOST_TEST(bool(again));
    co_await again.async_release(use_awaitable);
    co_await expect_no_keys(c, "rw-local");
  }(c));
}

// Two shared holds of one session (through two objects) share its read key: releasing one keeps
// the key, and the other's fence still passes and still keeps a writer out; releasing both deletes
// it. (The count lived on the object before; now each hold is counted by the session's queue.)
BOOST_AUTO_TEST_CASE(a_sessions_read_key_lives_while_any_of_its_shared_holds_does) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, use_awaitable);
    auto so = co_await session::async_create(c, use_awaitable);
    rw_mutex a(s, "rw-two"), b(s, "rw-two"), writer(so, "rw-two");
    auto first = co_await a.async_lock_shared(use_awaitable);
    auto second = co_await b.async_lock_shared(use_awaitable);
    BOOST_TEST(co_await count_keys(c, "rw-two/") == 1);
    const auto fence = second.fence();
    co_await first.async_release(use_awaitable);
    BOOST_TEST(!first);
    BOOST_TEST(bool(second));
    BOOST_TEST(co_await count_keys(c, "rw-two/read/") == 1, "releasing one of two shared holds deleted the read key");
    auto still = co_await c.async_txn(txn().when(fence).then(txn_op::put("rw-two-data", "1")), use_awaitable);
    BOOST_TEST(still.succeeded);
    auto [busy, refused] = co_await writer.async_try_lock(asio::as_tuple(use_awaitable));
    BOOST_TEST(busy == error::locked, busy.message());
    BOOST_TEST(!refused);
    co_await second.async_release(use_awaitable);
    BOOST_TEST(!second);
    BOOST_TEST(co_await count_keys(c, "rw-two/") == 0, "releasing both shared holds left the read key");
    auto late = co_await c.async_txn(txn().when(fence).then(txn_op::put("rw-two-data", "2")), use_awaitable);
    BOOST_TEST(!late.succeeded);
    auto [later, w] = co_await writer.async_try_lock(asio::as_tuple(use_awaitable));
    BOOST_TEST(!later, later.message());
    BOOST_TEST(bool(w));
    if (!later) co_await w.async_release(use_awaitable);
    co_await c.async_delete("rw-two-data", use_awaitable);
    co_await expect_no_keys(c, "rw-two");
  }(c));
}

// Readers of 20 sessions and writers of 4 asking at once: read keys may share a create revision
// (their puts leave in one txn, and they hold together anyway), a write key never shares one.
BOOST_AUTO_TEST_CASE(read_keys_may_share_a_revision_write_keys_never) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    std::vector<session> sessions;
    for (int i = 0; i < 24; ++i) sessions.push_back(co_await session::async_create(c, use_awaitable));
    std::vector<std::unique_ptr<rw_mutex>> locks;
    for (auto& s : sessions) locks.push_back(std::make_unique<rw_mutex>(s, "rw-revs"));
    // A writer holds first, so everyone else queues behind it and is in etcd at once.
    auto first = co_await locks[0]->async_lock(use_awaitable);
    struct grants {
      int granted = 0;
      std::vector<rw_mutex::hold> writers = std::vector<rw_mutex::hold>(24);
      std::vector<rw_mutex::shared_hold> readers = std::vector<rw_mutex::shared_hold>(24);
    };
    auto g = std::make_shared<grants>();
    for (int i = 1; i < 24; ++i) {
      if (i % 6 == 0)
        locks[i]->async_lock([g, i](error_code ec, rw_mutex::hold h) {
          g->granted += !ec;
          g->writers[i] = std::move(h);
        });
      else
        locks[i]->async_lock_shared([g, i](error_code ec, rw_mutex::shared_hold h) {
          g->granted += !ec;
          g->readers[i] = std::move(h);
        });
    }
    for (int i = 0; i < 500 && co_await count_keys(c, "rw-revs/") < 24; ++i) co_await sleep_for(5ms);
    auto r = co_await c.async_get("rw-revs/", get_options{.prefix = true}, use_awaitable);
    BOOST_TEST_REQUIRE(r.kvs.size() == 24u);
    std::map<std::int64_t, std::vector<std::string>> by_rev;
    for (const auto& kv : r.kvs) by_rev[kv.create_revision].push_back(kv.key);
    bool shared_one = false;
    for (const auto& [rev, keys] : by_rev) {
      if (keys.size() > 1) shared_one = true;
      for (const auto& k : keys)
        BOOST_TEST((keys.size() == 1 || k.starts_with("rw-revs/read/")), k << " shares revision " << rev);
    }
    BOOST_TEST(shared_one);  // batching did put read keys together
    co_await first.async_release(use_awaitable);
    // Each hold is released once granted, so the writers behind the readers get their turns.
    auto release_granted = [](grants& g) -> asio::awaitable<void> {
      for (auto& h : g.writers)
        if (h) co_await h.async_release(use_awaitable);
      for (auto& h : g.readers)
        if (h) co_await h.async_release(use_awaitable);
    };
    while (g->granted < 23) {
      co_await sleep_for(5ms);
      co_await release_granted(*g);
    }
    co_await release_granted(*g);
    co_await expect_no_keys(c, "rw-revs");
  }(c));
}

// FIFO: a writer queued behind a held read key holds back every reader that comes after it, of
// another session and of the holder's own session, until it has had its turn.
BOOST_AUTO_TEST_CASE(a_waiting_writer_holds_back_later_readers) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto sa = co_await session::async_create(c, use_awaitable);
    auto sb = co_await session::async_create(c, use_awaitable);
    auto sc = co_await session::async_create(c, use_awaitable);
    rw_mutex first(sa, "rw-fifo"), same_session(sa, "rw-fifo"), writer(sb, "rw-fifo"), other(sc, "rw-fifo");
    auto held = co_await first.async_lock_shared(use_awaitable);
    auto w = acquiring<rw_mutex::hold>();
    writer.async_lock(record(w));
    // The writer's key is in the queue when the later readers come.
    for (int i = 0; i < 200 && co_await count_keys(c, "rw-fifo/write/") == 0; ++i) co_await sleep_for(5ms);
    co_await sleep_for(100ms);  // the view has seen it
    auto r1 = acquiring<rw_mutex::shared_hold>(), r2 = acquiring<rw_mutex::shared_hold>();
    same_session.async_lock_shared(record(r1));
    other.async_lock_shared(record(r2));
    co_await sleep_for(300ms);
    BOOST_TEST(!w->ec.has_value());
    BOOST_TEST(!r1->ec.has_value());  // not joined: the writer came first
    BOOST_TEST(!r2->ec.has_value());
    co_await held.async_release(use_awaitable);
    BOOST_TEST_REQUIRE(co_await settled(w));
    BOOST_TEST(!*w->ec);
    BOOST_TEST(bool(w->hold));
    co_await sleep_for(100ms);
    BOOST_TEST(!r1->ec.has_value());
    BOOST_TEST(!r2->ec.has_value());
    co_await w->hold.async_release(use_awaitable);
    BOOST_TEST_REQUIRE(co_await settled(r1));
    BOOST_TEST_REQUIRE(co_await settled(r2));
    BOOST_TEST(!*r1->ec);
    BOOST_TEST(!*r2->ec);
    BOOST_TEST(bool(r1->hold));
    BOOST_TEST(bool(r2->hold));
    co_await r1->hold.async_release(use_awaitable);
    co_await r2->hold.async_release(use_awaitable);
    co_await expect_no_keys(c, "rw-fifo");
  }(c));
}

// One session's readers and writers are served in the order they asked: a writer that asked after
// a waiting reader of its own session does not take the write key over from the writer before it
// (a local hand-off), it queues behind that reader. Before, local hand-offs between writers kept
// the key for up to fair_hold while the session's readers waited.
BOOST_AUTO_TEST_CASE(a_sessions_readers_and_writers_take_turns_in_the_order_they_asked) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, use_awaitable);
    rw_mutex w1(s, "rw-turns"), reader(s, "rw-turns"), w2(s, "rw-turns"), w3(s, "rw-turns");
    auto h1 = co_await w1.async_lock(use_awaitable);
    auto r = acquiring<rw_mutex::shared_hold>();
    auto second = acquiring<rw_mutex::hold>();
    reader.async_lock_shared(record(r));
    for (int i = 0; i < 200 && co_await count_keys(c, "rw-turns/read/") == 0; ++i) co_await sleep_for(5ms);
    w2.async_lock(record(second));
    co_await sleep_for(50ms);
    BOOST_TEST(!r->ec.has_value());
    BOOST_TEST(!second->ec.has_value());
    co_await h1.async_release(use_awaitable);
    BOOST_TEST_REQUIRE(co_await settled(r));
    BOOST_TEST(!*r->ec);
    BOOST_TEST(bool(r->hold));
    BOOST_TEST(!second->ec.has_value());  // the reader asked first
    // A writer asking while the reader holds queues behind w2, not beside the reader.
    auto third = acquiring<rw_mutex::hold>();
    w3.async_lock(record(third));
    co_await sleep_for(50ms);
    BOOST_TEST(!second->ec.has_value());
    BOOST_TEST(!third->ec.has_value());
    co_await r->hold.async_release(use_awaitable);
    BOOST_TEST_REQUIRE(co_await settled(second));
    BOOST_TEST(!*second->ec);
    BOOST_TEST(bool(second->hold));
    BOOST_TEST(!third->ec.has_value());
    auto handoffs_of = [&c] {
      for (const auto& l : c.stats().locks)
        if (l.name == "rw-turns") return l.handoffs;
      return std::uint64_t(0);
    };
    const auto handoffs = handoffs_of();
    co_await second->hold.async_release(use_awaitable);  // no reader waits: a local hand-off
    BOOST_TEST_REQUIRE(co_await settled(third));
    BOOST_TEST(!*third->ec);
    BOOST_TEST(bool(third->hold));
    BOOST_TEST(handoffs_of() == handoffs + 1);
    co_await third->hold.async_release(use_awaitable);
    co_await expect_no_keys(c, "rw-turns");
  }(c));
}

// A writer that asked for a fence hands the write lock on through etcd (#34): Go's recipe orders
// its queue by mod revision, so the key is released and made again, not put again. The fence
// built by the writer before fails; the next writer's passes; tokens increase.
BOOST_AUTO_TEST_CASE(a_writers_fence_fails_under_the_next_writer_of_its_session) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, use_awaitable);
    rw_mutex a(s, "rw-fence"), b(s, "rw-fence");
    auto ha = co_await a.async_lock(use_awaitable);
    const auto stale = txn().when(ha.fence()).then(txn_op::put("rw-fence-data", "from a"));
    const auto token_a = ha.fencing_token();
    auto next = acquiring<rw_mutex::hold>();
    b.async_lock(record(next));
    std::function<bool()> queued = [&c] {
      for (const auto& l : c.stats().locks)
        if (l.name == "rw-fence") return l.waiting == 1;
      return false;
    };
    BOOST_TEST_REQUIRE(co_await eventually(std::move(queued), 5s));
    co_await ha.async_release(use_awaitable);
    BOOST_TEST_REQUIRE(co_await settled(next));
    BOOST_TEST_REQUIRE(!*next->ec);
    auto late = co_await c.async_txn(stale, use_awaitable);
    BOOST_TEST(!late.succeeded, "the previous writer's fenced write passed under the next writer");
    BOOST_TEST(next->hold.fencing_token() > token_a);
    auto own = co_await c.async_txn(txn().when(next->hold.fence()).then(txn_op::put("rw-fence-data", "from b")), use_awaitable);
    BOOST_TEST(own.succeeded);
    co_await next->hold.async_release(use_awaitable);
    co_await expect_no_keys(c, "rw-fence");
    co_await c.async_delete("rw-fence-data", {}, use_awaitable);
  }(c));
}

// Readers of a session held back by a writer queued behind their read key join as soon as that
// writer gives up (#34): they do not wait for the read hold in progress to end.
BOOST_AUTO_TEST_CASE(readers_held_back_by_a_writer_join_when_it_gives_up) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, use_awaitable);
    auto ws = co_await session::async_create(c, use_awaitable);
    rw_mutex r1(s, "rw-parked"), r2(s, "rw-parked"), w(ws, "rw-parked");
    auto h1 = co_await r1.async_lock_shared(use_awaitable);
    asio::cancellation_signal sig;
    auto wo = acquiring<rw_mutex::hold>();
    w.async_lock(asio::bind_cancellation_slot(sig.slot(), record(wo)));
    // Until the view shows the writer, a reader would still join: try until it is refused.
    bool held_back = false;
    for (int i = 0; i < 200 && !held_back; ++i) {
      auto [ec, tried] = co_await r2.async_try_lock_shared(asio::as_tuple(use_awaitable));
      if (ec == error::locked) held_back = true;
      else if (!ec) co_await tried.async_release(use_awaitable);
      if (!held_back) co_await sleep_for(5ms);
    }
    BOOST_TEST_REQUIRE(held_back);
    auto r2o = acquiring<rw_mutex::shared_hold>();
    r2.async_lock_shared(record(r2o));
    co_await sleep_for(50ms);
    BOOST_TEST(!r2o->ec.has_value());  // parked behind the writer
    sig.emit(asio::cancellation_type::terminal);
    BOOST_TEST_REQUIRE(co_await settled(wo));
    BOOST_TEST(*wo->ec == asio::error::operation_aborted);
    BOOST_TEST(!wo->hold);
    BOOST_TEST_REQUIRE(co_await settled(r2o, 2s), "the parked reader waited for the read hold to end");
    BOOST_TEST(!*r2o->ec);
    BOOST_TEST(bool(h1));
    BOOST_TEST(bool(r2o->hold));
    co_await h1.async_release(use_awaitable);
    co_await r2o->hold.async_release(use_awaitable);
    co_await expect_no_keys(c, "rw-parked");
  }(c));
}

// FIFO for readers (#34): a reader that asks after a writer queued behind its session's waiting
// read key holds after that writer, not with the readers who asked before it.
BOOST_AUTO_TEST_CASE(a_reader_asking_after_a_queued_writer_holds_after_it) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto hs = co_await session::async_create(c, use_awaitable);
    auto s = co_await session::async_create(c, use_awaitable);
    auto ws = co_await session::async_create(c, use_awaitable);
    rw_mutex first(hs, "rw-late"), r1(s, "rw-late"), r2(s, "rw-late"), w2(ws, "rw-late");
    auto hf = co_await first.async_lock(use_awaitable);
    auto o1 = acquiring<rw_mutex::shared_hold>(), o3 = acquiring<rw_mutex::shared_hold>();
    auto o2 = acquiring<rw_mutex::hold>();
    r1.async_lock_shared(record(o1));
    for (int i = 0; i < 200 && co_await count_keys(c, "rw-late/read/") == 0; ++i) co_await sleep_for(5ms);
    w2.async_lock(record(o2));
    for (int i = 0; i < 200 && co_await count_keys(c, "rw-late/write/") < 2; ++i) co_await sleep_for(5ms);
    BOOST_TEST_REQUIRE(co_await count_keys(c, "rw-late/write/") == 2);
    co_await sleep_for(100ms);  // the view's watch shows w2's key (if not, r2 joins and this fails)
    r2.async_lock_shared(record(o3));
    co_await hf.async_release(use_awaitable);
    BOOST_TEST_REQUIRE(co_await settled(o1));
    BOOST_TEST(!*o1->ec);
    co_await sleep_for(50ms);
    BOOST_TEST(!o3->ec.has_value(), "a reader that asked after the writer went before it");
    BOOST_TEST(!o2->ec.has_value());
    co_await o1->hold.async_release(use_awaitable);
    BOOST_TEST_REQUIRE(co_await settled(o2));
    BOOST_TEST(!*o2->ec);
    co_await sleep_for(50ms);
    BOOST_TEST(!o3->ec.has_value());
    co_await o2->hold.async_release(use_awaitable);
    BOOST_TEST_REQUIRE(co_await settled(o3));
    BOOST_TEST(!*o3->ec);
    BOOST_TEST(bool(o3->hold));
    co_await o3->hold.async_release(use_awaitable);
    co_await expect_no_keys(c, "rw-late");
  }(c));
}
