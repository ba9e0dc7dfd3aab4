// Endpoints that follow the cluster (client_options::auto_sync_interval): a client given one
// member's address uses the two members added after it, and goes on when the first is removed,
// without a restart. A caller reads, writes and keeps a session all along: its reads and session
// see no error; a write on the wire to the removed member when it stops itself fails with
// UNAVAILABLE (perhaps applied, so never sent again), and only such writes may fail.
#define BOOST_TEST_MODULE coetcd_endpoint_sync
#include "support/fixture.hpp"

#include <coetcd/cluster.hpp>
#include <coetcd/maintenance.hpp>

#include <atomic>
#include <optional>
#include <future>
#include <mutex>
#include <thread>

using namespace coetcd;
using namespace coetcd::test;
using namespace std::chrono_literals;

namespace {

/// Polls `pred` every 50 ms for up to `limit`; true once it holds.
template <class Pred>
bool eventually(Pred pred, std::chrono::seconds limit = 20s) {
  for (auto end = std::chrono::steady_clock::now() + limit; std::chrono::steady_clock::now() < end;) {
    if (pred()) return true;
    std::this_thread::sleep_for(50ms);
  }
  return pred();
}

/// Asks until etcd takes the change: it refuses reconfigurations while a member has been up for
/// less than 5 s ("unhealthy cluster"), and a learner's promotion while its log is behind. A
/// transient error (a leader change, a proposal that timed out) leaves the change perhaps applied:
/// as an operator would, the test then reads the member list for a few seconds (each read is
/// answered from one member's applied state, which may lag), and `settled` says from it whether
/// the change is in (its result) or not (ask again). Asked again after such an error, etcd may
/// answer that it is done already ("Peer URLs already exists", "member not found", "can only
/// promote a learner member"): then the list must show it.
template <class Result, class Start, class Settled>
Result until_taken(coetcd::cluster& members, Start start, const char* refusal, Settled settled) {
  auto look = [&](std::chrono::seconds limit) -> std::optional<Result> {
    for (auto end = std::chrono::steady_clock::now() + limit; std::chrono::steady_clock::now() < end;) {
      std::promise<std::tuple<error_code, member_list_result>> listed;  // as_tuple(use_future): not in Asio 1.81
      members.async_member_list([&](error_code e, member_list_result l) { listed.set_value({e, std::move(l)}); });
      auto [lec, list] = listed.get_future().get();
      if (!lec)
        if (std::optional<Result> in = settled(list)) return in;
      std::this_thread::sleep_for(200ms);
    }
    return std::nullopt;
  };
  bool ambiguous = false;
  for (int tries = 0;; ++tries) {
    BOOST_TEST_REQUIRE(tries < 150);
    std::promise<std::tuple<error_code, Result>> answer;
    start([&](error_code e, Result r) { answer.set_value({e, std::move(r)}); });
    auto [ec, r] = answer.get_future().get();
    if (!ec) return r;
    const auto why = ec.message();
    const bool refused = why.find(refusal) != std::string::npos || why.find("unhealthy cluster") != std::string::npos;
    if (!refused && ec == condition::transient) {
      BOOST_TEST_MESSAGE("a reconfiguration step: " << why << "; reading the member list");
      ambiguous = true;
      if (auto in = look(5s)) return *in;
    } else if (!refused) {
      const bool done_already = why.find("already exists") != std::string::npos ||
                                why.find("member not found") != std::string::npos ||
                                why.find("can only promote a learner member") != std::string::npos;
      BOOST_TEST_REQUIRE((ambiguous && done_already), why);
      auto in = look(10s);
      BOOST_TEST_REQUIRE(in.has_value(), why << ", yet the member list does not show the change");
      return *in;
    }
    std::this_thread::sleep_for(200ms);
  }
}

/// Adds a member as an operator grows a live cluster: as a learner (it does not count for the
/// quorum, so a one-member cluster keeps writing while it starts), started, then promoted once
/// its log has caught up.
std::unique_ptr<etcd_process> add_member(coetcd::cluster& members, const std::string& name) {
  etcd_config cfg;
  cfg.name = name;
  cfg.client_port = free_port();
  cfg.peer_port = free_port();
  const std::vector<std::string> peers{"http://127.0.0.1:" + std::to_string(cfg.peer_port)};
  auto added = until_taken<member_add_result>(
      members, [&](auto done) { members.async_member_add(peers, true, done); }, "unhealthy cluster",
      [&](const member_list_result& list) -> std::optional<member_add_result> {
        for (const auto& m : list.members)
          if (m.peer_urls == peers) return member_add_result{list.header, m, list.members};
        return std::nullopt;
      });
  for (const auto& m : added.members) {
    std::string n = m.name;
    if (m.id == added.added.id) n = name;
    cfg.initial_cluster += (cfg.initial_cluster.empty() ? "" : ",") + n + "=" + m.peer_urls.at(0);
  }
  cfg.extra_flags = {"--initial-cluster-state=existing"};
  auto p = std::make_unique<etcd_process>(cfg, false);
  p->launch();
  until_taken<member_list_result>(
      members, [&](auto done) { members.async_member_promote(added.added.id, done); },
      "can only promote a learner member which is in sync with leader",
      [&](const member_list_result& list) -> std::optional<member_list_result> {
        for (const auto& m : list.members)
          if (m.id == added.added.id && !m.is_learner) return list;
        return std::nullopt;
      });
  p->wait_healthy(std::chrono::seconds(30));
  return p;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_client_given_one_member_follows_members_added_and_removed) {
  etcd_cluster cl(1);
  cl.wait_for_leader();
  asio::io_context ioc;
  std::mutex m;
  std::vector<std::string> changes, failures;
  int writes_cut = 0;  // writes cut by the reconfiguration (below)
  client_options o;
  o.endpoints = {cl.member(0).endpoint()};
  o.request_timeout = 5s;
  o.auto_sync_interval = 200ms;
  o.on_event = [&](const event& e) {
    std::lock_guard g(m);
    if (e.kind == event_kind::endpoints_changed) changes.push_back(e.detail);
    if (e.kind == event_kind::session_lost) failures.push_back("session lost: " + e.error.message());
  };
  client c(ioc, o);
  coetcd::cluster members(c);
  maintenance ops(c);

  // The caller: a session kept alive, and a write and a read after another, until told to stop.
  std::atomic<bool> stop{false};
  std::atomic<int> rounds{0};
  auto work = asio::make_work_guard(ioc);
  std::thread loop([&] { ioc.run(); });
  // A failed requirement below unwinds through here: the loop stops and joins first.
  struct joiner {
    std::thread& t;
    asio::io_context& ioc;
    ~joiner() {
      if (t.joinable()) {
        ioc.stop();
        t.join();
      }
    }
  } join_loop{loop, ioc};
  auto caller = asio::co_spawn(
      ioc,
      [&]() -> asio::awaitable<void> {
        auto s = co_await session::async_create(c, session_options{.ttl = 10s}, use_awaitable);
        for (int i = 0; !stop; ++i) {
          const auto value = std::to_string(i);
          auto [pec, put] = co_await c.async_put("sync/key", value, asio::as_tuple(use_awaitable));
          auto [gec, got] = co_await c.async_get("sync/key", asio::as_tuple(use_awaitable));
          std::lock_guard g(m);
          // Cut by the reconfiguration: the removed member stopping itself answers "raft:
          // stopped" or drops the connection (UNAVAILABLE); a proposal a follower forwarded while
          // the leader moved is dropped by raft without an answer, and the write times out
          // (request_timeout, 5 s here; Go's client waits for its deadline too). A clean-clone CI
          // run saw one such timeout on etcd 3.4; which step it came in was not logged. etcd 3.5's
          // leader, moving its leadership away, answers a proposal raft dropped with "raft
          // proposal dropped" (gRPC UNKNOWN, not retried, as in Go's client): never applied.
          if (grpc_status(pec) == 14 || grpc_status(pec) == 4 ||  // UNAVAILABLE, DEADLINE_EXCEEDED
              pec.message().find("stopped") != std::string::npos || pec == error::request_timeout ||
              pec.message().find("proposal dropped") != std::string::npos)
            ++writes_cut;
          else if (pec) failures.push_back("put " + value + ": " + pec.message());
          if (gec) failures.push_back("get " + value + ": " + gec.message());
          else if (!pec && (got.kvs.empty() || got.kvs[0].value != value)) failures.push_back("get " + value + ": stale");
          ++rounds;
        }
        co_await s.async_close(use_awaitable);
      },
      asio::use_future);

  // The operator's steps; whatever happens, the caller is stopped and the loop joined before
  // anything it uses goes away.
  std::unique_ptr<etcd_process> m1, m2;
  int before_removal = 0;
  std::exception_ptr failed;
  try {
    m1 = add_member(members, "m1");
    m2 = add_member(members, "m2");
    BOOST_TEST(eventually([&] { return c.endpoints().size() == 3u; }), "endpoints: " << c.endpoints().size());
    before_removal = rounds;
    // Leadership first moves off the member to remove, as an operator would.
    auto first = ops.async_status(cl.member(0).endpoint(), asio::use_future).get().header.member_id;
    auto second = ops.async_status(m1->endpoint(), asio::use_future).get().header.member_id;
    if (ops.async_status(cl.member(0).endpoint(), asio::use_future).get().leader == first)
      ops.async_move_leader(second, asio::use_future).get();
    auto left = until_taken<member_list_result>(
        members, [&](auto done) { members.async_member_remove(first, done); }, "unhealthy cluster",
        [&](const member_list_result& list) -> std::optional<member_list_result> {
          for (const auto& m : list.members)
            if (m.id == first) return std::nullopt;
          return list;
        });
    BOOST_TEST(left.members.size() == 2u);
    BOOST_TEST(eventually([&] { return c.endpoints().size() == 2u; }), "endpoints: " << c.endpoints().size());
    cl.member(0).stop();
    const int at_removal = rounds;
    BOOST_TEST(eventually([&] { return rounds > at_removal + 20; }));
  } catch (...) {
    failed = std::current_exception();
  }
  stop = true;
  if (caller.wait_for(20s) == std::future_status::ready) caller.get();
  else BOOST_ERROR("the caller did not stop");
  work.reset();
  loop.join();
  if (failed) std::rethrow_exception(failed);

  const auto now = c.endpoints();
  BOOST_TEST(now.size() == 2u);
  BOOST_TEST((std::find(now.begin(), now.end(), m1->client_url()) != now.end()));
  BOOST_TEST((std::find(now.begin(), now.end(), m2->client_url()) != now.end()));
  std::lock_guard g(m);
  BOOST_TEST(changes.size() >= 2u);
  for (const auto& f : failures) BOOST_ERROR(f);
  BOOST_TEST(before_removal > 0);
  BOOST_TEST(writes_cut <= 3);
  BOOST_TEST_MESSAGE(rounds << " rounds of a write and a read; endpoints changed " << changes.size() << " times; "
                            << writes_cut << " writes cut by the reconfiguration");
}

BOOST_AUTO_TEST_CASE(a_sync_on_demand_reports_an_unreachable_cluster_and_keeps_the_endpoints) {
  asio::io_context ioc;
  client_options o;
  o.endpoints = {"127.0.0.1:" + std::to_string(free_port())};
  o.request_timeout = 1s;
  client c(ioc, o);
  run_for(ioc, [&]() -> asio::awaitable<void> {
    auto [ec] = co_await c.async_sync_endpoints(asio::as_tuple(use_awaitable));
    BOOST_TEST(ec == error::endpoints_unreachable, ec.message());
    BOOST_TEST(c.endpoints() == o.endpoints);
    c.close();
    auto [closed] = co_await c.async_sync_endpoints(asio::as_tuple(use_awaitable));
    BOOST_TEST(closed == error::client_closed);
  }(), 20s);
  o.auto_sync_interval = -1ms;
  BOOST_CHECK_EXCEPTION(client(ioc, o), boost::system::system_error,
                        [](const auto& e) { return e.code() == error::invalid_argument; });
}

BOOST_AUTO_TEST_CASE(a_sync_on_demand_moves_to_the_members_urls) {
  etcd_cluster cl(3);
  cl.wait_for_leader();
  asio::io_context ioc;
  client c(ioc, client_options{.endpoints = {cl.member(1).endpoint()}});
  run_for(ioc, [&]() -> asio::awaitable<void> {
    co_await c.async_sync_endpoints(use_awaitable);
    auto now = c.endpoints();
    BOOST_TEST(now.size() == 3u);
    for (int i = 0; i < 3; ++i)
      BOOST_TEST((std::find(now.begin(), now.end(), cl.member(i).client_url()) != now.end()));
    // The same members again: nothing changes.
    co_await c.async_sync_endpoints(use_awaitable);
    BOOST_TEST(c.endpoints() == now);
    co_await c.async_put("k", "v", use_awaitable);
  }(), 20s);
  // An idle client that syncs keeps no work on the context: run() returns.
  asio::io_context idle;
  client_options o;
  o.endpoints = {cl.member(0).endpoint()};
  o.auto_sync_interval = 100ms;
  client quiet(idle, o);
  auto started = std::chrono::steady_clock::now();
  idle.run_for(5s);
  BOOST_TEST((std::chrono::steady_clock::now() - started < 1s));
}
