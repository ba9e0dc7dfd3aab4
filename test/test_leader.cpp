// coetcd::leader on a 3-member cluster whose links pass proxies: a term ends when its session is
// revoked, its member is cut off past the TTL, its process pauses, or its key is deleted; each
// time the old leader is told, the next one leads within a stated bound, no write fenced with an
// ended term goes through, and the old leader campaigns again. Plus etcdctl interop, the body's
// ways out, and bad input. Every case checks one leader at a time by the fenced writes' order.
#define BOOST_TEST_MODULE coetcd_leader
#include "support/child_process.hpp"
#include "support/cluster.hpp"

#include <coetcd/leader.hpp>

#include <algorithm>
#include <future>
#include <mutex>
#include <thread>

using namespace coetcd;
using namespace coetcd::test;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

namespace {

client_options direct() { return options(cluster().endpoints()); }

double seconds_since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }

/// Every write that went through, fenced with the writer's term.
struct fenced_log {
  struct write {
    std::int64_t revision, term;
    std::string who;
  };
  std::mutex m;
  std::vector<write> writes;

  void add(std::int64_t revision, std::int64_t term, const std::string& who) {
    std::lock_guard g(m);
    writes.push_back({revision, term, who});
  }
  std::size_t count(const std::string& who) {
    std::lock_guard g(m);
    return static_cast<std::size_t>(std::count_if(writes.begin(), writes.end(), [&](auto& w) { return w.who == who; }));
  }
  /// One leader at a time: in etcd's order, a write never comes from an older term than the one
  /// before it (a new term's key is younger, and it leads only once the older key is gone).
  void check_one_at_a_time() {
    std::lock_guard g(m);
    auto sorted = writes;
    std::sort(sorted.begin(), sorted.end(), [](auto& a, auto& b) { return a.revision < b.revision; });
    for (std::size_t i = 1; i < sorted.size(); ++i)
      BOOST_TEST(sorted[i].term >= sorted[i - 1].term, "a write of term " << sorted[i].term << " (" << sorted[i].who
                                                                           << ") at revision " << sorted[i].revision
                                                                           << " after one of term " << sorted[i - 1].term);
    BOOST_TEST_MESSAGE(sorted.size() << " fenced writes in order");
  }
};

/// What a candidate saw, shared with its handler and its event reader, which may run after the
/// candidate is gone.
struct candidate_record {
  std::mutex m;
  std::vector<std::pair<clock_type::time_point, leader_event>> events;
  bool done = false;
  bool closing = false;  // the leader object is going: the reader must not touch it again
  std::exception_ptr error;
  asio::cancellation_signal stop_run;
};

/// A candidate: a leader whose body writes under its term's fence every 20 ms, and the events it
/// told, with their times. Made, stopped and destroyed on the thread that runs its client.
struct candidate {
  std::string who;
  std::shared_ptr<candidate_record> rec = std::make_shared<candidate_record>();
  leader l;

  candidate(client& c, std::string name, std::string id, fenced_log& log, leader_options o = {})
      : who(std::move(id)), l(c, name, with_value(std::move(o), who)) {
    auto body = [&c, name, who = who, &log](election::hold& t) -> asio::awaitable<void> {
      // Read once: the token reads 0 once the term is over, and a write may land just before.
      const auto term = t.fencing_token();
      for (;;) {
        auto put = txn().when(t.fence()).then(txn_op::put(name + "-data", who));
        auto [ec, r] = co_await c.async_txn(put, asio::as_tuple(use_awaitable));
        if (!ec && r.succeeded) log.add(r.header.revision, term, who);
        co_await sleep_for(20ms);
      }
    };
    auto r = rec;
    l.async_run(std::move(body), asio::bind_cancellation_slot(rec->stop_run.slot(), [r](std::exception_ptr e) {
                  std::lock_guard g(r->m);
                  r->done = true;
                  r->error = e;
                }));
    asio::co_spawn(l.get_executor(), collect(rec, &l), asio::detached);
  }
  ~candidate() {
    std::lock_guard g(rec->m);
    rec->closing = true;
  }
  static leader_options with_value(leader_options o, const std::string& v) {
    o.value = v;
    return o;
  }
  static asio::awaitable<void> collect(std::shared_ptr<candidate_record> rec, leader* l) {
    for (;;) {
      auto [ec, e] = co_await l->async_next_event(asio::as_tuple(use_awaitable));
      std::lock_guard g(rec->m);
      if (ec || rec->closing) break;
      rec->events.emplace_back(clock_type::now(), e);
    }
  }
  /// Cancels the run (terminal): the body stops, the term's session is closed.
  void stop() { rec->stop_run.emit(asio::cancellation_type::terminal); }
  /// The first event of kind `k` at or after `since`, if any.
  std::optional<std::pair<clock_type::time_point, leader_event>> first(leader_event::kind k, clock_type::time_point since = {}) {
    std::lock_guard g(rec->m);
    for (auto& e : rec->events)
      if (e.second.what == k && e.first >= since) return e;
    return std::nullopt;
  }
  bool finished() {
    std::lock_guard g(rec->m);
    return rec->done;
  }
  /// Every event told so far, for the log.
  std::string history() {
    static const char* kinds[] = {"elected", "lost", "failed", "stopped"};
    std::lock_guard g(rec->m);
    std::string out = who + ":";
    for (auto& [t, e] : rec->events)
      out += std::string(" ") + kinds[static_cast<int>(e.what)] + "(" + std::to_string(e.fencing_token) + (e.why ? ", " + e.why.message() : "") + ")";
    return out;
  }
  std::exception_ptr error() {
    std::lock_guard g(rec->m);
    return rec->error;
  }
};

