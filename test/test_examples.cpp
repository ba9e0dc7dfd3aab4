// The examples run against a real etcd and say what docs/using-coetcd.md says they do; http_counter runs
// as two processes taking concurrent increments without losing one.
#define BOOST_TEST_MODULE coetcd_examples
#include "support/child_process.hpp"
#include "support/fixture.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <cstdio>
#include <regex>
#include <set>
#include <thread>

using namespace coetcd;
using namespace coetcd::test;
using namespace std::chrono_literals;
namespace beast = boost::beast;
namespace http = beast::http;

BOOST_TEST_GLOBAL_FIXTURE(shared_etcd);

namespace {

command_result run_example(const std::string& name, const std::string& args = "") {
  return run_command("exec " COETCD_EXAMPLES_DIR "/" + name + " " + server().endpoint() + args);
}

// The IDs (hex) of the leases etcd has now.
std::set<std::string> lease_ids() {
  std::set<std::string> ids;
  auto out = etcdctl(server(), "lease list").output;
  const std::regex id("^[0-9a-f]+$", std::regex::multiline);
  for (std::sregex_iterator it(out.begin(), out.end(), id), end; it != end; ++it) ids.insert(it->str());
  return ids;
}

void expect_lines(const std::string& name, std::initializer_list<const char*> lines) {
  auto r = run_example(name);
  BOOST_TEST(r.exit_code == 0, name << ": " << r.output);
  for (auto line : lines) BOOST_TEST(r.output.find(line) != std::string::npos, name << " lacks '" << line << "': " << r.output);
}

// One HTTP request on a fresh connection; the body, or "" on failure.
std::string http_request(int port, http::verb verb, const std::string& target) {
  try {
    asio::io_context ioc;
    asio::ip::tcp::socket sock(ioc);
    sock.connect({asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)});
    http::request<http::empty_body> req(verb, target, 11);
    req.set(http::field::host, "127.0.0.1");
    http::write(sock, req);
    beast::flat_buffer buf;
    http::response<http::string_body> res;
    http::read(sock, buf, res);
    return res.result() == http::status::ok ? res.body() : "";
  } catch (const std::exception&) {
    return "";
  }
}

}  // namespace

// quickstart, the README's Quickstart: KV, a txn seen by a watch, and a write under a lock.
BOOST_AUTO_TEST_CASE(quickstart_prints_what_the_readme_promises) {
  etcdctl(server(), "del --prefix /config/");
  expect_lines("quickstart", {"/config/mode = fast\n", "\nsafe\n", "written under the lock: yes\n"});
  BOOST_TEST(etcdctl(server(), "get --print-value-only /config/mode").output == "locked\n");
  BOOST_TEST(etcdctl(server(), "get --prefix --keys-only /locks/config").output.empty());
  etcdctl(server(), "del --prefix /config/");
}

BOOST_AUTO_TEST_CASE(lock_examples_print_what_they_promise) {
  expect_lines("lock_basic", {"fenced write applied", "with_lock: job done"});
  // Each way a lock with a deadline ends is told as it happened: a lock that failed (bob's session
  // lost) is not reported as acquired.
  expect_lines("lock_timeout_try", {"bob's try_lock: lock is taken: another caller holds it",
                                    "bob's lock with a 1 s deadline, alice holding: timed out\n",
                                    "bob's lock with a 1 s deadline, alice released it: acquired printer/",
                                    "bob's lock with a 1 s deadline, his session lost: failed: session lost"});
  BOOST_TEST(etcdctl(server(), "get --prefix --keys-only printer/").output.empty());
  expect_lines("watchdog_long_job", {"max hold 10 s: finished", "max hold 1 s:          stopped: lock held longer",
                                     "revoked at 0.7 s: stopped: session lost"});
  expect_lines("leader_election", {"observer: leader is node-a\n", "observer: leader is node-a (draining)",
                                   "node-b leads", "observer: leader is node-b"});
  expect_lines("fenced_write", {"slow writes: applied", "fast writes: applied", "slow (stale) writes: rejected",
                                "/fenced/data = from fast"});
  BOOST_TEST(etcdctl(server(), "get --prefix --keys-only jobs/").output.find("jobs/") == std::string::npos);
}

