// coetcd::cache against a real etcd: list then follow, previous values, several readers,
// read-your-write (on an idle prefix too), a compaction it cannot bridge (a reset with the
// difference), the member restarted under it, a slow reader, bad input and cancellation.
#define BOOST_TEST_MODULE coetcd_cache
#include "support/fixture.hpp"
#include "support/tcp_proxy.hpp"

#include <coetcd/cache.hpp>

#include <map>
#include <type_traits>

using namespace coetcd;
using namespace coetcd::test;
using namespace std::chrono_literals;

BOOST_TEST_GLOBAL_FIXTURE(shared_etcd);

// The executor a cache lives on is named by whoever makes it, as an Asio object's: a default of
// the client's plain executor would be unsafe on an io_context that several threads run.
static_assert(!std::is_constructible_v<cache, client&, std::string>);
static_assert(std::is_constructible_v<cache, asio::any_io_executor, client&, std::string>);

namespace {

// The prefix as the server has it: key -> value.
asio::awaitable<std::map<std::string, std::string>> server_view(client& c, std::string prefix) {
  auto r = co_await c.async_get(prefix, get_options{.prefix = true}, use_awaitable);
  std::map<std::string, std::string> out;
  for (auto& kv : r.kvs) out[kv.key] = kv.value;
  co_return out;
}

std::map<std::string, std::string> cache_view(const cache& k) {
  std::map<std::string, std::string> out;
  for (auto& kv : k.range()) out[kv.key] = kv.value;
  return out;
}

// Takes `n` changes from one reader (a cache's own or a cache_reader) into `out`, by revision;
// stops at a reset, an error or when the reader is gone.
template <class Reader>
asio::awaitable<void> read_changes(Reader& r, std::size_t n, std::shared_ptr<std::vector<std::int64_t>> out) {
  while (out->size() < n) {
    auto [ec, u] = co_await r.async_next(asio::as_tuple(use_awaitable));
    if (ec || u.reset) co_return;
    for (auto& e : u.events) out->push_back(e.kv.mod_revision);
  }
}

}  // namespace

// 100 keys listed, one outside the prefix left out; then 50 changes reach the reader once each,
// in revision order, and the cache ends equal to the server.
BOOST_AUTO_TEST_CASE(lists_then_follows_every_change_once_in_order) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    const std::string p = "/cache/follow/";
    co_await c.async_delete(p, delete_options{.prefix = true}, use_awaitable);
    for (int i = 0; i < 100; ++i) co_await c.async_put(p + std::to_string(i), "v" + std::to_string(i), use_awaitable);
    co_await c.async_put("/cache/follow-not", "x", use_awaitable);
    cache k(c.get_executor(), c, p);
    co_await k.async_wait_synced(use_awaitable);
    BOOST_TEST(k.size() == 100u);
    BOOST_TEST((k.get(p + "7") && k.get(p + "7")->value == "v7"));
    BOOST_TEST(!k.get("/cache/follow-not"));
    BOOST_TEST(k.range(p + "1", p + "2").size() == 11u);  // "1", "10".."19"

    std::int64_t last = 0;
    for (int i = 0; i < 50; ++i) {
      if (i % 5 == 4) last = (co_await c.async_delete(p + std::to_string(i), use_awaitable)).header.revision;
      else last = (co_await c.async_put(p + "new" + std::to_string(i), "n", use_awaitable)).header.revision;
    }
    std::vector<watch_event> seen;
    while (seen.empty() || seen.back().kv.mod_revision < last) {
      auto u = co_await k.async_next(use_awaitable);
      BOOST_TEST_REQUIRE(!u.reset);
      for (auto& e : u.events) seen.push_back(e);
    }
    BOOST_TEST(seen.size() == 50u);
    for (std::size_t i = 1; i < seen.size(); ++i) BOOST_TEST(seen[i - 1].kv.mod_revision < seen[i].kv.mod_revision);
    BOOST_TEST(k.revision() >= last);
    BOOST_TEST((cache_view(k) == co_await server_view(c, p)));
    co_await c.async_delete(p, delete_options{.prefix = true}, use_awaitable);
  }(c));
}

