// The `coetcd` command-line tool against a real etcd: key commands, lock with a command (its
// environment and exit code), exclusion against `etcdctl lock` both ways, --try/--timeout, loss
// of the lock while the command runs, elect/listen, and clear errors for bad input.
#define BOOST_TEST_MODULE coetcd_cli
#include "support/child_process.hpp"
#include "support/fixture.hpp"

#include <regex>

using namespace coetcd;
using namespace coetcd::test;
using namespace std::chrono_literals;

BOOST_TEST_GLOBAL_FIXTURE(shared_etcd);

namespace {

// The tool with COETCD_ENDPOINTS pointing at the test server (so the env variable path is used);
// exec'd, so signals sent to a background child reach the tool itself.
std::string cli(const std::string& args) {
  return "exec env COETCD_ENDPOINTS=" + server().endpoint() + " " COETCD_CLI_PATH " " + args;
}

// Counted by etcdctl, not by the tool under test.
std::int64_t keys_under(const std::string& prefix) {
  auto r = etcdctl(server(), "get --prefix --keys-only " + prefix);
  if (r.exit_code != 0) return -1;
  std::int64_t n = 0;
  std::istringstream lines(r.output);
  for (std::string line; std::getline(lines, line);)
    if (!line.empty()) ++n;
  return n;
}

}  // namespace

BOOST_AUTO_TEST_CASE(put_get_del_round_trip) {
  auto put = run_command(cli("put cli/a 'hello world'"));
  BOOST_TEST(put.exit_code == 0, put.output);
  BOOST_TEST(put.output == "OK\n");
  run_command(cli("put cli/b two"));
  auto get = run_command(cli("get cli/ --prefix"));
  BOOST_TEST(get.exit_code == 0);
  BOOST_TEST(get.output == "cli/a\nhello world\ncli/b\ntwo\n");
  auto one = run_command(cli("get cli/b"));
  BOOST_TEST(one.output == "cli/b\ntwo\n");
  auto del = run_command(cli("del cli/ --prefix"));
  BOOST_TEST(del.output == "2\n");
  BOOST_TEST(keys_under("cli/") == 0);
}

BOOST_AUTO_TEST_CASE(flags_work_after_the_command_and_from_the_environment) {
  // --endpoints after the subcommand overrides COETCD_ENDPOINTS.
  auto r = run_command("COETCD_ENDPOINTS=127.0.0.1:1 " COETCD_CLI_PATH " put cli-flags/x 1 --endpoints " +
                       server().endpoint());
  BOOST_TEST(r.exit_code == 0, r.output);
  auto bad = run_command("COETCD_ENDPOINTS=127.0.0.1:1 COETCD_DIAL_TIMEOUT=1 " COETCD_CLI_PATH " get cli-flags/x");
  BOOST_TEST(bad.exit_code == 1);
  BOOST_TEST(bad.output.find("no etcd endpoint could be reached") != std::string::npos, bad.output);
  run_command(cli("del cli-flags/x"));
}

BOOST_AUTO_TEST_CASE(lock_runs_the_command_with_key_and_fencing_token_and_passes_its_exit_code) {
  auto r = run_command(cli("lock cli-run -- sh -c 'echo \"key=$ETCD_LOCK_KEY rev=$ETCD_LOCK_REV\"; exit 7'"));
  BOOST_TEST(r.exit_code == 7, r.output);
  std::smatch m;
  static const std::regex shape("^(cli-run/[0-9a-f]+)\nkey=(cli-run/[0-9a-f]+) rev=([0-9]+)\n$");
  BOOST_TEST_REQUIRE(std::regex_match(r.output, m, shape), r.output);
  BOOST_TEST(m[1] == m[2]);  // the printed key is the one in the environment
  BOOST_TEST(std::stoll(m[3]) > 0);
  BOOST_TEST(keys_under("cli-run/") == 0);  // released after the command

  auto ok = run_command(cli("lock cli-run -- true"));
  BOOST_TEST(ok.exit_code == 0, ok.output);
  auto missing = run_command(cli("lock cli-run -- /nonexistent/program"));
  BOOST_TEST(missing.exit_code == 127, missing.output);
  BOOST_TEST(missing.output.find("cannot run '/nonexistent/program'") != std::string::npos, missing.output);
  BOOST_TEST(keys_under("cli-run/") == 0);
}

