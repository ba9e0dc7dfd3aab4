// What a client tells and counts, and what it can be asked: the event hook fired by real
// scenarios (two members' worth of proxies cut and one restored, a compaction behind the
// client's back, a lease revoked by another client), client::stats() against the server's own
// /metrics, and async_lock_status on a queue made by etcdctl and coetcd together.
#define BOOST_TEST_MODULE coetcd_observe
#include "support/child_process.hpp"
#include "support/fixture.hpp"
#include "support/tcp_proxy.hpp"

#include <algorithm>
#include <atomic>
#include <regex>
#include <thread>

using namespace coetcd;
using namespace coetcd::test;
using namespace std::chrono_literals;

BOOST_TEST_GLOBAL_FIXTURE(shared_etcd);

namespace {

struct event_log {
  std::vector<event> all;
  const event* find(event_kind k, const std::function<bool(const event&)>& also = {}) const {
    for (const auto& e : all)
      if (e.kind == k && (!also || also(e))) return &e;
    return nullptr;
  }
  bool has(event_kind k, const std::function<bool(const event&)>& also = {}) const { return find(k, also) != nullptr; }
  std::string dump() const {
    std::string s;
    for (const auto& e : all) s += to_string(e) + "\n";
    return s;
  }
};

// A plain gauge of the server's /metrics ("name value" on a line of its own).
double gauge(const etcd_process& e, const std::string& name) {
  auto text = e.metrics();
  auto at = text.find("\n" + name + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + name.size() + 2));
}

}  // namespace