/// The code in a run's outcome (an empty code for none).
error_code code_of(std::exception_ptr e) {
  if (!e) return {};
  try {
    std::rethrow_exception(e);
  } catch (const boost::system::system_error& se) {
    return se.code();
  } catch (...) {
    return make_error_code(boost::system::errc::state_not_recoverable);
  }
}

/// Stops a candidate and waits until its run completed with operation_aborted.
asio::awaitable<void> stop_run(candidate& c) {
  c.stop();
  co_await eventually([&c] { return c.finished(); }, 10s);
  BOOST_TEST_REQUIRE(c.finished(), c.who << "'s run did not end; " << c.history() << "; leading " << c.l.is_leader());
  BOOST_TEST(code_of(c.error()) == asio::error::operation_aborted, code_of(c.error()).message());
}

}  // namespace

BOOST_TEST_GLOBAL_FIXTURE(shared_partitionable_cluster);

// 1. The leader's session is revoked by hand: it is told (lease_not_found), the waiting
// candidate leads within a second, and the old leader campaigns again on a fresh session, leading
// once the other stops. Nothing is left under the name.
BOOST_AUTO_TEST_CASE(a_revoked_session_ends_the_term_and_the_old_leader_campaigns_again) {
  asio::io_context ioc;
  client c(ioc, direct());
  fenced_log log;
  run_for(ioc, [](client& c, fenced_log& log) -> asio::awaitable<void> {
    auto a = std::make_unique<candidate>(c, "lead-revoke", "a", log, leader_options{.ttl = 5s});
    co_await eventually([&] { return a->l.is_leader(); }, 10s);
    BOOST_TEST_REQUIRE(a->l.is_leader());
    auto b = std::make_unique<candidate>(c, "lead-revoke", "b", log, leader_options{.ttl = 5s});
    co_await sleep_for(300ms);
    BOOST_TEST(!b->l.is_leader());
    get_options by_age;
    by_age.prefix = true;
    by_age.order = sort_order::ascend;
    by_age.target = sort_target::create_revision;
    auto keys = co_await c.async_get("lead-revoke/", by_age, use_awaitable);
    BOOST_TEST_REQUIRE(keys.kvs.size() == 2u);
    BOOST_TEST(keys.kvs.front().value == "a");
    const auto first_term = a->l.fencing_token();
    BOOST_TEST(keys.kvs.front().create_revision == first_term);
    const auto cut = clock_type::now();
    co_await c.async_lease_revoke(keys.kvs.front().lease, use_awaitable);
    // The events, not only the state: is_leader() turns at once, its event comes by a handler.
    co_await eventually([&] {
      return b->first(leader_event::kind::elected, cut).has_value() && a->first(leader_event::kind::lost).has_value();
    }, 10s);
    BOOST_TEST_REQUIRE(b->l.is_leader());
    auto lost = a->first(leader_event::kind::lost);
    BOOST_TEST_REQUIRE(lost.has_value());
    BOOST_TEST(lost->second.fencing_token == first_term);
    BOOST_TEST((lost->second.why == error::lease_not_found || lost->second.why == error::session_lost ||
                lost->second.why == error::not_leader),
               lost->second.why.message());
    auto elected = b->first(leader_event::kind::elected, cut);
    BOOST_TEST_REQUIRE(elected.has_value());
    BOOST_TEST_MESSAGE("b led " << std::chrono::duration<double>(elected->first - cut).count() << " s after the revoke");
    BOOST_TEST((elected->first - cut < 1s));
    BOOST_TEST(b->l.fencing_token() > first_term);
    // a campaigns again behind b, and leads once b is stopped.
    co_await eventually([&] { return a->first(leader_event::kind::lost).has_value(); }, 1s);
    co_await sleep_for(300ms);
    BOOST_TEST(!a->l.is_leader());
    co_await stop_run(*b);
    co_await eventually([&] { return a->l.is_leader(); }, 10s);
    BOOST_TEST(a->l.is_leader());
    BOOST_TEST(a->l.terms() == 2u);
    co_await sleep_for(100ms);
    BOOST_TEST(log.count("a") > 0u);
    BOOST_TEST(log.count("b") > 0u);
    co_await stop_run(*a);
    co_await expect_no_keys(c, "lead-revoke");
    co_await c.async_delete("lead-revoke-data", use_awaitable);
  }(c, log), 60s);
  log.check_one_at_a_time();
}

