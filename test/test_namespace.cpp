// A key namespace (client_options::key_prefix, Go's clientv3/namespace): keys, ranges, watches,
// txn compares and operations, lease key lists and lock keys of a client live under its prefix
// and come back without it; other namespaces and the keys outside stay out of reach (a lease's
// key list too); an empty key with prefix is the whole namespace; a namespaced coetcd::mutex and
// Go's concurrency.Mutex on a namespaced client exclude each other.
#define BOOST_TEST_MODULE coetcd_namespace
#include "support/child_process.hpp"
#include "support/fixture.hpp"

#include <coetcd/cache.hpp>

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
    auto lease = co_await a.async_lease_grant(std::chrono::seconds(30), use_awaitable);
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
    auto ha = co_await ma.async_lock(use_awaitable);
    BOOST_TEST(ha.key() == ma.key());
    BOOST_TEST(ma.key().rfind("job/", 0) == 0u, ma.key());
    BOOST_TEST((co_await raw.async_get("ns-l/" + ma.key(), use_awaitable)).kvs.size() == 1u);
    // Another namespace's lock of the same name is another lock.
    auto [ec, hb] = co_await mb.async_try_lock(asio::as_tuple(use_awaitable));
    BOOST_TEST(!ec, ec.message());
    BOOST_TEST(bool(hb));
    // A fence built in a namespace compares the namespaced key: it holds through the client.
    auto guarded = txn().when(ha.fence());
    auto fenced = co_await a.async_txn(guarded, use_awaitable);
    BOOST_TEST(fenced.succeeded);
    co_await hb.async_release(use_awaitable);
    co_await ha.async_release(use_awaitable);

    election e(sa, "leader");
    auto lead = co_await e.async_campaign("me", use_awaitable);
    BOOST_TEST(lead.key() == e.key());
    BOOST_TEST((co_await raw.async_get("ns-l/leader/", get_options{.prefix = true}, use_awaitable)).kvs.size() == 1u);
    auto leader = co_await e.async_leader(use_awaitable);
    BOOST_TEST(leader.key == e.key());
    co_await lead.async_release(use_awaitable);
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
    auto first = co_await m.async_lock(use_awaitable);
    same = std::make_unique<child_process>(go("tenant/"));
    other = std::make_unique<child_process>(go("elsewhere/"));
    // Go in another namespace locks at once; Go in ours waits for us.
    for (int i = 0; i < 200 && other->output().find("unlocked") == std::string::npos; ++i) co_await sleep_for(25ms);
    BOOST_TEST(other->output().find("locked job/") != std::string::npos, other->output());
    co_await sleep_for(300ms);
    BOOST_TEST(same->output().find("locked") == std::string::npos, same->output());
    co_await first.async_release(use_awaitable);
    // Go's waiter holds, then unlocks, and our next lock waits behind it if it is still there.
    for (int i = 0; i < 200 && same->output().find("locked job/") == std::string::npos; ++i) co_await sleep_for(25ms);
    BOOST_TEST(same->output().find("locked job/") != std::string::npos, same->output());
    auto second = co_await m.async_lock(use_awaitable);
    // Go prints "unlocked" only after its delete has returned, so our lock may come first; what
    // must hold is that Go's key is gone by the time we hold the lock.
    auto out = same->output();
    auto at = out.find("locked job/");
    BOOST_REQUIRE(at != std::string::npos);
    auto go_key = out.substr(at + 7, out.find('\n', at) - (at + 7));
    BOOST_TEST((co_await a.async_get(go_key, use_awaitable)).kvs.empty(), go_key);
    co_await second.async_release(use_awaitable);
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

// A lease's key list shows the keys of the client's namespace only, as Go's namespace.NewLease
// filters it. Keys outside came back as they were: "ns-t2/secret" read, from "ns-t1/", exactly
// as that namespace's own "ns-t2/secret" would.
BOOST_AUTO_TEST_CASE(a_lease_lists_only_the_keys_of_its_namespace) {
  asio::io_context ioc;
  client a(ioc, in("ns-t1/")), b(ioc, in("ns-t2/")), raw(ioc, options_for(server()));
  run_for(ioc, [&]() -> asio::awaitable<void> {
    auto lease = co_await raw.async_lease_grant(std::chrono::seconds(30), use_awaitable);
    const put_options on_lease{.lease = lease.id};
    co_await a.async_put("mine", "v", on_lease, use_awaitable);
    co_await b.async_put("secret", "v", on_lease, use_awaitable);
    co_await raw.async_put("ns-t1", "v", on_lease, use_awaitable);  // shorter than the prefix
    co_await raw.async_put("outside", "v", on_lease, use_awaitable);
    auto ours = co_await a.async_lease_time_to_live(lease.id, true, use_awaitable);
    BOOST_TEST((ours.keys == std::vector<std::string>{"mine"}));
    auto theirs = co_await b.async_lease_time_to_live(lease.id, true, use_awaitable);
    BOOST_TEST((theirs.keys == std::vector<std::string>{"secret"}));
    auto all = co_await raw.async_lease_time_to_live(lease.id, true, use_awaitable);
    BOOST_TEST(all.keys.size() == 4u);
    co_await raw.async_lease_revoke(lease.id, use_awaitable);
  }(), 30s);
}

