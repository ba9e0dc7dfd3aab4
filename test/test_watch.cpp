// Watches multiplexed on one stream, against a real etcd.
#define BOOST_TEST_MODULE coetcd_watch
#include "support/fixture.hpp"

#include <boost/asio/experimental/awaitable_operators.hpp>

#include <set>

using namespace coetcd;
using namespace coetcd::test;
using namespace std::chrono_literals;
using namespace boost::asio::experimental::awaitable_operators;

BOOST_TEST_GLOBAL_FIXTURE(shared_etcd);

namespace {
/// Collects events until `n` have arrived.
asio::awaitable<std::vector<watch_event>> collect(watcher& w, std::size_t n) {
  std::vector<watch_event> out;
  while (out.size() < n) {
    auto b = co_await w.async_next(use_awaitable);
    for (auto& e : b.events) out.push_back(std::move(e));
  }
  co_return out;
}
}  // namespace

BOOST_AUTO_TEST_CASE(put_and_delete_events_with_prev_kv_and_filters) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto w = co_await c.async_watch("/w/basic/", watch_options{.prefix = true, .prev_kv = true}, use_awaitable);
    auto only_deletes = co_await c.async_watch("/w/basic/", watch_options{.prefix = true, .no_put = true}, use_awaitable);
    BOOST_TEST(w.id() != only_deletes.id());
    co_await c.async_put("/w/basic/a", "1", use_awaitable);
    co_await c.async_put("/w/basic/a", "2", use_awaitable);
    co_await c.async_put("/w/basic0", "outside", use_awaitable);
    auto del = co_await c.async_delete("/w/basic/a", use_awaitable);
    auto ev = co_await collect(w, 3);
    BOOST_TEST_REQUIRE(ev.size() == 3u);
    BOOST_TEST((ev[0].type == watch_event::kind::put));
    BOOST_TEST(ev[0].kv.value == "1");
    BOOST_TEST(!ev[0].prev_kv);
    BOOST_TEST(ev[1].prev_kv->value == "1");
    BOOST_TEST((ev[2].type == watch_event::kind::del));
    BOOST_TEST(ev[2].kv.key == "/w/basic/a");
    BOOST_TEST(ev[2].kv.mod_revision == del.header.revision);
    BOOST_TEST(ev[2].prev_kv->value == "2");
    auto d = co_await only_deletes.async_next(use_awaitable);
    BOOST_TEST_REQUIRE(d.events.size() == 1u);
    BOOST_TEST((d.events[0].type == watch_event::kind::del));
    co_await c.async_delete("/w/basic0", use_awaitable);
  }(c));
}

BOOST_AUTO_TEST_CASE(start_revision_replays_history) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto p1 = co_await c.async_put("/w/hist", "1", use_awaitable);
    co_await c.async_put("/w/hist", "2", use_awaitable);
    auto w = co_await c.async_watch("/w/hist", watch_options{.start_revision = p1.header.revision}, use_awaitable);
    auto ev = co_await collect(w, 2);
    BOOST_TEST(ev[0].kv.value == "1");
    BOOST_TEST(ev[1].kv.value == "2");
    co_await c.async_delete("/w/hist", use_awaitable);
  }(c));
}

BOOST_AUTO_TEST_CASE(thousand_watchers_share_one_stream_and_each_gets_its_events) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  double before = server().grpc_started("Watch");
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    constexpr int n = 1000;
    std::vector<watcher> ws;
    for (int i = 0; i < n; ++i)
      ws.push_back(co_await c.async_watch("/w/many/" + std::to_string(i), use_awaitable));
    // All puts in flight at once, then every watcher must see exactly its own key.
    auto remaining = std::make_shared<int>(n);
    auto all_done = std::make_shared<asio::steady_timer>(co_await asio::this_coro::executor,
                                                         asio::steady_timer::time_point::max());
    for (int i = 0; i < n; ++i)
      c.async_put("/w/many/" + std::to_string(i), "v" + std::to_string(i), [remaining, all_done](error_code ec, put_result) {
        BOOST_TEST(!ec);
        if (--*remaining == 0) all_done->cancel();
      });
    co_await all_done->async_wait(asio::as_tuple(use_awaitable));
    for (int i = 0; i < n; ++i) {
      auto b = co_await ws[i].async_next(use_awaitable);
      BOOST_TEST_REQUIRE(b.events.size() == 1u);
      BOOST_TEST(b.events[0].kv.key == "/w/many/" + std::to_string(i));
      BOOST_TEST(b.events[0].kv.value == "v" + std::to_string(i));
    }
    co_await c.async_delete("/w/many/", delete_options{.prefix = true}, use_awaitable);
  }(c), 60s);
  BOOST_TEST(server().grpc_started("Watch") - before == 1.0);
}