// Three coroutines read the changes at once, each with its own cursor (the cache's own reader
// and two cache_readers), and each gets every change once, in order; a reader made later gets
// what came after it; destroying a reader ends its pending async_next.
BOOST_AUTO_TEST_CASE(several_readers_each_get_every_change) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    const std::string p = "/cache/readers/";
    co_await c.async_delete(p, delete_options{.prefix = true}, use_awaitable);
    cache k(c.get_executor(), c, p);
    co_await k.async_wait_synced(use_awaitable);
    auto ex = co_await asio::this_coro::executor;
    cache_reader a(k), b(k);
    auto own = std::make_shared<std::vector<std::int64_t>>();
    auto by_a = std::make_shared<std::vector<std::int64_t>>();
    auto by_b = std::make_shared<std::vector<std::int64_t>>();
    asio::co_spawn(ex, read_changes(k, 20, own), asio::detached);
    asio::co_spawn(ex, read_changes(a, 20, by_a), asio::detached);
    asio::co_spawn(ex, read_changes(b, 20, by_b), asio::detached);
    std::vector<std::int64_t> written;
    for (int i = 0; i < 10; ++i)
      written.push_back((co_await c.async_put(p + std::to_string(i % 3), std::to_string(i), use_awaitable)).header.revision);
    co_await k.async_wait_for(written.back(), use_awaitable);
    cache_reader late(k);
    auto by_late = std::make_shared<std::vector<std::int64_t>>();
    asio::co_spawn(ex, read_changes(late, 10, by_late), asio::detached);
    for (int i = 10; i < 20; ++i) {  // two of them deletes (of keys that are there)
      if (i % 4 == 0) written.push_back((co_await c.async_delete(p + std::to_string(i % 3), use_awaitable)).header.revision);
      else written.push_back((co_await c.async_put(p + std::to_string(i % 3), "x", use_awaitable)).header.revision);
    }
    BOOST_TEST(co_await eventually([&] { return own->size() >= 20 && by_a->size() >= 20 && by_b->size() >= 20 && by_late->size() >= 10; }, 5s));
    BOOST_TEST(*own == written);
    BOOST_TEST(*by_a == written, "a second reader did not get every change");
    BOOST_TEST(*by_b == written, "a third reader did not get every change");
    BOOST_TEST((*by_late == std::vector<std::int64_t>(written.begin() + 10, written.end())));

    auto ended = std::make_shared<std::optional<error_code>>();
    auto gone = std::make_unique<cache_reader>(k);
    gone->async_next([ended](error_code e, cache_update) { *ended = e; });
    co_await sleep_for(20ms);
    gone.reset();
    BOOST_TEST(co_await eventually([&] { return ended->has_value(); }, 2s));
    BOOST_TEST(**ended == asio::error::operation_aborted, (*ended)->message());
    cache_reader empty;
    auto [ec, u] = co_await empty.async_next(asio::as_tuple(use_awaitable));
    BOOST_TEST(ec == asio::error::bad_descriptor, ec.message());
    co_await c.async_delete(p, delete_options{.prefix = true}, use_awaitable);
  }(c));
}

// Changes that share a revision (a txn of several puts, a prefix delete) all reach the cache.
BOOST_AUTO_TEST_CASE(changes_at_one_revision_all_apply) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    const std::string p = "/cache/onerev/";
    co_await c.async_delete(p, delete_options{.prefix = true}, use_awaitable);
    cache k(c.get_executor(), c, p);
    co_await k.async_wait_synced(use_awaitable);
    txn t;
    for (int i = 0; i < 5; ++i) t.then(txn_op::put(p + std::to_string(i), "v"));
    auto r = co_await c.async_txn(t, use_awaitable);
    co_await k.async_wait_for(r.header.revision, use_awaitable);
    BOOST_TEST(k.size() == 5u, "a txn's puts at one revision were dropped");
    auto d = co_await c.async_delete(p, delete_options{.prefix = true}, use_awaitable);
    co_await k.async_wait_for(d.header.revision, use_awaitable);
    BOOST_TEST(k.size() == 0u, "a prefix delete's events at one revision were dropped");
    std::size_t events = 0;
    while (events < 10) {
      auto u = co_await k.async_next(use_awaitable);
      BOOST_TEST_REQUIRE(!u.reset);
      events += u.events.size();
    }
    BOOST_TEST(events == 10u);
  }(c));
}

