// The read-write lock against etcd's Go recipe.RWMutex on one name (a helper built from Debian's
// etcd sources, when Go is installed): they share and wait both ways, and exclude each other.
#define BOOST_TEST_MODULE coetcd_rw_mutex_interop
#include "support/child_process.hpp"
#include "support/fixture.hpp"

#include <coetcd/rw_mutex.hpp>

#include <boost/asio/experimental/awaitable_operators.hpp>

#include <algorithm>
#include <memory>
#include <regex>
#include <vector>

using namespace coetcd;
using namespace coetcd::test;
using namespace std::chrono_literals;
using namespace boost::asio::experimental::awaitable_operators;

BOOST_TEST_GLOBAL_FIXTURE(shared_etcd);

#ifdef COETCD_GO_RWLOCK_PATH
namespace {
std::unique_ptr<child_process> go_rwlock(const std::string& role, const std::string& id, int rounds,
                                         const std::string& hold) {
  return std::make_unique<child_process>(std::string(COETCD_GO_RWLOCK_PATH) + " -endpoints " + server().endpoint() +
                                         " -name rw-go -role " + role + " -id " + id + " -rounds " +
                                         std::to_string(rounds) + " -hold " + hold);
}
}  // namespace

// Go's recipe.RWMutex and coetcd, one holding while the other asks: a Go reader holds with a
// coetcd reader and the other way round; a Go writer waits for a coetcd reader, a coetcd writer
// for a Go reader. (Each hold is checked by the helper's txn in etcd, as below.)
BOOST_AUTO_TEST_CASE(go_recipe_rwmutex_and_coetcd_share_and_wait_both_ways) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, use_awaitable);
    rw_mutex m(s, "rw-go");
    const std::string marker = "rw-go-check/reader/c-hold";
    // coetcd reads: a Go reader gets in at once (and sees our marker); a Go writer waits.
    auto ours = co_await m.async_lock_shared(use_awaitable);
    co_await c.async_put(marker, "c-hold", use_awaitable);
    auto reader = go_rwlock("read", "go-a", 2, "1ms");
    auto code = reader->wait(15s);
    BOOST_TEST_REQUIRE(code.has_value(), "a Go reader waited for a coetcd reader: " << reader->output());
    BOOST_TEST(*code == 0, reader->output());
    BOOST_TEST(reader->output().find("holds 2 violations 0 overlaps 2 cross 2") != std::string::npos, reader->output());
    auto writer = go_rwlock("write", "go-w", 1, "1ms");
    co_await sleep_for(700ms);
    BOOST_TEST(writer->running(), "a Go writer did not wait for a coetcd reader: " << writer->output());
    co_await c.async_delete(marker, use_awaitable);
    co_await ours.async_release(use_awaitable);
    code = writer->wait(15s);
    BOOST_TEST_REQUIRE(code.has_value(), writer->output());
    BOOST_TEST(*code == 0, writer->output());
    BOOST_TEST(writer->output().find("holds 1 violations 0") != std::string::npos, writer->output());

    // Go reads: a coetcd reader gets in while it holds; a coetcd writer waits until it is done.
    auto holder = go_rwlock("read", "go-b", 1, "2s");
    for (int i = 0; i < 500 && co_await count_keys(c, "rw-go-check/reader/go-b") == 0; ++i) co_await sleep_for(10ms);
    BOOST_TEST_REQUIRE(co_await count_keys(c, "rw-go-check/reader/go-b") == 1, holder->output());
    auto joined = co_await (m.async_lock_shared(asio::as_tuple(use_awaitable)) || sleep_for(1s));
    BOOST_TEST_REQUIRE(joined.index() == 0u, "a coetcd reader waited for a Go reader");
    auto& [joined_ec, joined_hold] = std::get<0>(joined);
    BOOST_TEST(!joined_ec, joined_ec.message());
    BOOST_TEST(bool(joined_hold));
    BOOST_TEST(co_await count_keys(c, "rw-go-check/reader/go-b") == 1);  // Go's reader still inside
    if (!joined_ec) co_await joined_hold.async_release(use_awaitable);
    auto blocked = co_await (m.async_lock(asio::as_tuple(use_awaitable)) || sleep_for(300ms));
    BOOST_TEST(blocked.index() == 1u, "a coetcd writer did not wait for a Go reader");
    auto writing = co_await m.async_lock(use_awaitable);  // once the Go reader is done
    BOOST_TEST(co_await count_keys(c, "rw-go-check/reader/go-b") == 0);
    co_await writing.async_release(use_awaitable);
    BOOST_TEST(holder->wait(15s).value_or(-1) == 0, holder->output());
    co_await expect_no_keys(c, "rw-go");
    co_await expect_no_keys(c, "rw-go-check");
  }(c));
}