// Every kind of event, each from what causes it in production. The client talks to one etcd
// through two proxies (two "members"); both are cut, keys are written and compacted behind its
// back, and the proxy it did not use first comes back: the connection fails over, both shared
// streams reopen, a plain watch resumes (and finds its revision compacted), the lock view is
// read anew, a TTL-2 session is late and then lost. Then a local hand-off, a release, a lease
// revoked by another client (session and lock lost) and an election.
BOOST_AUTO_TEST_CASE(every_event_kind_comes_from_a_real_scenario) {
  tcp_proxy p1(server().endpoint()), p2(server().endpoint());
  asio::io_context ioc;
  event_log log;
  client_options o;
  o.endpoints = {p1.endpoint(), p2.endpoint()};
  o.request_timeout = 5s;
  o.on_event = [&log](const event& e) { log.all.push_back(e); };
  client admin(ioc, options_for(server()));
  client c(ioc, o);
  run_for(ioc, [](tcp_proxy& p1, tcp_proxy& p2, client& admin, client& c, event_log& log) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, session_options{.ttl = 10s}, use_awaitable);
    auto brief = co_await session::async_create(c, session_options{.ttl = 2s}, use_awaitable);
    mutex m1(s, "ev/lock"), m2(s, "ev/lock");
    auto h1 = co_await m1.async_lock(use_awaitable);
    auto m2_result = acquiring<mutex::hold>();
    m2.async_lock(record(m2_result));  // waits locally: the name's view runs
    auto w = co_await c.async_watch("ev/w", use_awaitable);
    election_observer obs(c, "ev/elect");
    election el(s, "ev/elect");
    auto lead = co_await el.async_campaign("me", use_awaitable);
    BOOST_TEST(log.has(event_kind::lock_acquired, [](const event& e) {
      return e.name == "ev/lock" && e.revision > 0 && e.detail.empty();
    }), log.dump());
    BOOST_TEST(co_await eventually([&] {
      return log.has(event_kind::leader_changed, [&](const event& e) { return e.detail == "this session won"; }) &&
             log.has(event_kind::leader_changed, [&](const event& e) { return e.key == el.key() && e.detail.empty(); });
    }, 5000ms), log.dump());
    BOOST_TEST_REQUIRE(co_await eventually([&] { return log.has(event_kind::endpoint_connected); }, 5000ms));
    const std::string first = log.find(event_kind::endpoint_connected)->name;
    BOOST_TEST((first == p1.endpoint() || first == p2.endpoint()), first);
    co_await sleep_for(200ms);  // the election's view has caught up before the cut

    p1.cut();
    p2.cut();
    put_result last;
    for (int i = 0; i < 5; ++i) last = co_await admin.async_put("ev/other", std::to_string(i), use_awaitable);
    co_await admin.async_compact(last.header.revision, use_awaitable);
    // TTL 2: late at 0.8 s before its local deadline, lost at the deadline.
    BOOST_TEST(co_await eventually([&] {
      return log.has(event_kind::session_lost, [&](const event& e) { return e.lease == brief.lease(); });
    }, 6000ms), log.dump());
    auto& back = first == p1.endpoint() ? p2 : p1;
    back.restore();

    BOOST_TEST(co_await eventually([&] {
      return log.has(event_kind::endpoint_failed_over, [&](const event& e) { return e.name == back.endpoint(); }) &&
             log.has(event_kind::stream_reopened, [](const event& e) { return e.name == "Watch" && e.error; }) &&
             log.has(event_kind::stream_reopened, [](const event& e) { return e.name == "LeaseKeepAlive"; }) &&
             log.has(event_kind::watch_resumed, [](const event& e) { return e.name == "ev/w" && e.revision > 0; }) &&
             log.has(event_kind::watch_relisted, [](const event& e) {
               return e.name == "ev/lock" && e.error == error::compacted;
             });
    }, 10000ms), log.dump());
    BOOST_TEST(log.has(event_kind::endpoint_unreachable), log.dump());
    BOOST_TEST(log.has(event_kind::keepalive_late, [&](const event& e) {
      return e.lease == brief.lease() && e.duration <= 800ms;
    }), log.dump());
    BOOST_TEST(log.has(event_kind::session_lost, [&](const event& e) { return e.error == error::lease_expired; }),
               log.dump());
    auto [wec, wb] = co_await w.async_next(asio::as_tuple(use_awaitable));
    BOOST_TEST(wec == error::compacted);  // the watch could not resume across the compaction

    // A local hand-off, then a release.
    co_await h1.async_release(use_awaitable);
    BOOST_TEST_REQUIRE(co_await eventually([&] { return m2_result->ec.has_value(); }, 5000ms));
    BOOST_TEST(!*m2_result->ec);
    BOOST_TEST(bool(m2_result->hold));
    // Events reach the hook through the strand: shortly after the handlers they concern.
    BOOST_TEST(co_await eventually([&] {
      return log.has(event_kind::lock_acquired, [](const event& e) { return e.detail == "handed over locally"; });
    }, 2000ms), log.dump());
    co_await m2_result->hold.async_release(use_awaitable);
    BOOST_TEST(co_await eventually([&] {
      return std::count_if(log.all.begin(), log.all.end(), [](const event& e) {
               return e.kind == event_kind::lock_released && e.name == "ev/lock";
             }) == 2;
    }, 5000ms), log.dump());

    // Another client revokes the lease of a session holding a lock.
    auto s3 = co_await session::async_create(c, session_options{.ttl = 10s}, use_awaitable);
    mutex m3(s3, "ev/lock3");
    auto h3 = co_await m3.async_lock(use_awaitable);
    co_await admin.async_lease_revoke(s3.lease(), use_awaitable);
    BOOST_TEST(co_await eventually([&] {
      return log.has(event_kind::session_lost, [&](const event& e) {
               return e.lease == s3.lease() && e.error == error::lease_not_found;
             }) &&
             log.has(event_kind::lock_lost, [&](const event& e) { return e.name == "ev/lock3" && e.lease == s3.lease(); });
    }, 5000ms), log.dump());

    BOOST_TEST(!h3, "still held after its session's lease was revoked");
    co_await lead.async_release(use_awaitable);
    co_await s.async_close(use_awaitable);
    for (auto k : {event_kind::endpoint_connected, event_kind::endpoint_failed_over, event_kind::endpoint_unreachable,
                   event_kind::stream_reopened, event_kind::watch_resumed, event_kind::watch_relisted,
                   event_kind::keepalive_late, event_kind::session_lost, event_kind::lock_acquired,
                   event_kind::lock_released, event_kind::lock_lost, event_kind::leader_changed})
      BOOST_TEST(log.has(k), "no " << to_string(k));
    BOOST_TEST_MESSAGE(log.dump());
  }(p1, p2, admin, c, log), 60s);
}