BOOST_AUTO_TEST_CASE(coetcd_lock_and_etcdctl_lock_exclude_each_other) {
  // etcdctl holds: coetcd cannot take it (--try exits 3, --timeout exits 4), then can once released.
  child_process holder("ETCDCTL_API=3 " + etcdctl_binary() + " --endpoints=" + server().endpoint() + " lock cli-x");
  BOOST_TEST_REQUIRE(holder.wait_for_output("cli-x/", 10s), holder.output());
  auto tried = run_command(cli("lock --try cli-x -- true"));
  BOOST_TEST(tried.exit_code == 3, tried.output);
  BOOST_TEST(tried.output.find("held by another session") != std::string::npos, tried.output);
  auto t0 = std::chrono::steady_clock::now();
  auto waited = run_command(cli("lock cli-x --timeout 1 -- true"));
  BOOST_TEST(waited.exit_code == 4, waited.output);
  BOOST_TEST((std::chrono::steady_clock::now() - t0 < 5s));
  BOOST_TEST(keys_under("cli-x/") == 1);  // only etcdctl's key: ours were removed
  holder.signal(SIGINT);
  BOOST_TEST_REQUIRE(holder.wait(10s).has_value());
  auto after = run_command(cli("lock cli-x -- true"));
  BOOST_TEST(after.exit_code == 0, after.output);

  // coetcd holds: etcdctl waits (and is stopped by `timeout`) until coetcd releases.
  child_process ours(cli("lock cli-x"));
  BOOST_TEST_REQUIRE(ours.wait_for_output("cli-x/", 10s), ours.output());
  auto blocked = run_command("timeout 2 env ETCDCTL_API=3 " + etcdctl_binary() + " --endpoints=" + server().endpoint() +
                             " lock cli-x echo got-it");
  BOOST_TEST(blocked.exit_code == 124, blocked.output);
  BOOST_TEST(blocked.output.find("got-it") == std::string::npos);
  ours.signal(SIGTERM);
  auto code = ours.wait(10s);
  BOOST_TEST_REQUIRE(code.has_value());
  BOOST_TEST(*code == 0, ours.output());  // SIGTERM: release and exit cleanly
  auto now_free = run_command("timeout 10 env ETCDCTL_API=3 " + etcdctl_binary() + " --endpoints=" + server().endpoint() +
                              " lock cli-x echo got-it");
  BOOST_TEST(now_free.output.find("got-it") != std::string::npos, now_free.output);
  BOOST_TEST(keys_under("cli-x/") == 0);
}

// `lock NAME CMD` and a failing command, side by side (docs/etcd-versions.md): coetcd passes
// the command's exit code on, as etcdctl 3.5 does; etcdctl 3.4 exits 1 whatever the code was.
// Both release the lock.
BOOST_AUTO_TEST_CASE(lock_exit_codes_beside_etcdctl_of_this_version) {
  auto ours = run_command(cli("lock cli-exit -- sh -c 'exit 3'"));
  BOOST_TEST(ours.exit_code == 3, ours.output);
  auto theirs = run_command("ETCDCTL_API=3 " + etcdctl_binary() + " --endpoints=" + server().endpoint() +
                            " lock cli-exit -- sh -c 'exit 3'");
  BOOST_TEST_MESSAGE("etcdctl " << etcd_version() / 100 << "." << etcd_version() % 100 << " exits "
                                << theirs.exit_code << ": " << theirs.output);
  BOOST_TEST(theirs.exit_code == (etcd_version() >= 305 ? 3 : 1), theirs.output);
  BOOST_TEST(keys_under("cli-exit/") == 0);
}