// Go's recipe.RWMutex (two reader processes, one writer process) and coetcd readers and writers
// on one name, all at once: every hold is checked in etcd by an atomic txn (a writer enters only
// when no marker exists, a reader only when no writer's does), so an overlap would be seen by
// whoever entered second. None is. (Whether readers of the two kinds meet here depends on how
// the groups between writers fall: readers that leave together queue again together, so they
// may keep alternating; the case above shows that they do share.)
BOOST_AUTO_TEST_CASE(go_recipe_rwmutex_and_coetcd_exclude_each_other) {
  auto go = [](const std::string& role, const std::string& id) { return go_rwlock(role, id, 25, "10ms"); };
  auto go_r1 = go("read", "go-r1"), go_r2 = go("read", "go-r2"), go_w = go("write", "go-w");
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  struct tally {
    int violations = 0, overlaps_with_go = 0, holds = 0, finished = 0;
    bool go_done = false;  // coetcd keeps taking the lock until the Go processes are done
  };
  auto t = std::make_shared<tally>();
  auto worker = [](client& c, std::shared_ptr<tally> t, bool write, std::string id) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, use_awaitable);
    rw_mutex m(s, "rw-go");
    const std::string writer = "rw-go-check/writer", readers = "rw-go-check/reader/", mine = readers + id;
    for (int i = 0; i < 25 || !t->go_done; ++i) {
      rw_mutex::hold excl;
      rw_mutex::shared_hold shared;
      if (write) excl = co_await m.async_lock(use_awaitable);
      else shared = co_await m.async_lock_shared(use_awaitable);
      if (write) {
        auto r = co_await c.async_txn(txn()
                                          .when(compare::version(writer) == 0)
                                          .when(compare::version(readers).prefix() == 0)
                                          .then(txn_op::put(writer, id)),
                                      use_awaitable);
        if (!r.succeeded) ++t->violations;
        co_await sleep_for(10ms);
        if (r.succeeded) co_await c.async_delete(writer, use_awaitable);
        co_await excl.async_release(use_awaitable);
      } else {
        auto r = co_await c.async_txn(txn()
                                          .when(compare::version(writer) == 0)
                                          .then(txn_op::put(mine, id))
                                          .then(txn_op::get(readers, get_options{.prefix = true})),
                                      use_awaitable);
        if (!r.succeeded) ++t->violations;
        else
          for (const auto& kv : r.responses.at(1).get().kvs)
            if (kv.value.starts_with("go-")) ++t->overlaps_with_go;
        co_await sleep_for(10ms);
        if (r.succeeded) co_await c.async_delete(mine, use_awaitable);
        co_await shared.async_release(use_awaitable);
      }
      ++t->holds;
    }
    co_await s.async_close(use_awaitable);
    ++t->finished;
  };
  std::vector<child_process*> gos{go_r1.get(), go_r2.get(), go_w.get()};
  run_for(ioc, [](client& c, std::shared_ptr<tally> t, auto worker, std::vector<child_process*> gos) -> asio::awaitable<void> {
    auto ex = co_await asio::this_coro::executor;
    const char* ids[] = {"c-r1", "c-r2", "c-r3", "c-w1", "c-w2"};
    for (int i = 0; i < 5; ++i) asio::co_spawn(ex, worker(c, t, i >= 3, ids[i]), asio::detached);
    while (!t->go_done) {
      co_await sleep_for(20ms);
      t->go_done = std::none_of(gos.begin(), gos.end(), [](child_process* p) { return p->running(); });
    }
    while (t->finished < 5) co_await sleep_for(20ms);
  }(c, t, worker, gos), 120s);
  int go_violations = 0, go_overlaps = 0, go_cross = 0;
  for (auto* p : {go_r1.get(), go_r2.get(), go_w.get()}) {
    auto code = p->wait(60s);
    BOOST_TEST_REQUIRE(code.has_value(), "the Go helper did not finish");
    BOOST_TEST(*code == 0, p->output());
    std::smatch m;
    const auto out = p->output();
    BOOST_TEST_REQUIRE(std::regex_search(out, m, std::regex(R"(holds (\d+) violations (\d+) overlaps (\d+) cross (\d+))")), out);
    BOOST_TEST(std::stoi(m[1]) == 25);
    go_violations += std::stoi(m[2]);
    go_overlaps += std::stoi(m[3]);
    go_cross += std::stoi(m[4]);
  }
  BOOST_TEST(t->holds >= 5 * 25);
  BOOST_TEST(t->violations == 0);
  BOOST_TEST(go_violations == 0);
  // Whether readers met here depends on how their arrivals fall between the writers (under
  // ctest -j3 beside the soak, once none did): sharing is proven exactly by
  // go_recipe_rwmutex_and_coetcd_share_and_wait_both_ways; this run proves exclusion.
  BOOST_TEST_MESSAGE("readers held together: Go with Go " << go_overlaps << ", Go with coetcd " << go_cross
                                                        << " (Go's view) / " << t->overlaps_with_go << " (ours)");
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    co_await expect_no_keys(c, "rw-go");
    co_await expect_no_keys(c, "rw-go-check");
  }(c));
}
#else
BOOST_AUTO_TEST_CASE(go_recipe_rwmutex_and_coetcd_exclude_each_other) {
  BOOST_TEST_MESSAGE("skipped: Go (golang-go) is not installed, so the recipe.RWMutex helper was not built");
}
#endif