BOOST_AUTO_TEST_CASE(compacted_start_revision_is_a_distinct_error) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto p1 = co_await c.async_put("/w/compact", "1", use_awaitable);
    auto p2 = co_await c.async_put("/w/compact", "2", use_awaitable);
    co_await c.async_compact(p2.header.revision, use_awaitable);
    auto w = co_await c.async_watch("/w/compact", watch_options{.start_revision = p1.header.revision}, use_awaitable);
    auto [ec, b] = co_await w.async_next(asio::as_tuple(use_awaitable));
    BOOST_TEST(ec == error::compacted, ec.message());
    BOOST_TEST(b.compact_revision == p2.header.revision);
    auto [ec2, b2] = co_await w.async_next(asio::as_tuple(use_awaitable));
    BOOST_TEST(ec2 == error::compacted);  // the watch is over and stays over
    co_await c.async_delete("/w/compact", use_awaitable);
  }(c));
}

BOOST_AUTO_TEST_CASE(cancelling_a_pending_next_keeps_the_watch) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto w = co_await c.async_watch("/w/cancel-next", use_awaitable);
    auto t0 = std::chrono::steady_clock::now();
    auto r = co_await (w.async_next(use_awaitable) || sleep_for(200ms));
    BOOST_TEST(r.index() == 1u);  // the timer won; async_next was cancelled
    BOOST_TEST((std::chrono::steady_clock::now() - t0 < 2s));
    co_await c.async_put("/w/cancel-next", "after", use_awaitable);
    auto b = co_await w.async_next(use_awaitable);
    BOOST_TEST(b.events.at(0).kv.value == "after");
    co_await c.async_delete("/w/cancel-next", use_awaitable);
  }(c));
}

BOOST_AUTO_TEST_CASE(cancel_ends_the_watch_on_client_and_server) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  auto watchers_on_server = [] {
    auto m = server().metrics();
    auto p = m.find("\netcd_debugging_mvcc_watcher_total ");
    return p == std::string::npos ? -1.0 : std::stod(m.substr(p + 35));
  };
  double base = watchers_on_server();
  run_for(ioc, [](client& c, std::function<double()> count, double base) -> asio::awaitable<void> {
    auto w = co_await c.async_watch("/w/cancel", use_awaitable);
    {
      auto gone = co_await c.async_watch("/w/cancel-dropped", use_awaitable);
      BOOST_TEST(count() == base + 2);
    }  // destroyed: cancelled on the server
    auto pending = std::make_shared<error_code>();
    w.async_next([pending](error_code ec, watch_batch) { *pending = ec; });
    w.close();
    co_await sleep_for(300ms);
    BOOST_TEST(*pending == error::watch_canceled, pending->message());
    BOOST_TEST(count() == base);
    auto [ec, b] = co_await w.async_next(asio::as_tuple(use_awaitable));
    BOOST_TEST(ec == error::watch_canceled);
  }(c, watchers_on_server, base));
}

BOOST_AUTO_TEST_CASE(large_revisions_arrive_reassembled_from_fragments) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    std::string big(600 * 1024, 'x');
    co_await c.async_txn(txn().then(txn_op::put("/w/frag/a", big)).then(txn_op::put("/w/frag/b", big)), use_awaitable);
    auto w = co_await c.async_watch("/w/frag/", watch_options{.prefix = true, .prev_kv = true}, use_awaitable);
    std::string big2(600 * 1024, 'y');
    // With prev_kv the response carries ~2.4 MB: more than the server sends in one message.
    auto t = co_await c.async_txn(txn().then(txn_op::put("/w/frag/a", big2)).then(txn_op::put("/w/frag/b", big2)),
                                  use_awaitable);
    auto b = co_await w.async_next(use_awaitable);
    BOOST_TEST_REQUIRE(b.events.size() == 2u);
    for (auto& e : b.events) {
      BOOST_TEST(e.kv.mod_revision == t.header.revision);
      BOOST_TEST(e.kv.value == big2);
      BOOST_TEST(e.prev_kv->value == big);
    }
    co_await c.async_delete("/w/frag/", delete_options{.prefix = true}, use_awaitable);
  }(c));
}