// lock_server: nine requests on one mutex, the lease revoked during the middle three. The session
// is made again, so the last three write; the values written are 1..N, each once (no two
// requests held the lock together, a lost hold wrote nothing), and the counter ends at N.
BOOST_AUTO_TEST_CASE(lock_server_makes_a_new_session_after_a_loss) {
  auto r = run_example("lock_server");
  BOOST_TEST_REQUIRE(r.exit_code == 0, r.output);
  BOOST_TEST(r.output.find("session lost (") != std::string::npos, r.output);
  BOOST_TEST(r.output.find("making a new one") < r.output.find("request 7: "), r.output);
  for (int id : {1, 2, 3, 7, 8, 9})
    BOOST_TEST(r.output.find("request " + std::to_string(id) + ": wrote ") != std::string::npos, id << ": " << r.output);
  std::multiset<long> written;
  const std::regex wrote("request [0-9]: wrote ([0-9]+)\n");
  for (std::sregex_iterator it(r.output.begin(), r.output.end(), wrote), end; it != end; ++it) written.insert(std::stol((*it)[1]));
  BOOST_TEST(written.size() >= 6u, r.output);
  long expected = 0;
  for (long v : written) BOOST_TEST(v == ++expected, "values written are not 1..N once each: " << r.output);
  BOOST_TEST(r.output.find("counter = " + std::to_string(written.size()) + "\n") != std::string::npos, r.output);
  BOOST_TEST(etcdctl(server(), "get --print-value-only lock_server/counter").output == std::to_string(written.size()) + "\n");
  BOOST_TEST(etcdctl(server(), "get --prefix --keys-only lock_server/orders").output.empty());
  etcdctl(server(), "del lock_server/counter");
}

BOOST_AUTO_TEST_CASE(rw_config_readers_share_and_the_writer_goes_in_turn) {
  auto r = run_example("rw_config");
  BOOST_TEST_REQUIRE(r.exit_code == 0, r.output);
  // Readers 1-3 hold together before the writer, reader 4 queued behind it.
  for (auto line : {"reader 1 reads v1", "reader 2 reads v1", "reader 3 reads v1", "writer: update applied",
                    "reader 4 reads v2"})
    BOOST_TEST(r.output.find(line) != std::string::npos, "lacks '" << line << "': " << r.output);
  BOOST_TEST(r.output.find("writer: update applied") < r.output.find("reader 4"), r.output);
  BOOST_TEST(etcdctl(server(), "get --prefix --keys-only config/").output.find("config/") == std::string::npos);
}

BOOST_AUTO_TEST_CASE(job_slots_never_passes_two_and_keeps_arrival_order) {
  auto r = run_example("job_slots");
  BOOST_TEST_REQUIRE(r.exit_code == 0, r.output);
  // The release build takes both slots before small 3, which came after it.
  const char* lines[] = {"small 1 runs (1 of 2 slots in use)", "small 2 runs (2 of 2 slots in use)",
                         "release runs (2 of 2 slots in use)", "small 3 runs (1 of 2 slots in use)"};
  std::size_t at = 0;
  for (auto line : lines) {
    auto found = r.output.find(line, at);
    BOOST_TEST_REQUIRE(found != std::string::npos, "lacks '" << line << "' in order: " << r.output);
    at = found;
  }
  BOOST_TEST(etcdctl(server(), "get --prefix --keys-only build-slots/").output.find("build-slots/") == std::string::npos);
}