BOOST_AUTO_TEST_CASE(event_lines_quote_what_they_carry) {
  event e{.kind = event_kind::lock_acquired, .name = "a \"b\"", .key = "a/1", .lease = 0x1f, .revision = 7,
          .duration = 12ms};
  BOOST_TEST(to_string(e) == "lock_acquired name=\"a \\\"b\\\"\" key=\"a/1\" lease=1f revision=7 duration=12ms");
  e = event{.kind = event_kind::stream_reopened, .name = "Watch", .detail = "x\ny",
            .error = make_error_code(error::compacted)};
  BOOST_TEST(to_string(e).find("detail=\"x\\x0ay\"") != std::string::npos, to_string(e));
  BOOST_TEST(to_string(e).find("error=\"") != std::string::npos);
}

// The client's counts of unary calls and streams equal what the server counted for them
// (grpc_server_started_total per method), and its watcher gauge the server's watcher gauge.
BOOST_AUTO_TEST_CASE(stats_count_what_the_server_counts) {
  auto& srv = server();
  const std::vector<std::string> unary{"Range", "Put", "DeleteRange", "Txn", "LeaseGrant", "LeaseRevoke"};
  const std::vector<std::string> streams{"Watch", "LeaseKeepAlive"};
  std::map<std::string, double> before;
  for (const auto& m : unary) before[m] = srv.grpc_started(m);
  for (const auto& m : streams) before[m] = srv.grpc_started(m);
  asio::io_context ioc;
  client c(ioc, options_for(srv));
  run_for(ioc, [](client& c, etcd_process& srv) -> asio::awaitable<void> {
    for (int i = 0; i < 10; ++i) co_await c.async_put("stats/k" + std::to_string(i), "v", use_awaitable);
    for (int i = 0; i < 5; ++i) co_await c.async_get("stats/k" + std::to_string(i), use_awaitable);
    for (int i = 0; i < 3; ++i)
      co_await c.async_txn(txn().when(compare::version("stats/k0") > 0).then(txn_op::get("stats/k1")), use_awaitable);
    co_await c.async_delete("stats/k9", use_awaitable);
    auto [rec, rh] = co_await c.async_lease_revoke(0x7777, asio::as_tuple(use_awaitable));  // no such lease
    BOOST_TEST(rec == error::lease_not_found);
    auto w = co_await c.async_watch("stats/w", use_awaitable);

    auto s = co_await session::async_create(c, session_options{.ttl = 10s}, use_awaitable);
    mutex m1(s, "stats/lock"), m2(s, "stats/lock");
    auto first = co_await m1.async_lock(use_awaitable);
    auto second = acquiring<mutex::hold>();
    m2.async_lock(record(second));
    BOOST_TEST(co_await eventually([&] {
      auto st = c.stats();
      return st.locks.size() == 1 && st.locks[0].waiting == 1 && st.locks[0].held == 1;
    }, 5000ms));
    co_await first.async_release(use_awaitable);
    BOOST_TEST_REQUIRE(co_await eventually([&] { return second->ec.has_value(); }, 5000ms));
    co_await second->hold.async_release(use_awaitable);

    auto st = c.stats();
    BOOST_TEST_REQUIRE(st.locks.size() == 1u);
    const auto& l = st.locks[0];
    BOOST_TEST(l.name == "stats/lock");
    BOOST_TEST(l.acquired == 2u);
    BOOST_TEST(l.handoffs == 1u);
    BOOST_TEST(l.held == 0);
    BOOST_TEST(l.waiting == 0);
    BOOST_TEST(l.wait.count == 2u);
    BOOST_TEST(l.wait.sum_seconds >= 0.0);
    // The plain watcher and the lock name's view, as the server counts watchers.
    BOOST_TEST(co_await eventually([&] { return c.stats().watchers == 2; }, 2000ms));
    BOOST_TEST(gauge(srv, "etcd_debugging_mvcc_watcher_total") == 2.0);
    BOOST_TEST(st.leases_kept == 1);
    BOOST_TEST(st.rpcs.at("LeaseRevoke").failed == 1u);
    BOOST_TEST(st.rpcs.at("Put").sent == 10u);
    co_await s.async_close(use_awaitable);
    BOOST_TEST(co_await eventually([&c] { return c.stats().rpcs_in_flight == 0; }, 5000ms));
  }(c, srv));
  auto st = c.stats();
  BOOST_TEST(st.rpcs_in_flight == 0);
  BOOST_TEST(st.leases_kept == 0);
  for (const auto& m : unary) {
    auto ours = st.rpcs.count(m) ? st.rpcs.at(m).sent : 0;
    BOOST_TEST(srv.grpc_started(m) - before[m] == double(ours), m << ": server vs client");
    BOOST_TEST(ours > 0u, m);
  }
  for (const auto& m : streams) {
    auto ours = st.streams.count(m) ? st.streams.at(m).opened : 0;
    BOOST_TEST(srv.grpc_started(m) - before[m] == double(ours), m << ": server vs client");
    BOOST_TEST(ours == 1u, m);
  }
}