// 2. The leader's only member is cut off from the other two past the TTL (clients still reach
// it; nothing passes between members): the candidate on the other side leads once the lease
// expires (not before two thirds of the TTL, the longest a renewal can be late; at most TTL + 4 s
// after the cut); the old leader is told when its keepalive deadline passes (TTL + 1 s at most),
// its body is cancelled, and after the heal it campaigns again behind the new leader.
BOOST_AUTO_TEST_CASE(a_leader_cut_off_past_its_ttl_is_told_and_replaced) {
  heal_cluster heal;
  const int f = (cluster().wait_for_leader() + 1) % 3;
  asio::io_context ioc;
  client ca(ioc, options({cluster().client_endpoint(f)}, 2000ms));
  client cb(ioc, options({cluster().member((f + 1) % 3).endpoint(), cluster().member((f + 2) % 3).endpoint()}));
  fenced_log log;
  run_for(ioc, [](client& ca, client& cb, int f, fenced_log& log) -> asio::awaitable<void> {
    constexpr auto ttl = 3s;
    candidate a(ca, "lead-cut", "a", log, leader_options{.ttl = ttl});
    co_await eventually([&] { return a.l.is_leader(); }, 10s);
    BOOST_TEST_REQUIRE(a.l.is_leader());
    candidate b(cb, "lead-cut", "b", log, leader_options{.ttl = ttl});
    co_await sleep_for(500ms);
    BOOST_TEST_REQUIRE(!b.l.is_leader());
    const auto first_term = a.l.fencing_token();
    const auto cut = clock_type::now();
    cluster().isolate(f);
    co_await eventually([&] {
      return b.first(leader_event::kind::elected).has_value() && a.first(leader_event::kind::lost).has_value();
    }, 20s);
    auto elected = b.first(leader_event::kind::elected);
    auto lost = a.first(leader_event::kind::lost);
    BOOST_TEST_REQUIRE(elected.has_value());
    BOOST_TEST_REQUIRE(lost.has_value());
    const double took = std::chrono::duration<double>(elected->first - cut).count();
    const double told = std::chrono::duration<double>(lost->first - cut).count();
    BOOST_TEST_MESSAGE("b led " << took << " s after the cut; a was told " << told << " s after it (" << lost->second.why.message() << ")");
    BOOST_TEST(took >= 2.0 * ttl.count() / 3 - 0.1);
    BOOST_TEST(took < ttl.count() + 4.0);
    BOOST_TEST(told <= ttl.count() + 1.0);
    BOOST_TEST(lost->second.fencing_token == first_term);
    BOOST_TEST(!a.l.is_leader());
    cluster().heal();
    // a comes back as a candidate (a key of its own beside b's), and leads once b stops. (b may
    // lose its term in the raft election the healed member can start: one at a time still holds.)
    // The healed member's return can start a raft election: a read may time out meanwhile.
    std::int64_t keys = -1;
    for (int i = 0; i < 200 && keys != 2; ++i) {
      auto [ec, r] = co_await cb.async_get("lead-cut/", get_options{.prefix = true, .count_only = true}, asio::as_tuple(use_awaitable));
      if (!ec) keys = r.count;
      if (keys != 2) co_await sleep_for(100ms);
    }
    BOOST_TEST(keys == 2);
    BOOST_TEST_MESSAGE(a.history());
    BOOST_TEST_MESSAGE(b.history());
    const auto b_term = b.l.fencing_token();
    co_await stop_run(b);
    co_await eventually([&] { return a.l.is_leader(); }, 15s);
    BOOST_TEST(a.l.is_leader());
    BOOST_TEST(a.l.fencing_token() > std::max(b_term, first_term));
    co_await stop_run(a);
    co_await expect_no_keys(cb, "lead-cut");
    co_await cb.async_delete("lead-cut-data", use_awaitable);
  }(ca, cb, f, log), 90s);
  log.check_one_at_a_time();
}

