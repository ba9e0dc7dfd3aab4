// A key namespace (client_options::key_prefix, Go's clientv3/namespace): keys, ranges, watches,
// txn compares and operations, lease key lists and lock keys of a client live under its prefix
// and come back without it; other namespaces and the keys outside stay out of reach; a
// namespaced coetcd::mutex and Go's concurrency.Mutex on a namespaced client exclude each other.
#define BOOST_TEST_MODULE coetcd_namespace
#include "support/child_process.hpp"
#include "support/fixture.hpp"

using namespace coetcd;
using namespace coetcd::test;
using namespace std::chrono_literals;

namespace {

client_options in(const std::string& prefix) {
  auto o = options_for(server());
  o.key_prefix = prefix;
  return o;
}

std::vector<std::string> keys_of(const get_result& r) {
  std::vector<std::string> out;
  for (const auto& kv : r.kvs) out.push_back(kv.key);
  return out;
}

}  // namespace

BOOST_TEST_GLOBAL_FIXTURE(shared_etcd);

BOOST_AUTO_TEST_CASE(keys_ranges_and_txns_stay_inside_the_prefix) {
  asio::io_context ioc;
  client a(ioc, in("ns-a/")), b(ioc, in("ns-b/")), raw(ioc, options_for(server()));
  run_for(ioc, [&]() -> asio::awaitable<void> {
    co_await raw.async_put("outside", "x", use_awaitable);
    co_await raw.async_put("ns-a", "x", use_awaitable);  // sorts before every key under "ns-a/"
    co_await a.async_put("k1", "1", use_awaitable);
    co_await a.async_put("k2", "2", use_awaitable);
    co_await b.async_put("k1", "b", use_awaitable);

    BOOST_TEST((co_await raw.async_get("ns-a/k1", use_awaitable)).kvs.at(0).value == "1");
    auto one = co_await a.async_get("k1", use_awaitable);
    BOOST_TEST(one.kvs.at(0).key == "k1");
    BOOST_TEST((co_await b.async_get("k1", use_awaitable)).kvs.at(0).value == "b");
    // A prefix, and "every key from here on", end at the namespace's end.
    auto ks = co_await a.async_get("k", get_options{.prefix = true}, use_awaitable);
    BOOST_TEST((keys_of(ks) == std::vector<std::string>{"k1", "k2"}));
    auto all = co_await a.async_get("\x01", get_options{.from_key = true}, use_awaitable);
    BOOST_TEST((keys_of(all) == std::vector<std::string>{"k1", "k2"}));
    auto range = co_await a.async_get("k1", get_options{.range_end = "k3"}, use_awaitable);
    BOOST_TEST(range.kvs.size() == 2u);

    // A txn's compares, operations and nested txns all name keys inside the namespace.
    txn inner;
    inner.then(txn_op::get("k2"));
    txn t;
    t.when(compare::value("k1") == "1").then(txn_op::put("k3", "3", put_options{.prev_kv = true}))
        .then(txn_op::get("k", get_options{.prefix = true}))
        .then(txn_op::del("k2", delete_options{.prev_kv = true}))
        .then(txn_op::nested(inner));
    auto r = co_await a.async_txn(t, use_awaitable);
    BOOST_TEST(r.succeeded);
    BOOST_TEST((keys_of(std::get<get_result>(r.responses.at(1).value)) == std::vector<std::string>{"k1", "k2", "k3"}));
    BOOST_TEST(std::get<delete_result>(r.responses.at(2).value).prev_kvs.at(0).key == "k2");
    auto nested = std::get<txn_result>(r.responses.at(3).value);
    BOOST_TEST(std::get<get_result>(nested.responses.at(0).value).kvs.size() == 0u);  // k2 deleted before it
    BOOST_TEST((co_await raw.async_get("ns-a/k3", use_awaitable)).kvs.size() == 1u);
    auto put = co_await a.async_put("k3", "again", put_options{.prev_kv = true}, use_awaitable);
    BOOST_TEST(put.prev_kv->key == "k3");

    // A delete of everything in the namespace leaves the rest.
    auto gone = co_await a.async_delete("\x01", delete_options{.prev_kv = true, .from_key = true}, use_awaitable);
    BOOST_TEST(gone.deleted == 2);
    for (const auto& kv : gone.prev_kvs) BOOST_TEST(kv.key.rfind("ns-a/", 0) != 0u);
    BOOST_TEST((co_await raw.async_get("outside", use_awaitable)).kvs.size() == 1u);
    BOOST_TEST((co_await raw.async_get("ns-a", use_awaitable)).kvs.size() == 1u);
    BOOST_TEST((co_await b.async_get("k1", use_awaitable)).kvs.size() == 1u);

    // The keys of a lease come back without the prefix.
    auto lease = co_await a.async_lease_grant(30, use_awaitable);
    co_await a.async_put("leased", "v", put_options{.lease = lease.id}, use_awaitable);
    auto ttl = co_await a.async_lease_time_to_live(lease.id, true, use_awaitable);
    BOOST_TEST((ttl.keys == std::vector<std::string>{"leased"}));
    co_await a.async_lease_revoke(lease.id, use_awaitable);
  }(), 30s);
}