// A queue made by `etcdctl lock` (holder), two coetcd sessions (waiters) and a lock on a longer
// name under it, read back in queue order with leases and TTLs.
BOOST_AUTO_TEST_CASE(status_of_a_queue_made_by_etcdctl_and_coetcd) {
  child_process holder("ETCDCTL_API=3 " + etcdctl_binary() + " --endpoints=" + server().client_url() +
                       " lock st/q");  // prints its key, holds until killed
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](child_process& holder, client& c) -> asio::awaitable<void> {
    std::smatch m;
    static const std::regex key_line("^(st/q/[0-9a-f]+)\n");
    std::string out;
    BOOST_TEST_REQUIRE(co_await eventually([&] {
      out = holder.output();
      return std::regex_search(out, m, key_line);
    }, 10000ms), out);
    const std::string etcdctl_key = m[1];

    auto s1 = co_await session::async_create(c, session_options{.ttl = 30s}, use_awaitable);
    auto s2 = co_await session::async_create(c, session_options{.ttl = 20s}, use_awaitable);
    auto s3 = co_await session::async_create(c, session_options{.ttl = 20s}, use_awaitable);
    mutex m1(s1, "st/q"), m2(s2, "st/q"), nested(s3, "st/q/sub");
    auto r1 = acquiring<mutex::hold>(), r2 = acquiring<mutex::hold>();
    m1.async_lock(record(r1));
    auto queue_length = [&c]() -> asio::awaitable<std::int64_t> {
      for (int i = 0; i < 100; ++i) {
        auto n = co_await count_keys(c, "st/q/");
        if (n >= 3) co_return n;
        co_await sleep_for(20ms);
      }
      co_return co_await count_keys(c, "st/q/");
    };
    while (co_await count_keys(c, "st/q/") < 2) co_await sleep_for(20ms);  // m1 queued first
    m2.async_lock(record(r2));
    BOOST_TEST_REQUIRE(co_await queue_length() == 3);
    auto nested_hold = co_await nested.async_lock(use_awaitable);  // its own prefix is empty: held at once

    auto st = co_await async_lock_status(c, "st/q", use_awaitable);
    BOOST_TEST(st.name == "st/q");
    BOOST_TEST(st.revision > 0);
    BOOST_TEST_REQUIRE(st.holder.has_value());
    BOOST_TEST(st.holder->key == etcdctl_key);
    BOOST_TEST(st.holder->lease != 0);
    BOOST_TEST(st.holder->ttl.count() > 0);
    BOOST_TEST(st.holder->granted_ttl >= st.holder->ttl);
    BOOST_TEST(st.holder->create_revision > 0);
    BOOST_TEST_REQUIRE(st.waiters.size() == 3u);
    BOOST_TEST(st.waiters[0].key == m1.key());
    BOOST_TEST(st.waiters[0].lease == s1.lease());
    BOOST_TEST(st.waiters[0].granted_ttl.count() == 30);
    BOOST_TEST((st.waiters[0].ttl.count() > 20 && st.waiters[0].ttl.count() <= 30));
    BOOST_TEST(st.waiters[1].key == m2.key());
    BOOST_TEST(st.waiters[1].lease == s2.lease());
    BOOST_TEST(st.waiters[2].key == nested.key());
    BOOST_TEST(st.waiters[2].other_name == "st/q/sub");
    BOOST_TEST(st.waiters[0].create_revision < st.waiters[1].create_revision);
    BOOST_TEST(st.holder->create_revision < st.waiters[0].create_revision);
    BOOST_TEST_REQUIRE(st.nested_names.size() == 1u);
    BOOST_TEST(st.nested_names[0] == "st/q/sub");
    BOOST_TEST(!r1->ec.has_value());  // still waiting behind etcdctl

    auto none = co_await async_lock_status(c, "st/nobody", use_awaitable);
    BOOST_TEST(!none.holder.has_value());
    BOOST_TEST(none.waiters.empty());
    auto [eec, est] = co_await async_lock_status(c, "", asio::as_tuple(use_awaitable));
    BOOST_TEST(eec == error::empty_key);

    co_await nested_hold.async_release(use_awaitable);
    holder.signal(SIGKILL);
    co_await s1.async_close(use_awaitable);
    co_await s2.async_close(use_awaitable);
    co_await s3.async_close(use_awaitable);
  }(holder, c), 30s);
}