// 3. The leader's process pauses (its event loop blocked past the TTL, as a GC pause or SIGSTOP
// would): the other candidate leads within TTL + 3 s of the pause; once resumed, the old leader
// is told its term ended and none of its writes lands after the new leader's first.
constexpr auto pause_ttl = 2s;
BOOST_AUTO_TEST_CASE(a_paused_leader_is_replaced_and_its_writes_are_refused_after) {
  constexpr auto ttl = pause_ttl;
  fenced_log log;
  asio::io_context ioa;
  auto work = asio::make_work_guard(ioa);
  std::thread thread_a([&] { ioa.run(); });
  client ca(ioa, direct());
  std::unique_ptr<candidate> a;
  auto on_a = [&](auto f) {  // runs f on a's thread and waits for it
    std::promise<void> done;
    asio::post(ioa, [&] {
      f();
      done.set_value();
    });
    done.get_future().wait();
  };
  on_a([&] { a = std::make_unique<candidate>(ca, "lead-pause", "a", log, leader_options{.ttl = ttl}); });
  asio::io_context ioc;
  client cb(ioc, direct());
  std::int64_t first_term = 0;
  run_for(ioc, [](client& cb, candidate& a, asio::io_context& ioa, fenced_log& log, std::int64_t& first_term) -> asio::awaitable<void> {
    constexpr auto ttl = pause_ttl;
    co_await eventually([&] { return a.l.is_leader(); }, 10s);
    BOOST_TEST_REQUIRE(a.l.is_leader());
    candidate b(cb, "lead-pause", "b", log, leader_options{.ttl = ttl});
    co_await sleep_for(300ms);
    BOOST_TEST_REQUIRE(!b.l.is_leader());
    first_term = a.l.fencing_token();
    const auto paused = clock_type::now();
    asio::post(ioa, [] { std::this_thread::sleep_for(pause_ttl + 3s); });
    co_await eventually([&] { return b.l.is_leader(); }, 10s);
    BOOST_TEST_REQUIRE(b.l.is_leader());
    const double took = seconds_since(paused);
    BOOST_TEST_MESSAGE("b led " << took << " s after a's loop stopped");
    BOOST_TEST(took < ttl.count() + 3.0);
    co_await eventually([&] { return a.first(leader_event::kind::lost).has_value(); }, 10s);
    auto lost = a.first(leader_event::kind::lost);
    BOOST_TEST_REQUIRE(lost.has_value());
    BOOST_TEST_MESSAGE("a was told " << std::chrono::duration<double>(lost->first - paused).count() << " s after its pause began ("
                                     << lost->second.why.message() << ")");
    co_await sleep_for(500ms);
    co_await stop_run(b);
  }(cb, *a, ioa, log, first_term), 60s);
  // b's first write, and every write of a's first term after it.
  {
    std::lock_guard g(log.m);
    std::int64_t b_first = 0;
    for (auto& w : log.writes)
      if (w.who == "b" && (b_first == 0 || w.revision < b_first)) b_first = w.revision;
    BOOST_TEST(b_first > 0);
    for (auto& w : log.writes)
      BOOST_TEST(!(w.term == first_term && w.revision > b_first), "a wrote at " << w.revision << " after b's first write at " << b_first);
  }
  log.check_one_at_a_time();
  on_a([&] { a->stop(); });
  for (int i = 0; i < 500 && !a->finished(); ++i) std::this_thread::sleep_for(10ms);
  BOOST_TEST(a->finished());
  on_a([&] { a.reset(); });
  work.reset();
  thread_a.join();
  run_for(ioc, [](client& cb) -> asio::awaitable<void> {
    co_await expect_no_keys(cb, "lead-pause");
    co_await cb.async_delete("lead-pause-data", use_awaitable);
  }(cb));
}