// rlock holders share, wlock waits for them (--try exits 3, --timeout 4) and runs once they are
// gone; rlock --try is refused while a wlock holds.
BOOST_AUTO_TEST_CASE(rlock_holders_share_and_wlock_waits_for_them) {
  child_process r1(cli("rlock cli-rw"));
  BOOST_TEST_REQUIRE(r1.wait_for_output("cli-rw/read/", 10s), r1.output());
  auto r2 = run_command(cli("rlock --try cli-rw -- sh -c 'echo \"key=$ETCD_LOCK_KEY rev=$ETCD_LOCK_REV\"; exit 6'"));
  BOOST_TEST(r2.exit_code == 6, r2.output);  // held together with r1; the command's exit code
  BOOST_TEST(r2.output.find("key=cli-rw/read/") != std::string::npos, r2.output);
  auto tried = run_command(cli("wlock --try cli-rw -- true"));
  BOOST_TEST(tried.exit_code == 3, tried.output);
  BOOST_TEST(tried.output.find("wlock: 'cli-rw' is held by another session") != std::string::npos, tried.output);
  auto waited = run_command(cli("wlock --timeout 1 cli-rw -- true"));
  BOOST_TEST(waited.exit_code == 4, waited.output);
  BOOST_TEST(keys_under("cli-rw/") == 1);  // only r1's key
  child_process w(cli("wlock cli-rw -- sh -c 'echo writing $ETCD_LOCK_KEY; sleep 1'"));
  for (int i = 0; i < 500 && keys_under("cli-rw/write/") == 0; ++i) std::this_thread::sleep_for(20ms);
  BOOST_TEST_REQUIRE(keys_under("cli-rw/write/") == 1, w.output());
  std::this_thread::sleep_for(300ms);
  BOOST_TEST(w.output().find("writing") == std::string::npos, w.output());  // still waiting for r1
  child_process r3(cli("rlock cli-rw"));  // behind the writer: waits too
  for (int i = 0; i < 500 && keys_under("cli-rw/") < 3; ++i) std::this_thread::sleep_for(20ms);
  auto status = run_command(cli("lock --status cli-rw"));
  BOOST_TEST(status.exit_code == 0, status.output);
  BOOST_TEST(status.output.find("warning") == std::string::npos, status.output);  // not nested names
  static const std::regex rw_shape("holder    cli-rw/read/[0-9a-f]+ .*\n"
                                   "waiter 1  cli-rw/write/[0-9a-f]+ .*\n"
                                   "waiter 2  cli-rw/read/[0-9a-f]+ ");
  BOOST_TEST(std::regex_search(status.output, rw_shape), status.output);
  auto json = run_command(cli("lock --status --json cli-rw"));
  BOOST_TEST(json.output.find("\"read_write\":true,\"permits\":0,\"permits_in_use\":0,\"also_holding\":[]") !=
                 std::string::npos,
             json.output);
  r1.signal(SIGTERM);
  BOOST_TEST_REQUIRE(r1.wait(10s).has_value());
  BOOST_TEST_REQUIRE(w.wait_for_output("writing cli-rw/write/", 10s), w.output());
  auto blocked = run_command(cli("rlock --try cli-rw -- true"));
  BOOST_TEST(blocked.exit_code == 3, blocked.output);
  auto code = w.wait(10s);
  BOOST_TEST_REQUIRE(code.has_value());
  BOOST_TEST(*code == 0, w.output());
  BOOST_TEST_REQUIRE(r3.wait_for_output("cli-rw/read/", 10s), r3.output());  // its turn after the writer
  r3.signal(SIGTERM);
  BOOST_TEST(r3.wait(10s).value_or(-1) == 0);
  BOOST_TEST(keys_under("cli-rw/") == 0);
}