// Each update and delete reaches the reader with the value the cache held before it, though
// the cache's watch does not ask etcd for prev_kv; a key created has none.
BOOST_AUTO_TEST_CASE(updates_and_deletes_carry_the_value_held_before) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    const std::string p = "/cache/prev/";
    co_await c.async_delete(p, delete_options{.prefix = true}, use_awaitable);
    auto first = co_await c.async_put(p + "a", "1", use_awaitable);
    cache k(c.get_executor(), c, p);
    co_await k.async_wait_synced(use_awaitable);
    auto second = co_await c.async_put(p + "a", "2", use_awaitable);
    co_await c.async_delete(p + "a", use_awaitable);
    auto last = co_await c.async_put(p + "b", "x", use_awaitable);
    std::vector<watch_event> seen;
    while (seen.size() < 3) {
      auto u = co_await k.async_next(use_awaitable);
      BOOST_TEST_REQUIRE(!u.reset);
      for (auto& e : u.events) seen.push_back(e);
    }
    BOOST_TEST_REQUIRE(seen.size() == 3u);
    BOOST_TEST_REQUIRE(seen[0].prev_kv.has_value(), "an update came without the value it replaced");
    BOOST_TEST(seen[0].prev_kv->value == "1");
    BOOST_TEST(seen[0].prev_kv->mod_revision == first.header.revision);
    BOOST_TEST(seen[0].kv.value == "2");
    BOOST_TEST((seen[1].type == watch_event::kind::del));
    BOOST_TEST_REQUIRE(seen[1].prev_kv.has_value(), "a delete came without the value it removed");
    BOOST_TEST(seen[1].prev_kv->value == "2");
    BOOST_TEST(seen[1].prev_kv->mod_revision == second.header.revision);
    BOOST_TEST(!seen[2].prev_kv, "a created key came with a previous value");
    BOOST_TEST(seen[2].kv.mod_revision == last.header.revision);
    co_await c.async_delete(p, delete_options{.prefix = true}, use_awaitable);
  }(c));
}

// After a write at revision R, async_wait_for(R) then get() reads it.
BOOST_AUTO_TEST_CASE(wait_for_reads_your_own_write) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    const std::string p = "/cache/ryw/";
    cache k(c.get_executor(), c, p);
    co_await k.async_wait_synced(use_awaitable);
    for (int i = 0; i < 20; ++i) {
      auto r = co_await c.async_put(p + "k", std::to_string(i), use_awaitable);
      co_await k.async_wait_for(r.header.revision, use_awaitable);
      BOOST_TEST((k.get(p + "k") && k.get(p + "k")->value == std::to_string(i)));
    }
  }(c));
}

// async_wait_for(R) where R is a write outside an idle prefix ends within a second, not with
// the prefix's next change or the server's progress notification (10 minutes apart by
// default); a change of the prefix just before R is in the cache when it does.
BOOST_AUTO_TEST_CASE(waiting_for_a_revision_on_an_idle_prefix_ends_within_a_second) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    const std::string p = "/cache/idle/";
    co_await c.async_delete(p, delete_options{.prefix = true}, use_awaitable);
    co_await c.async_put(p + "k", "0", use_awaitable);
    cache k(c.get_executor(), c, p);
    co_await k.async_wait_synced(use_awaitable);
    std::string expected = "0";
    for (int i = 1; i <= 10; ++i) {
      if (i % 2 == 0) {
        expected = std::to_string(i);
        co_await c.async_put(p + "k", expected, use_awaitable);
      }
      auto outside = co_await c.async_put("/cache/idle-outside", std::to_string(i), use_awaitable);
      auto reached = std::make_shared<std::optional<error_code>>();
      k.async_wait_for(outside.header.revision, [reached](error_code ec) { *reached = ec; });
      BOOST_TEST_REQUIRE(co_await eventually([&] { return reached->has_value(); }, 1s),
                         "async_wait_for on an idle prefix still waits after a second");
      BOOST_TEST(!**reached, (*reached)->message());
      BOOST_TEST(k.revision() >= outside.header.revision);
      BOOST_TEST((k.get(p + "k") && k.get(p + "k")->value == expected), "the cache reached R without a change below it");
    }
    co_await c.async_delete(p, delete_options{.prefix = true}, use_awaitable);
  }(c));
}