BOOST_AUTO_TEST_CASE(watch_resumes_across_a_server_restart_without_loss_or_duplicates) {
  etcd_process own;
  asio::io_context ioc;
  client c(ioc, options_for(own));
  run_for(ioc, [](client& c, etcd_process& own) -> asio::awaitable<void> {
    auto w = co_await c.async_watch("/w/restart/", watch_options{.prefix = true}, use_awaitable);
    auto w2 = co_await c.async_watch("/w/restart/", watch_options{.prefix = true, .no_delete = true}, use_awaitable);
    constexpr int n = 100;
    // Writes are guarded so a retried write after an uncertain failure is applied at most once.
    auto write = [](client& c, int i) -> asio::awaitable<void> {
      auto key = "/w/restart/" + std::to_string(1000 + i);
      for (;;) {
        auto [ec, r] = co_await c.async_txn(
            txn().when(compare::version(key) == 0).then(txn_op::put(key, std::to_string(i))),
            asio::as_tuple(use_awaitable));
        if (!ec) co_return;
        co_await sleep_for(50ms);
      }
    };
    for (int i = 0; i < n / 2; ++i) co_await write(c, i);
    auto seen = co_await collect(w, 20);  // part consumed before the restart
    own.stop();
    own.start();
    for (int i = n / 2; i < n; ++i) co_await write(c, i);  // some land before the stream is back
    auto rest = co_await collect(w, n - seen.size());
    seen.insert(seen.end(), rest.begin(), rest.end());
    BOOST_TEST_REQUIRE(seen.size() == std::size_t(n));
    for (int i = 0; i < n; ++i) BOOST_TEST(seen[i].kv.key == "/w/restart/" + std::to_string(1000 + i));
    auto other = co_await collect(w2, n);
    BOOST_TEST(other.size() == std::size_t(n));
    std::set<std::int64_t> revs;
    for (auto& e : other) revs.insert(e.kv.mod_revision);
    BOOST_TEST(revs.size() == std::size_t(n));
    // Nothing more queued: no duplicates were delivered.
    co_await c.async_put("/w/restart/zz", "end", use_awaitable);
    auto last = co_await w.async_next(use_awaitable);
    BOOST_TEST(last.events.at(0).kv.key == "/w/restart/zz");
  }(c, own), 60s);
}

// Server-sent progress notifications (watch_options::progress_notify), on 3.4 and 3.5
// (docs/etcd-versions.md): an idle watch gets empty batches whose revision is the store's, so a
// watcher knows it has missed nothing up to there; a watch without the option gets none. The
// server sends them every --experimental-watch-progress-notify-interval (10 min by default).
BOOST_AUTO_TEST_CASE(an_idle_watch_asking_for_progress_gets_empty_batches_at_the_store_revision) {
  etcd_config cfg;
  cfg.extra_flags = {"--experimental-watch-progress-notify-interval=500ms"};
  etcd_process etcd(cfg);
  asio::io_context ioc;
  client c(ioc, options_for(etcd));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto p = co_await c.async_put("/w/progress-other", "v", use_awaitable);
    auto quiet = co_await c.async_watch("/w/progress-quiet", use_awaitable);
    auto w = co_await c.async_watch("/w/progress", watch_options{.progress_notify = true}, use_awaitable);
    for (int i = 0; i < 2; ++i) {
      auto b = co_await (w.async_next(asio::as_tuple(use_awaitable)) || sleep_for(5s));
      BOOST_TEST_REQUIRE(b.index() == 0u, "no progress notification within 5 s");
      auto& [ec, batch] = std::get<0>(b);
      BOOST_TEST_REQUIRE(!ec, ec.message());
      BOOST_TEST(batch.events.empty());
      BOOST_TEST(batch.header.revision >= p.header.revision);
    }
    auto none = co_await (quiet.async_next(asio::as_tuple(use_awaitable)) || sleep_for(1500ms));
    BOOST_TEST(none.index() == 1u, "a watch that did not ask for progress notifications got a batch");
    co_await c.async_delete("/w/progress-other", use_awaitable);
  }(c), 30s);
}