// sem: two holders of 2 permits run together, a third waits (--try exits 3, --timeout 4) and runs
// once a permit is free; holders that disagree on PERMITS are told so.
BOOST_AUTO_TEST_CASE(sem_holders_share_the_permits_and_a_third_waits) {
  child_process h1(cli("sem cli-sem 2"));
  BOOST_TEST_REQUIRE(h1.wait_for_output("cli-sem 1/2", 10s), h1.output());
  auto h2 = run_command(cli("sem --try cli-sem 2 -- sh -c 'echo \"key=$ETCD_LOCK_KEY\"; exit 6'"));
  BOOST_TEST(h2.exit_code == 6, h2.output);  // held together with h1; the command's exit code
  BOOST_TEST(h2.output.find("key=cli-sem 1/2") != std::string::npos, h2.output);
  child_process h3(cli("sem cli-sem 2 -- sh -c 'echo holding; sleep 30'"));
  BOOST_TEST_REQUIRE(h3.wait_for_output("holding", 10s), h3.output());
  auto tried = run_command(cli("sem --try cli-sem 2 -- true"));
  BOOST_TEST(tried.exit_code == 3, tried.output);
  BOOST_TEST(tried.output.find("no permits free") != std::string::npos, tried.output);
  auto waited = run_command(cli("sem --timeout 1 cli-sem 2 -- true"));
  BOOST_TEST(waited.exit_code == 4, waited.output);
  auto both = run_command(cli("sem --try --count 2 cli-sem 2 -- true"));
  BOOST_TEST(both.exit_code == 3, both.output);
  auto other = run_command(cli("sem cli-sem 3 -- true"));
  BOOST_TEST(other.exit_code == 1, other.output);
  BOOST_TEST(other.output.find("permits differ") != std::string::npos, other.output);
  BOOST_TEST(keys_under("cli-sem/") == 2);  // h1's and h3's
  child_process w(cli("sem cli-sem 2 -- sh -c 'echo third runs'"));
  std::this_thread::sleep_for(300ms);
  BOOST_TEST(w.output().find("third runs") == std::string::npos, w.output());
  // lock --status knows the semaphore's layout: two holders of one permit each, one waiter.
  for (int i = 0; i < 500 && keys_under("cli-sem/") < 3; ++i) std::this_thread::sleep_for(20ms);
  auto status = run_command(cli("lock --status cli-sem"));
  BOOST_TEST(status.exit_code == 0, status.output);
  static const std::regex sem_shape(
      "semaphore 2 of 2 permits in use\n"
      "holder    cli-sem/[0-9a-f]+_[0-9a-f]+ .*value \"1/2\"\n"
      "holder    cli-sem/[0-9a-f]+_[0-9a-f]+ .*value \"1/2\"  \\(holding too\\)\n"
      "waiter 1  cli-sem/[0-9a-f]+_[0-9a-f]+ .*value \"1/2\"\n$");
  BOOST_TEST(std::regex_search(status.output, sem_shape), status.output);
  auto json = run_command(cli("lock --status --json cli-sem"));
  BOOST_TEST(json.output.find("\"permits\":2,\"permits_in_use\":2,") != std::string::npos, json.output);
  h1.signal(SIGTERM);
  BOOST_TEST(h1.wait(10s).value_or(-1) == 0);
  BOOST_TEST_REQUIRE(w.wait_for_output("third runs", 10s), w.output());
  BOOST_TEST(w.wait(10s).value_or(-1) == 0);
  h3.signal(SIGTERM);
  BOOST_TEST(h3.wait(10s).has_value());
  for (int i = 0; i < 250 && keys_under("cli-sem/") > 0; ++i) std::this_thread::sleep_for(20ms);
  BOOST_TEST(keys_under("cli-sem/") == 0, etcdctl(server(), "get --prefix cli-sem/").output << h3.output());
}

BOOST_AUTO_TEST_CASE(losing_the_lock_stops_the_command_and_exits_5) {
  child_process holder(cli("lock --ttl 3 cli-lost -- sh -c 'trap \"echo got-term; exit 0\" TERM; sleep 30 & wait'"));
  BOOST_TEST_REQUIRE(holder.wait_for_output("cli-lost/", 10s), holder.output());
  std::smatch m;
  auto out = holder.output();
  static const std::regex key("cli-lost/([0-9a-f]+)");
  BOOST_TEST_REQUIRE(std::regex_search(out, m, key));
  auto r = etcdctl(server(), "lease revoke " + m[1].str());
  BOOST_TEST_REQUIRE(r.exit_code == 0, r.output);
  auto code = holder.wait(15s);
  BOOST_TEST_REQUIRE(code.has_value(), holder.output());
  BOOST_TEST(*code == 5, holder.output());
  BOOST_TEST(holder.output().find("lost 'cli-lost/") != std::string::npos, holder.output());
  BOOST_TEST(holder.output().find("got-term") != std::string::npos, holder.output());
}