// The client is cut off while the prefix changes and the store is compacted past the cache's
// revision: when it is back, the cache lists again and its reader gets a reset that names what
// differs, in key order (keys deleted with the value they had, a key changed with its old value,
// keys added), and the cache holds what the server holds.
BOOST_AUTO_TEST_CASE(a_compaction_it_cannot_bridge_relists_and_gives_the_reader_the_difference) {
  tcp_proxy proxy(server().endpoint());
  asio::io_context ioc;
  auto o = options_for(server());
  o.endpoints = {proxy.endpoint()};
  client far(ioc, o);
  client direct(ioc, options_for(server()));
  run_for(ioc, [](client& far, client& direct, tcp_proxy& proxy) -> asio::awaitable<void> {
    const std::string p = "/cache/compacted/";
    co_await direct.async_delete(p, delete_options{.prefix = true}, use_awaitable);
    for (int i = 0; i < 10; ++i) co_await direct.async_put(p + std::to_string(i), "old", use_awaitable);
    cache k(far.get_executor(), far, p);
    co_await k.async_wait_synced(use_awaitable);
    BOOST_TEST(k.size() == 10u);
    proxy.cut();
    for (int i = 0; i < 5; ++i) co_await direct.async_delete(p + std::to_string(i), use_awaitable);
    co_await direct.async_put(p + "5", "changed", use_awaitable);
    co_await direct.async_put(p + "gone", "briefly", use_awaitable);  // came and went: not named
    co_await direct.async_delete(p + "gone", use_awaitable);
    std::int64_t now = 0;
    for (int i = 0; i < 5; ++i) now = (co_await direct.async_put(p + "n" + std::to_string(i), "new", use_awaitable)).header.revision;
    co_await direct.async_compact(now, use_awaitable);
    proxy.restore();
    auto u = co_await k.async_next(use_awaitable);
    BOOST_TEST(u.reset, "the reader was not told that the changes in between were not kept");
    BOOST_TEST(u.revision >= now);
    std::vector<std::string> expected;
    for (int i = 0; i < 6; ++i) expected.push_back(p + std::to_string(i));
    for (int i = 0; i < 5; ++i) expected.push_back(p + "n" + std::to_string(i));
    std::vector<std::string> named;
    for (auto& e : u.events) named.push_back(e.kv.key);
    BOOST_TEST(named == expected, "the reset did not name exactly the keys that differ, in key order");
    if (u.events.size() == expected.size()) {
      for (int i = 0; i < 5; ++i) {
        auto& e = u.events[i];
        BOOST_TEST((e.type == watch_event::kind::del && e.prev_kv && e.prev_kv->value == "old"), e.kv.key);
      }
      auto& changed = u.events[5];
      BOOST_TEST((changed.type == watch_event::kind::put && changed.kv.value == "changed"));
      BOOST_TEST((changed.prev_kv && changed.prev_kv->value == "old"));
      for (int i = 6; i < 11; ++i) {
        auto& e = u.events[i];
        BOOST_TEST((e.type == watch_event::kind::put && e.kv.value == "new" && !e.prev_kv), e.kv.key);
      }
    }
    co_await k.async_wait_for(now, use_awaitable);
    BOOST_TEST(k.relists() >= 1u);
    BOOST_TEST((cache_view(k) == co_await server_view(direct, p)));
    co_await direct.async_delete(p, delete_options{.prefix = true}, use_awaitable);
  }(far, direct, proxy));
}

// The member restarts under the cache (its only member): the watch resumes, nothing is missed.
BOOST_AUTO_TEST_CASE(the_member_restarted_under_the_cache) {
  etcd_process etcd;
  asio::io_context ioc;
  client c(ioc, options_for(etcd));
  run_for(ioc, [](client& c, etcd_process& etcd) -> asio::awaitable<void> {
    const std::string p = "/cache/restart/";
    for (int i = 0; i < 10; ++i) co_await c.async_put(p + std::to_string(i), "a", use_awaitable);
    cache k(c.get_executor(), c, p);
    co_await k.async_wait_synced(use_awaitable);
    etcd.stop();
    etcd.start();
    std::int64_t last = 0;
    for (int i = 0; i < 10; ++i) last = (co_await c.async_put(p + std::to_string(i), "b", use_awaitable)).header.revision;
    co_await k.async_wait_for(last, use_awaitable);
    BOOST_TEST((cache_view(k) == co_await server_view(c, p)));
    for (auto& kv : k.range()) BOOST_TEST(kv.value == "b");
    BOOST_TEST(k.relists() == 0u, "the watch did not resume across the restart: the cache listed again");
  }(c, etcd));
}