// Two processes move money between the same two accounts, locked by a multi_lock with the names in
// opposite orders: both finish (no deadlock) and the balances add up (no lost update).
BOOST_AUTO_TEST_CASE(two_transfers_in_opposite_orders_finish_and_lose_nothing) {
  etcdctl(server(), "put /bank/alice 1000");
  etcdctl(server(), "put /bank/bob 1000");
  child_process a("exec " COETCD_EXAMPLES_DIR "/transfer " + server().endpoint() + " alice bob 40");
  child_process b("exec " COETCD_EXAMPLES_DIR "/transfer " + server().endpoint() + " bob alice 30");
  BOOST_TEST_REQUIRE(a.wait(30s).value_or(-1) == 0, a.output());
  BOOST_TEST_REQUIRE(b.wait(30s).value_or(-1) == 0, b.output());
  BOOST_TEST(a.output().find("moved 40 from alice to bob") != std::string::npos, a.output());
  BOOST_TEST(b.output().find("moved 30 from bob to alice") != std::string::npos, b.output());
  BOOST_TEST(etcdctl(server(), "get --print-value-only /bank/alice").output == "990\n");
  BOOST_TEST(etcdctl(server(), "get --print-value-only /bank/bob").output == "1010\n");
  BOOST_TEST(etcdctl(server(), "get --prefix --keys-only bank-lock/").output.find("bank-lock/") == std::string::npos);
  etcdctl(server(), "del --prefix /bank/");
}

// bank_stm: 50 coroutines move money with stm; the total stays 1000, and the commit groups make
// the txns fewer than the transfers.
BOOST_AUTO_TEST_CASE(bank_stm_keeps_the_total_in_fewer_txns_than_transfers) {
  auto r = run_example("bank_stm");
  BOOST_TEST(r.exit_code == 0, r.output);
  BOOST_TEST(r.output.find("before: total 1000 in 5 accounts") != std::string::npos, r.output);
  BOOST_TEST(r.output.find("after: total 1000 in 5 accounts") != std::string::npos, r.output);
  int moved = 0, refused = 0, txns = 0;
  auto at = r.output.find(" transfers made, ");
  BOOST_TEST_REQUIRE(at != std::string::npos, r.output);
  auto line_start = r.output.rfind('\n', at) + 1;
  BOOST_TEST_REQUIRE(std::sscanf(r.output.c_str() + line_start, "%d transfers made, %d refused for want of money, in %d txns",
                                 &moved, &refused, &txns) == 3, r.output);
  BOOST_TEST(moved + refused == 400);  // 50 coroutines, 10 each, 2 of them from an account to itself
  BOOST_TEST(txns < moved + refused, "no fewer txns than transfers: " << r.output);
}

// config_cache: lists, then sees a put and a delete made by another client, and reads locally.
BOOST_AUTO_TEST_CASE(config_cache_lists_follows_and_reads_locally) {
  expect_lines("config_cache", {"cached /config-demo/mode = normal", "cached /config-demo/rate-limit = 100",
                                "change: put /config-demo/rate-limit = 200", "change: delete /config-demo/mode",
                                "rate-limit is now 200, mode is gone (read locally, no request)"});
}