// 4. The leader's key is deleted by hand (etcdctl del): the session alone would never tell; the
// leader is told (not_leader), its body cancelled, and it campaigns again with a new key.
BOOST_AUTO_TEST_CASE(a_deleted_key_ends_the_term_and_a_new_one_begins) {
  asio::io_context ioc;
  client c(ioc, direct());
  fenced_log log;
  run_for(ioc, [](client& c, fenced_log& log) -> asio::awaitable<void> {
    candidate a(c, "lead-del", "a", log);
    co_await eventually([&] { return a.l.is_leader(); }, 10s);
    BOOST_TEST_REQUIRE(a.l.is_leader());
    const auto first = a.l.fencing_token();
    co_await c.async_delete("lead-del/", delete_options{.prefix = true}, use_awaitable);
    co_await eventually([&] { return a.l.terms() == 2u && a.l.is_leader() && a.first(leader_event::kind::lost).has_value(); }, 10s);
    BOOST_TEST(a.l.terms() == 2u);
    BOOST_TEST(a.l.fencing_token() > first);
    auto lost = a.first(leader_event::kind::lost);
    BOOST_TEST_REQUIRE(lost.has_value());
    BOOST_TEST(lost->second.why == error::not_leader, lost->second.why.message());
    BOOST_TEST(lost->second.fencing_token == first);
    co_await stop_run(a);
    co_await expect_no_keys(c, "lead-del");
    co_await c.async_delete("lead-del-data", use_awaitable);
  }(c, log));
  log.check_one_at_a_time();
}

// 5. etcdctl sees the leader (elect -l prints its value) and an `etcdctl elect` candidate waits
// behind it, leading once the run is cancelled.
BOOST_AUTO_TEST_CASE(etcdctl_elect_sees_the_leader_and_waits_behind_it) {
  asio::io_context ioc;
  client c(ioc, direct());
  fenced_log log;
  run_for(ioc, [](client& c, fenced_log& log) -> asio::awaitable<void> {
    candidate a(c, "lead-ctl", "coetcd-a", log);
    co_await eventually([&] { return a.l.is_leader(); }, 10s);
    BOOST_TEST_REQUIRE(a.l.is_leader());
    const std::string ctl = "env ETCDCTL_API=3 " + etcdctl_binary() + " --endpoints=" + cluster().member(0).client_url();
    auto listen = run_command("timeout 2 " + ctl + " elect -l lead-ctl");
    BOOST_TEST(listen.output.find("coetcd-a") != std::string::npos, listen.output);
    child_process other("exec " + ctl + " elect lead-ctl etcdctl-b");
    co_await sleep_for(1s);
    BOOST_TEST(other.output().find("etcdctl-b") == std::string::npos, other.output());
    co_await stop_run(a);
    BOOST_TEST(other.wait_for_output("etcdctl-b", 10s), other.output());
    other.stop();
    co_await expect_no_keys(c, "lead-ctl");
    co_await c.async_delete("lead-ctl-data", use_awaitable);
  }(c, log));
}

// 6. The body's ways out: returning resigns and campaigns again (requeue) or ends the run
// (requeue false); throwing resigns and ends the run with the exception. No key is left.
BOOST_AUTO_TEST_CASE(a_body_that_returns_or_throws_resigns) {
  asio::io_context ioc;
  client c(ioc, direct());
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    int runs = 0;
    {
      leader l(c, "lead-body", leader_options{.value = "v", .requeue = true});
      auto body = [&runs, &c](election::hold& t) -> asio::awaitable<void> {
        BOOST_TEST(bool(t));
        BOOST_TEST(t.fencing_token() > 0);
        BOOST_TEST(t.lease() != 0);
        BOOST_TEST(t.key().rfind("lead-body/", 0) == 0u, t.key());
        // The term's fence holds while the body runs.
        auto check = txn().when(t.fence());
        auto fenced = co_await c.async_txn(check, use_awaitable);
        // Compare-only: linearizable all the same (client::async_txn pads it; see kv.cpp).
        BOOST_TEST(fenced.succeeded);
        ++runs;
      };
      std::optional<std::exception_ptr> out;
      asio::cancellation_signal stop;
      l.async_run(std::move(body), asio::bind_cancellation_slot(stop.slot(), [&](std::exception_ptr e) { out = e; }));
      co_await eventually([&] { return runs >= 3; }, 10s);
      BOOST_TEST(runs >= 3);
      stop.emit(asio::cancellation_type::terminal);
      co_await eventually([&] { return out.has_value(); }, 10s);
      BOOST_TEST_REQUIRE(out.has_value());
      BOOST_TEST(code_of(*out) == asio::error::operation_aborted);
    }
    {
      leader l(c, "lead-body", leader_options{.value = "v", .requeue = false});
      auto body = [](election::hold&) -> asio::awaitable<void> { co_return; };
      co_await l.async_run(std::move(body), use_awaitable);  // returns: no exception
      BOOST_TEST(l.terms() == 1u);
      BOOST_TEST(!l.is_leader());
      BOOST_TEST(co_await count_keys(c, "lead-body/") == 0);
    }
    {
      leader l(c, "lead-body");
      auto body = [](election::hold&) -> asio::awaitable<void> {
        co_await sleep_for(10ms);
        throw std::runtime_error("body failed");
      };
      std::string what;
      try {
        co_await l.async_run(std::move(body), use_awaitable);
      } catch (const std::runtime_error& e) {
        what = e.what();
      }
      BOOST_TEST(what == "body failed");
      BOOST_TEST(co_await count_keys(c, "lead-body/") == 0);
      // A second run of the same leader while one runs: already_started.
    }
    co_await expect_no_keys(c, "lead-body");
  }(c));
}