// An empty key with prefix or from_key is the whole namespace (Go's namespace package reads it
// so): get, watch, cache and delete reach every key inside and none outside. It was refused
// (empty_key): a namespaced client could not list, follow or empty its namespace.
BOOST_AUTO_TEST_CASE(an_empty_key_with_prefix_is_the_whole_namespace) {
  asio::io_context ioc;
  client a(ioc, in("ns-all/")), raw(ioc, options_for(server()));
  run_for(ioc, [&]() -> asio::awaitable<void> {
    co_await raw.async_put("ns-all", "x", use_awaitable);   // sorts before every key inside
    co_await raw.async_put("ns-all0", "x", use_awaitable);  // the namespace's range end itself
    co_await a.async_put("k1", "1", use_awaitable);
    co_await a.async_put("z/k2", "2", use_awaitable);
    auto listed = co_await a.async_get("", get_options{.prefix = true}, use_awaitable);
    BOOST_TEST((keys_of(listed) == std::vector<std::string>{"k1", "z/k2"}));
    auto from = co_await a.async_get("", get_options{.from_key = true}, use_awaitable);
    BOOST_TEST((keys_of(from) == std::vector<std::string>{"k1", "z/k2"}));

    cache copy(a.get_executor(), a, "");
    co_await copy.async_wait_synced(use_awaitable);
    BOOST_TEST(copy.size() == 2u);
    auto w = co_await a.async_watch("", watch_options{.prefix = true}, use_awaitable);
    co_await raw.async_put("ns-all0", "y", use_awaitable);
    auto put = co_await a.async_put("k3", "3", use_awaitable);
    auto batch = co_await w.async_next(use_awaitable);
    BOOST_TEST_REQUIRE(batch.events.size() == 1u);
    BOOST_TEST(batch.events[0].kv.key == "k3");
    co_await copy.async_wait_for(put.header.revision, use_awaitable);
    BOOST_TEST(copy.get("k3").has_value());
    BOOST_TEST(copy.size() == 3u);

    auto gone = co_await a.async_delete("", delete_options{.prefix = true}, use_awaitable);
    BOOST_TEST(gone.deleted == 3);
    BOOST_TEST((co_await raw.async_get("ns-all", use_awaitable)).kvs.size() == 1u);
    BOOST_TEST((co_await raw.async_get("ns-all0", use_awaitable)).kvs.size() == 1u);
    co_await raw.async_delete("ns-all", delete_options{.range_end = "ns-all1"}, use_awaitable);
  }(), 30s);
}

// Without a namespace an empty key with prefix or from_key reads every key, as Go's clientv3
// does; deleting every key that way is refused, so one empty variable cannot wipe the cluster.
BOOST_AUTO_TEST_CASE(without_a_namespace_an_empty_prefix_reads_every_key_and_deletes_none) {
  asio::io_context ioc;
  client raw(ioc, options_for(server()));
  run_for(ioc, [&]() -> asio::awaitable<void> {
    co_await raw.async_put("every/one", "x", use_awaitable);
    const std::string_view nul("\0", 1);
    auto named = co_await raw.async_get(nul, get_options{.count_only = true, .from_key = true}, use_awaitable);
    BOOST_TEST_REQUIRE(named.count >= 1);
    auto every = co_await raw.async_get("", get_options{.prefix = true, .count_only = true}, use_awaitable);
    BOOST_TEST(every.count == named.count);
    auto from = co_await raw.async_get("", get_options{.count_only = true, .from_key = true}, use_awaitable);
    BOOST_TEST(from.count == named.count);
    auto [pec, pr] = co_await raw.async_delete("", delete_options{.prefix = true}, asio::as_tuple(use_awaitable));
    BOOST_TEST(pec == error::empty_key, pec.message());
    auto [fec, fr] = co_await raw.async_delete("", delete_options{.from_key = true}, asio::as_tuple(use_awaitable));
    BOOST_TEST(fec == error::empty_key, fec.message());
    BOOST_TEST((co_await raw.async_get("every/one", use_awaitable)).kvs.size() == 1u);
    co_await raw.async_delete("every/one", use_awaitable);
  }(), 30s);
}