BOOST_AUTO_TEST_CASE(two_http_counters_lose_no_increment) {
  // Each mode with two servers of that mode: a coetcd::counter (one optimistic txn per
  // increment), then a mutex around a read and a fenced write.
  for (std::string mode : {"counter", "lock"}) {
    BOOST_TEST_CONTEXT(mode) {
      etcdctl(server(), "del /http_counter/value");
      int ports[2] = {free_port(), free_port()};
      auto start = [&](int port) {  // TTL 6 s: a lost session is noticed within about 2 s
        return "exec " COETCD_EXAMPLES_DIR "/http_counter " + server().endpoint() + " " + std::to_string(port) + " " + mode + " 6";
      };
      const auto leases_before = lease_ids();
      child_process a(start(ports[0]));
      child_process b(start(ports[1]));
      BOOST_TEST_REQUIRE(a.wait_for_output("listening", 10s), a.output());
      BOOST_TEST_REQUIRE(b.wait_for_output("listening", 10s), b.output());
      std::vector<std::string> servers_leases;
      for (auto& id : lease_ids())
        if (!leases_before.count(id)) servers_leases.push_back(id);

      // 4 clients, each 10 increments, alternating between the two servers.
      std::vector<std::string> answers(40);
      std::vector<std::thread> clients;
      for (int t = 0; t < 4; ++t)
        clients.emplace_back([&, t] {
          for (int i = 0; i < 10; ++i)
            answers[t * 10 + i] = http_request(ports[(t + i) % 2], http::verb::post, "/increment");
        });
      for (auto& t : clients) t.join();
      std::set<std::string> distinct(answers.begin(), answers.end());
      BOOST_TEST(distinct.size() == 40u);   // every increment saw its own value
      BOOST_TEST(!distinct.count(""));      // and none failed
      BOOST_TEST(http_request(ports[0], http::verb::get, "/value") == "40\n");
      BOOST_TEST(http_request(ports[1], http::verb::get, "/value") == "40\n");
      if (mode == "lock") {
        // Both servers' leases revoked: each makes a new session and serves increments again
        // (the example's first version failed every request after a loss). The requests that
        // failed meanwhile wrote nothing, so the next values are 41 and 42.
        BOOST_TEST_REQUIRE(servers_leases.size() == 2u);
        for (auto& id : servers_leases) BOOST_TEST(etcdctl(server(), "lease revoke " + id).exit_code == 0);
        const char* next[2] = {"41\n", "42\n"};
        for (int i = 0; i < 2; ++i) {
          std::string got;
          for (auto until = std::chrono::steady_clock::now() + 15s; got.empty() && std::chrono::steady_clock::now() < until;) {
            got = http_request(ports[i], http::verb::post, "/increment");
            if (got.empty()) std::this_thread::sleep_for(100ms);
          }
          BOOST_TEST(got == next[i], "server " << i << " after the loss: '" << got << "'");
        }
        BOOST_TEST(a.output().find("session lost (") != std::string::npos, a.output());
        BOOST_TEST(b.output().find("session lost (") != std::string::npos, b.output());
        BOOST_TEST(http_request(ports[0], http::verb::get, "/value") == "42\n");
      }
      a.signal(SIGTERM);
      b.signal(SIGTERM);
      BOOST_TEST(a.wait(10s).value_or(-1) == 0, a.output());
      BOOST_TEST(b.wait(10s).value_or(-1) == 0, b.output());
      BOOST_TEST(etcdctl(server(), "get --prefix --keys-only /http_counter/lock").output.empty());
      etcdctl(server(), "del /http_counter/value");
    }
  }
}

#ifndef COETCD_HAVE_METRICS_HTTP
constexpr bool have_metrics_http = false;
#else
constexpr bool have_metrics_http = true;
#endif

// metrics_http serves client::stats() in Prometheus' text format with prometheus-cpp and logs the
// client's events. Skipped (and said so in the log) where prometheus-cpp-dev is missing.
BOOST_AUTO_TEST_CASE(metrics_http_serves_prometheus_text_and_logs_events,
                     *boost::unit_test::enable_if<have_metrics_http>() *
                         boost::unit_test::description("needs Debian's prometheus-cpp-dev")) {
  int port = free_port();
  child_process m("exec " COETCD_EXAMPLES_DIR "/metrics_http " + server().endpoint() + " " + std::to_string(port));
  BOOST_TEST_REQUIRE(m.wait_for_output("listening", 10s), m.output());
  std::this_thread::sleep_for(500ms);  // the workers take the lock a few dozen times
  auto text = http_request(port, http::verb::get, "/metrics");
  BOOST_TEST(text.find("# TYPE coetcd_lock_wait_seconds histogram\n") != std::string::npos, text);
  BOOST_TEST(text.find("coetcd_lock_wait_seconds_bucket{name=\"metrics_http/jobs\",le=\"+Inf\"} ") != std::string::npos, text);
  BOOST_TEST(text.find("coetcd_rpcs_sent_total{method=\"LeaseGrant\"} 1\n") != std::string::npos, text);
  BOOST_TEST(text.find("coetcd_leases_kept 1\n") != std::string::npos, text);
  std::smatch acquired, handoffs;
  BOOST_TEST_REQUIRE(std::regex_search(text, acquired, std::regex("coetcd_lock_acquired_total\\{name=\"metrics_http/jobs\"\\} ([0-9]+)\n")), text);
  BOOST_TEST(std::stoll(acquired[1]) > 4);
  BOOST_TEST_REQUIRE(std::regex_search(text, handoffs, std::regex("coetcd_lock_handoffs_total\\{name=\"metrics_http/jobs\"\\} ([0-9]+)\n")), text);
  BOOST_TEST(std::stoll(handoffs[1]) > 0);  // four workers of one session hand the lock over locally
  BOOST_TEST(http_request(port, http::verb::get, "/nothing").empty());  // 404
  m.signal(SIGTERM);
  BOOST_TEST(m.wait(10s).value_or(-1) == 0, m.output());
  BOOST_TEST(m.output().find("event: endpoint_connected name=\"127.0.0.1:") != std::string::npos, m.output());
  BOOST_TEST(m.output().find("event: lock_acquired name=\"metrics_http/jobs\"") != std::string::npos, m.output());
  BOOST_TEST(etcdctl(server(), "get --prefix --keys-only metrics_http/").output.empty());
}