// 7. Bad input and a server that is not there: clear errors, no hang.
BOOST_AUTO_TEST_CASE(bad_input_unreachable_endpoints_and_a_closed_client) {
  asio::io_context ioc;
  client c(ioc, direct());
  BOOST_TEST(thrown_code([&] { leader l(c, ""); }) == error::empty_key);
  BOOST_TEST(thrown_code([&] { leader l(c, "x", leader_options{.ttl = 0s}); }) == error::invalid_argument);
  BOOST_TEST(thrown_code([&] { leader l(c, "x", leader_options{.retry_min = 10s, .retry_max = 1s}); }) == error::invalid_argument);
  client nowhere(ioc, options({"127.0.0.1:" + std::to_string(free_port())}, 500ms));
  run_for(ioc, [](client& c, client& nowhere) -> asio::awaitable<void> {
    // Unreachable: each failed attempt is told with its reason; cancelling ends the run at once.
    fenced_log log;
    candidate lost_one(nowhere, "lead-bad", "x", log, leader_options{.retry_min = 50ms, .retry_max = 200ms});
    co_await eventually([&] { return lost_one.first(leader_event::kind::failed).has_value(); }, 10s);
    auto failed = lost_one.first(leader_event::kind::failed);
    BOOST_TEST_REQUIRE(failed.has_value());
    BOOST_TEST(failed->second.why == error::endpoints_unreachable, failed->second.why.message());
    co_await stop_run(lost_one);
    // A second run while one runs.
    leader l(c, "lead-bad", leader_options{.ttl = 2s});
    auto forever = [](election::hold&) -> asio::awaitable<void> { co_await sleep_for(1h); };
    auto forever2 = forever;
    std::optional<std::exception_ptr> first, second;
    l.async_run(std::move(forever), [&](std::exception_ptr e) { first = e; });
    l.async_run(std::move(forever2), [&](std::exception_ptr e) { second = e; });
    co_await eventually([&] { return second.has_value(); }, 5s);
    BOOST_TEST_REQUIRE(second.has_value());
    BOOST_TEST(code_of(*second) == asio::error::already_started);
    co_await eventually([&] { return l.is_leader(); }, 10s);
    // The client closed under a running leader: the run ends with client_closed.
    c.close();
    co_await eventually([&] { return first.has_value(); }, 10s);
    BOOST_TEST_REQUIRE(first.has_value());
    BOOST_TEST(code_of(*first) == error::client_closed, code_of(*first).message());
    // An empty (moved-from) leader.
    leader moved(std::move(l));
    auto body = [](election::hold&) -> asio::awaitable<void> { co_return; };
    auto [e] = co_await l.async_run(std::move(body), asio::as_tuple(use_awaitable));
    BOOST_TEST(code_of(e) == asio::error::bad_descriptor);
  }(c, nowhere));
  // The closed client's term is gone with its lease's TTL, not before (nobody could revoke it).
  client check(ioc, direct());
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto n = co_await count_keys(c, "lead-bad/");
    for (int i = 0; i < 150 && n != 0; ++i) {
      co_await sleep_for(100ms);
      n = co_await count_keys(c, "lead-bad/");
    }
    BOOST_TEST(n == 0);
  }(check), 30s);
}