// A reader that does not keep up gets a reset with the difference instead of an unbounded
// queue (one put per key, the last value, in key order), then changes again.
BOOST_AUTO_TEST_CASE(a_slow_reader_gets_a_reset_not_an_unbounded_queue) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    const std::string p = "/cache/slow/";
    co_await c.async_delete(p, delete_options{.prefix = true}, use_awaitable);
    cache k(c.get_executor(), c, p, {.max_pending_events = 10});
    co_await k.async_wait_synced(use_awaitable);
    std::int64_t last = 0;
    for (int i = 0; i < 50; ++i) last = (co_await c.async_put(p + std::to_string(i), "v", use_awaitable)).header.revision;
    for (int i = 0; i < 50; i += 10) last = (co_await c.async_put(p + std::to_string(i), "w", use_awaitable)).header.revision;
    co_await k.async_wait_for(last, use_awaitable);
    auto u = co_await k.async_next(use_awaitable);
    BOOST_TEST(u.reset);
    BOOST_TEST(k.size() == 50u);
    std::map<std::string, std::string> delta;
    for (auto& e : u.events) {
      BOOST_TEST((e.type == watch_event::kind::put && !e.prev_kv), e.kv.key);
      delta[e.kv.key] = e.kv.value;
    }
    BOOST_TEST(u.events.size() == 50u, "a key changed twice was named twice, or one was left out");
    BOOST_TEST((delta == cache_view(k)), "the difference does not bring an empty copy to the cache's contents");
    co_await c.async_put(p + "after", "v", use_awaitable);
    u = co_await k.async_next(use_awaitable);
    BOOST_TEST(!u.reset);
    BOOST_TEST_REQUIRE(u.events.size() == 1u);
    BOOST_TEST(u.events[0].kv.key == p + "after");
    co_await c.async_delete(p, delete_options{.prefix = true}, use_awaitable);
  }(c));
}

// An empty prefix follows every key (of the client's namespace: here it has none); a cancelled
// async_next loses no change; a second async_next is refused; destroying the cache completes
// what waits on it with operation_aborted.
BOOST_AUTO_TEST_CASE(bad_input_cancellation_and_destruction) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    {
      auto put = co_await c.async_put("/cache/everything", "v", use_awaitable);
      cache everything(c.get_executor(), c, "");
      auto [ec] = co_await everything.async_wait_for(put.header.revision, asio::as_tuple(use_awaitable));
      BOOST_TEST(!ec, ec.message());
      BOOST_TEST(everything.get("/cache/everything").has_value());
      co_await c.async_delete("/cache/everything", use_awaitable);
    }

    const std::string p = "/cache/cancel/";
    auto k = std::make_unique<cache>(c.get_executor(), c, p);
    co_await k->async_wait_synced(use_awaitable);
    asio::cancellation_signal stop;
    auto first = std::make_shared<std::optional<error_code>>();
    auto second = std::make_shared<std::optional<error_code>>();
    k->async_next(asio::bind_cancellation_slot(stop.slot(), [first](error_code e, cache_update) { *first = e; }));
    k->async_next([second](error_code e, cache_update) { *second = e; });
    BOOST_TEST(co_await eventually([&] { return second->has_value(); }, 2s));
    BOOST_TEST(**second == asio::error::already_started, (*second)->message());
    // A change arrives and is handed to the waiting reader; the cancel comes in the same turn,
    // before the handler runs (as when the other branch of an `||` wins): nothing is lost.
    auto r = co_await c.async_put(p + "k", "v", use_awaitable);
    co_await k->async_wait_for(r.header.revision, use_awaitable);
    stop.emit(asio::cancellation_type::terminal);
    BOOST_TEST(co_await eventually([&] { return first->has_value(); }, 2s));
    if (**first == asio::error::operation_aborted) {
      auto u = co_await k->async_next(use_awaitable);  // the change is still there
      BOOST_TEST_REQUIRE(u.events.size() == 1u);
      BOOST_TEST(u.events[0].kv.mod_revision == r.header.revision);
    } else {
      BOOST_TEST(!**first, (*first)->message());  // delivered before the cancel
    }

    auto waiting = std::make_shared<std::optional<error_code>>();
    k->async_wait_for(r.header.revision + 1000, [waiting](error_code e) { *waiting = e; });
    co_await sleep_for(50ms);
    k.reset();
    BOOST_TEST(co_await eventually([&] { return waiting->has_value(); }, 2s));
    BOOST_TEST(**waiting == asio::error::operation_aborted, (*waiting)->message());
    co_await c.async_delete(p, delete_options{.prefix = true}, use_awaitable);
  }(c));
}