// span_log: each request's lock wait, its read and its fenced write carry the request's id, and
// the lock wait's acquire txn names the wait as its parent.
BOOST_AUTO_TEST_CASE(span_log_writes_one_trace_per_request) {
  auto r = run_example("span_log");
  BOOST_TEST_REQUIRE(r.exit_code == 0, r.output);
  for (std::string id : {"req-1", "req-2", "req-3"}) {
    std::smatch lock;
    const std::regex lock_line("\\{\"request\":\"" + id + "\",\"id\":([0-9]+),\"parent\":0,\"name\":\"lock\",\"key\":\"span_log/orders\"");
    BOOST_TEST_REQUIRE(std::regex_search(r.output, lock, lock_line), r.output);
    const std::string child = "{\"request\":\"" + id + "\",\"id\":";
    const std::string parent = ",\"parent\":" + lock[1].str() + ",\"name\":\"Txn\"";
    BOOST_TEST(std::regex_search(r.output, std::regex(std::regex_replace(child, std::regex("[{}]"), "\\$&") + "[0-9]+" + parent)), r.output);
    BOOST_TEST(r.output.find("{\"request\":\"" + id + "\",\"id\":") != std::string::npos);
    BOOST_TEST(std::regex_search(r.output, std::regex("\"request\":\"" + id + "\",\"id\":[0-9]+,\"parent\":0,\"name\":\"Range\",\"key\":\"span_log/count\",\"attempt\":1,\"member\":\"127\\.0\\.0\\.1:[0-9]+\"")), r.output);
  }
  BOOST_TEST(etcdctl(server(), "get --prefix --keys-only span_log/").output.empty());
}

// self_healing_leader: a revoked leader is told, the other replica leads, and the first leads
// again once the second stops.
BOOST_AUTO_TEST_CASE(self_healing_leader_comes_back) {
  expect_lines("self_healing_leader", {"replica-a leads (term", "replica-a lost its term: ", "replica-b leads (term",
                                       "replica-a campaigns again behind replica-b", "replica-a leads again: 2 terms"});
  BOOST_TEST(etcdctl(server(), "get --prefix --keys-only services/scheduler/").output.find("services/") == std::string::npos);
}

// service_registry: two endpoints listed; a revoked one registered again; a stopped one gone.
BOOST_AUTO_TEST_CASE(service_registry_keeps_and_drops_endpoints) {
  expect_lines("service_registry", {"endpoints: services/api/i1=10.0.0.1:8080 services/api/i2=10.0.0.2:8080\n",
                                    "i1 registered again on a new lease", "endpoints: services/api/i1=10.0.0.1:8080\n"});
}

// work_queue: three workers in together, the urgent jobs by priority (one each), every job once.
BOOST_AUTO_TEST_CASE(work_queue_gives_each_job_once) {
  auto r = run_example("work_queue");
  BOOST_TEST(r.exit_code == 0, r.output);
  for (auto job : {"took urgent disk-full", "took urgent cert-expiry", "took urgent rotate-logs"})
    BOOST_TEST(r.output.find(job) != std::string::npos, r.output);
  BOOST_TEST(r.output.find("30 jobs done, each once: yes") != std::string::npos, r.output);
  BOOST_TEST(etcdctl(server(), "get --prefix --keys-only work/").output.find("work/") == std::string::npos);
}