BOOST_AUTO_TEST_CASE(elect_leads_until_terminated_and_listen_sees_it) {
  child_process listener(cli("elect --listen cli-e"));
  child_process leader(cli("elect cli-e first"));
  BOOST_TEST_REQUIRE(leader.wait_for_output("first", 10s), leader.output());
  BOOST_TEST(std::regex_search(leader.output(), std::regex("^cli-e/[0-9a-f]+\nfirst\n")), leader.output());
  BOOST_TEST_REQUIRE(listener.wait_for_output("first", 10s), listener.output());
  child_process second(cli("elect cli-e second"));
  std::this_thread::sleep_for(500ms);
  BOOST_TEST(second.output().empty());  // waits behind the leader
  leader.signal(SIGTERM);
  BOOST_TEST(leader.wait(10s).value_or(-1) == 0, leader.output());
  BOOST_TEST_REQUIRE(second.wait_for_output("second", 10s), second.output());
  BOOST_TEST(listener.wait_for_output("second", 10s), listener.output());
  second.signal(SIGTERM);
  BOOST_TEST(second.wait(10s).value_or(-1) == 0);
  listener.signal(SIGTERM);
  BOOST_TEST(listener.wait(10s).value_or(-1) == 0);
  BOOST_TEST(keys_under("cli-e/") == 0);
}

BOOST_AUTO_TEST_CASE(watch_prints_events_until_terminated) {
  child_process w(cli("watch cli-w/ --prefix"));
  std::this_thread::sleep_for(500ms);  // let the watch start
  run_command(cli("put cli-w/k v1"));
  run_command(cli("del cli-w/k"));
  BOOST_TEST_REQUIRE(w.wait_for_output("DELETE\ncli-w/k\n", 10s), w.output());
  BOOST_TEST(w.output() == "PUT\ncli-w/k\nv1\nDELETE\ncli-w/k\n");
  w.signal(SIGTERM);
  BOOST_TEST(w.wait(10s).value_or(-1) == 0);
}