// stats() from another thread while locks, puts and watches run on the io thread (the claim of
// client.hpp: any thread). Under ThreadSanitizer this is the test that would report.
BOOST_AUTO_TEST_CASE(stats_read_from_another_thread_while_work_runs) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  std::atomic<bool> done{false};
  std::atomic<std::uint64_t> snapshots{0}, odd{0};  // Boost.Test's assertions are for one thread
  std::thread reader([&] {
    while (!done) {
      auto st = c.stats();
      for (const auto& l : st.locks)
        if (l.held < 0 || l.held > 1 || l.waiting < 0) ++odd;
      ++snapshots;
    }
  });
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, session_options{.ttl = 10s}, use_awaitable);
    for (int round = 0; round < 20; ++round) {
      mutex a(s, "stats-thread/" + std::to_string(round % 3)), b(s, "stats-thread/" + std::to_string(round % 3));
      auto first = co_await a.async_lock(use_awaitable);
      auto second = acquiring<mutex::hold>();
      b.async_lock(record(second));
      co_await c.async_put("stats-thread/k", std::to_string(round), use_awaitable);
      co_await first.async_release(use_awaitable);
      while (!second->ec.has_value()) co_await sleep_for(1ms);
      co_await second->hold.async_release(use_awaitable);
    }
    co_await s.async_close(use_awaitable);
    // A lock view's first Range may still be on the wire after its mutexes went.
    BOOST_TEST(co_await eventually([&c] { return c.stats().rpcs_in_flight == 0; }, 5000ms));
  }(c));
  done = true;
  reader.join();
  BOOST_TEST(snapshots.load() > 0u);
  BOOST_TEST(odd.load() == 0u);
  BOOST_TEST(c.stats().rpcs.at("Put").sent == 20u);
}