BOOST_AUTO_TEST_CASE(a_watch_sees_its_namespace_only) {
  asio::io_context ioc;
  client a(ioc, in("ns-w/")), raw(ioc, options_for(server()));
  run_for(ioc, [&]() -> asio::awaitable<void> {
    auto w = co_await a.async_watch("job", watch_options{.prefix = true, .prev_kv = true}, use_awaitable);
    auto everything = co_await a.async_watch("\x01", watch_options{.from_key = true}, use_awaitable);
    co_await raw.async_put("job/outside", "x", use_awaitable);
    co_await raw.async_put("ns-w/job/1", "one", use_awaitable);
    co_await a.async_put("job/1", "two", use_awaitable);
    co_await raw.async_put("zzz", "x", use_awaitable);
    co_await a.async_delete("job/1", use_awaitable);
    std::vector<std::string> seen;
    while (seen.size() < 3) {
      auto b = co_await w.async_next(use_awaitable);
      for (const auto& e : b.events) {
        seen.push_back((e.type == watch_event::kind::put ? "put " : "del ") + e.kv.key);
        if (e.prev_kv) BOOST_TEST(e.prev_kv->key == "job/1");
      }
    }
    BOOST_TEST((seen == std::vector<std::string>{"put job/1", "put job/1", "del job/1"}));
    std::size_t all = 0;
    while (all < 3) {
      auto b = co_await everything.async_next(use_awaitable);
      for (const auto& e : b.events) {
        BOOST_TEST(e.kv.key == "job/1");
        ++all;
      }
    }
  }(), 30s);
}

BOOST_AUTO_TEST_CASE(locks_and_elections_live_under_the_prefix) {
  asio::io_context ioc;
  client a(ioc, in("ns-l/")), b(ioc, in("ns-other/")), raw(ioc, options_for(server()));
  run_for(ioc, [&]() -> asio::awaitable<void> {
    auto sa = co_await session::async_create(a, use_awaitable);
    auto sb = co_await session::async_create(b, use_awaitable);
    coetcd::mutex ma(sa, "job"), mb(sb, "job");
    co_await ma.async_lock(use_awaitable);
    BOOST_TEST(ma.key().rfind("job/", 0) == 0u, ma.key());
    BOOST_TEST((co_await raw.async_get("ns-l/" + ma.key(), use_awaitable)).kvs.size() == 1u);
    // Another namespace's lock of the same name is another lock.
    auto [ec] = co_await mb.async_try_lock(asio::as_tuple(use_awaitable));
    BOOST_TEST(!ec, ec.message());
    co_await mb.async_unlock(use_awaitable);
    co_await ma.async_unlock(use_awaitable);

    election e(sa, "leader");
    co_await e.async_campaign("me", use_awaitable);
    BOOST_TEST((co_await raw.async_get("ns-l/leader/", get_options{.prefix = true}, use_awaitable)).kvs.size() == 1u);
    auto leader = co_await e.async_leader(use_awaitable);
    BOOST_TEST(leader.key == e.key());
    co_await e.async_resign(use_awaitable);
  }(), 30s);
}

#ifdef COETCD_GO_NSMUTEX_PATH
BOOST_AUTO_TEST_CASE(a_namespaced_mutex_excludes_gos_namespaced_mutex) {
  asio::io_context ioc;
  client a(ioc, in("tenant/"));
  auto go = [](const std::string& ns) {
    return std::string(COETCD_GO_NSMUTEX_PATH) + " -endpoints " + server().endpoint() + " -ns " + ns +
           " -name job -hold 50ms";
  };
  std::unique_ptr<child_process> same, other;
  run_for(ioc, [&]() -> asio::awaitable<void> {
    auto s = co_await session::async_create(a, use_awaitable);
    coetcd::mutex m(s, "job");
    co_await m.async_lock(use_awaitable);
    same = std::make_unique<child_process>(go("tenant/"));
    other = std::make_unique<child_process>(go("elsewhere/"));
    // Go in another namespace locks at once; Go in ours waits for us.
    for (int i = 0; i < 200 && other->output().find("unlocked") == std::string::npos; ++i) co_await sleep_for(25ms);
    BOOST_TEST(other->output().find("locked job/") != std::string::npos, other->output());
    co_await sleep_for(300ms);
    BOOST_TEST(same->output().find("locked") == std::string::npos, same->output());
    co_await m.async_unlock(use_awaitable);
    // Go's waiter holds, then unlocks, and our next lock waits behind it if it is still there.
    for (int i = 0; i < 200 && same->output().find("locked job/") == std::string::npos; ++i) co_await sleep_for(25ms);
    BOOST_TEST(same->output().find("locked job/") != std::string::npos, same->output());
    co_await m.async_lock(use_awaitable);
    // Go prints "unlocked" only after its delete has returned, so our lock may come first; what
    // must hold is that Go's key is gone by the time we hold the lock.
    auto out = same->output();
    auto at = out.find("locked job/");
    BOOST_REQUIRE(at != std::string::npos);
    auto go_key = out.substr(at + 7, out.find('\n', at) - (at + 7));
    BOOST_TEST((co_await a.async_get(go_key, use_awaitable)).kvs.empty(), go_key);
    co_await m.async_unlock(use_awaitable);
    co_await s.async_close(use_awaitable);
  }(), 30s);
  BOOST_TEST(same->wait(10000ms).value_or(-1) == 0, same->output());
  BOOST_TEST(same->output().find("unlocked") != std::string::npos, same->output());
  BOOST_TEST(other->wait(10000ms).value_or(-1) == 0, other->output());
}
#endif

BOOST_AUTO_TEST_CASE(an_empty_key_is_refused_inside_a_namespace_too) {
  asio::io_context ioc;
  client a(ioc, in("ns-e/"));
  run_for(ioc, [&]() -> asio::awaitable<void> {
    auto [ec, r] = co_await a.async_put("", "v", asio::as_tuple(use_awaitable));
    BOOST_TEST(ec == error::empty_key);
    auto [gec, g] = co_await a.async_get("", asio::as_tuple(use_awaitable));
    BOOST_TEST(gec == error::empty_key);
  }(), 10s);
}