BOOST_AUTO_TEST_CASE(bad_command_lines_are_usage_errors) {
  struct bad_case {
    const char* args;
    const char* says;
  };
  for (auto c : {bad_case{"", "Usage"}, bad_case{"frobnicate x", "unknown command 'frobnicate'"},
                 bad_case{"lock", "usage: coetcd lock NAME"}, bad_case{"put onlykey", "usage: coetcd put KEY VALUE"},
                 bad_case{"lock n --try --timeout 1", "--try and --timeout"}, bad_case{"lock n --ttl 0", "--ttl"},
                 bad_case{"get k --cert c.pem", "--cert and --key"}, bad_case{"get k --nosuchflag", "nosuchflag"},
                 bad_case{"get k -- echo", "only lock, rlock, wlock and sem run a command"},
                 bad_case{"sem n", "usage: coetcd sem NAME PERMITS"},
                 bad_case{"sem n 0", "PERMITS must be at least 1"},
                 bad_case{"sem n many", "PERMITS must be a whole number"},
                 bad_case{"sem n 2 --count 3", "--count must be between 1 and PERMITS"}}) {
    auto r = run_command(cli(c.args));
    BOOST_TEST(r.exit_code == 2, c.args << ": " << r.output);
    BOOST_TEST(r.output.find(c.says) != std::string::npos, c.args << ": " << r.output);
  }
  auto help = run_command(COETCD_CLI_PATH " --help");
  BOOST_TEST(help.exit_code == 0);
  BOOST_TEST(help.output.find("Exit codes:") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(bad_tls_files_and_empty_names_are_clear_errors) {
  auto tls = run_command(cli("get k --cacert /nonexistent/ca.pem"));
  BOOST_TEST(tls.exit_code == 1, tls.output);
  BOOST_TEST(tls.output.find("/nonexistent/ca.pem") != std::string::npos, tls.output);
  auto empty = run_command(cli("lock '' -- true"));
  BOOST_TEST(empty.exit_code == 1, empty.output);
  BOOST_TEST(empty.output.find("empty") != std::string::npos, empty.output);
}

// lock --status on a queue of coetcd (holder), etcdctl (waiter) and a lock on a longer name under
// it: text in queue order with leases, TTLs and the fencing token, a warning for the nested name,
// the same as JSON, and exit 0 on a name nobody holds.
BOOST_AUTO_TEST_CASE(lock_status_prints_holder_and_waiters_as_text_and_json) {
  auto nobody = run_command(cli("lock --status cli-st/none"));
  BOOST_TEST(nobody.exit_code == 0, nobody.output);
  BOOST_TEST(nobody.output.find("'cli-st/none' is not held") == 0, nobody.output);

  child_process holder(cli("lock --ttl 30 cli-st"));
  BOOST_TEST_REQUIRE(holder.wait_for_output("cli-st/", 10s), holder.output());
  const std::string holder_key = holder.output().substr(0, holder.output().find('\n'));
  child_process waiter("ETCDCTL_API=3 " + etcdctl_binary() + " --endpoints=" + server().client_url() + " lock cli-st");
  for (int i = 0; i < 200 && keys_under("cli-st/") < 2; ++i) std::this_thread::sleep_for(20ms);
  child_process nested(cli("lock cli-st/sub"));
  BOOST_TEST_REQUIRE(nested.wait_for_output("cli-st/sub/", 10s), nested.output());

  auto text = run_command(cli("lock --status cli-st"));
  BOOST_TEST(text.exit_code == 0, text.output);
  BOOST_TEST(text.output.find("warning: keys of lock 'cli-st/sub' are under 'cli-st/'") != std::string::npos, text.output);
  std::smatch m;
  static const std::regex shape(
      "'cli-st' at revision [0-9]+\n"
      "holder    (cli-st/[0-9a-f]+)  lease [0-9a-f]+  ttl [0-9]+/30 s  revision ([0-9]+)  fencing token ([0-9]+)\n"
      "waiter 1  cli-st/[0-9a-f]+  lease [0-9a-f]+  ttl [0-9]+/[0-9]+ s  revision [0-9]+\n"
      "waiter 2  cli-st/sub/[0-9a-f]+  lease [0-9a-f]+  ttl [0-9]+/60 s  revision [0-9]+  \\(lock \"cli-st/sub\"\\)\n");
  BOOST_TEST_REQUIRE(std::regex_search(text.output, m, shape), text.output);
  BOOST_TEST(m[1] == holder_key);
  BOOST_TEST(m[2] == m[3]);  // the holder's create revision is its fencing token

  auto json = run_command(cli("lock --status --json cli-st"));  // the warning is on stderr, the JSON one line
  BOOST_TEST(json.exit_code == 0, json.output);
  BOOST_TEST(json.output.find("\n{\"name\":\"cli-st\",\"revision\":") != std::string::npos, json.output);
  BOOST_TEST(json.output.find("\"holder\":{\"key\":\"" + holder_key + "\"") != std::string::npos, json.output);
  BOOST_TEST(json.output.find("\"other_name\":\"cli-st/sub\"") != std::string::npos, json.output);
  BOOST_TEST(json.output.find("\"nested_names\":[\"cli-st/sub\"]}\n") != std::string::npos, json.output);

  BOOST_TEST(run_command(cli("lock --status")).exit_code == 2);
  BOOST_TEST(run_command(cli("lock --json cli-st")).exit_code == 2);
  BOOST_TEST(run_command(cli("lock --status cli-st -- true")).exit_code == 2);
  holder.signal(SIGTERM);
  nested.signal(SIGTERM);
  BOOST_TEST(holder.wait(10s).value_or(-1) == 0);
  BOOST_TEST(nested.wait(10s).value_or(-1) == 0);
  waiter.signal(SIGKILL);
}

// --verbose prints the client's events on stderr, one line each.
BOOST_AUTO_TEST_CASE(verbose_prints_the_clients_events) {
  auto r = run_command(cli("--verbose lock cli-verbose -- true"));
  BOOST_TEST(r.exit_code == 0, r.output);
  BOOST_TEST(r.output.find("coetcd: event: endpoint_connected name=\"127.0.0.1:") != std::string::npos, r.output);
  BOOST_TEST(r.output.find("coetcd: event: lock_acquired name=\"cli-verbose\" key=\"cli-verbose/") != std::string::npos,
             r.output);
  BOOST_TEST(r.output.find("coetcd: event: lock_released name=\"cli-verbose\"") != std::string::npos, r.output);
}
