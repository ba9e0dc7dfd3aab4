// The soak: `lockcheck work` processes on one lock while every fault the tests know is injected
// in random order, on a 3-member cluster whose every link passes a proxy of the test harness.
// Ends with `lockcheck verify` and a summary; exits non-zero on a violation, an unclean verdict,
// a worker that failed to stop, or a client that grew (RSS, file descriptors) past its bound.
//
//   soak [SECONDS (1800)] [--workers N (3)] [--seed S]
//
// Faults: a member isolated from the other two, the leader isolated, one member's clients cut
// off, 50 ms each way on every link, flapping (members isolated and healed every 2 s), the leader
// killed and restarted, a member paused, a worker killed (a new one takes its place), a worker
// paused past its TTL. Worker 0 is never killed: its RSS and descriptors are the leak witness.
#include "support/child_process.hpp"
#include "support/etcd_process.hpp"
#include "support/tcp_proxy.hpp"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace coetcd::test;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

namespace {

constexpr const char* lock_name = "soak";
constexpr int worker_ttl = 5;         // seconds: short enough that a paused worker loses its lock
constexpr long rss_bound_kib = 16384;  // a worker may grow by this much from 10 s in to the end

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (auto& e : v) out += (out.empty() ? "" : ",") + e;
  return out;
}

long rss_kib(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

long open_fds(int pid) {
  std::error_code ec;
  long n = 0;
  for ([[maybe_unused]] auto& e : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) ++n;
  return ec ? -1 : n;
}

/// A number printed before `what` in a lockcheck line ("12 sessions lost"), -1 if absent.
long count_before(const std::string& line, const std::string& what) {
  auto at = line.find(" " + what);
  if (at == std::string::npos || at == 0) return -1;
  auto start = line.rfind(' ', at - 1);
  try {
    return std::stol(line.substr(start + 1, at - start - 1));
  } catch (const std::exception&) {
    return -1;
  }
}

/// The lockcheck process started through `sh -c exec`: its PID is the shell's, replaced by exec.
struct worker {
  std::string id;
  std::unique_ptr<child_process> process;
};

}  // namespace

int main(int argc, char** argv) {
  int seconds = 1800, workers_n = 3;
  unsigned seed = std::random_device{}();
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--workers" && i + 1 < argc) workers_n = std::atoi(argv[++i]);
    else if (a == "--seed" && i + 1 < argc) seed = static_cast<unsigned>(std::stoul(argv[++i]));
    else if (!a.empty() && std::isdigit(static_cast<unsigned char>(a[0]))) seconds = std::atoi(a.c_str());
    else {
      std::fprintf(stderr, "usage: soak [SECONDS] [--workers N] [--seed S]\n");
      return 2;
    }
  }
  std::signal(SIGPIPE, SIG_IGN);
  std::printf("soak: %d s, %d workers, seed %u\n", seconds, workers_n, seed);
  std::fflush(stdout);
  std::mt19937 rng(seed);
  auto pick = [&](int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); };

  etcd_cluster cluster(3, etcd_config{}, true);
  const auto direct = join(cluster.endpoints());
  auto eps = cluster.client_endpoints();
  run_command(COETCD_LOCKCHECK_PATH " clean " + direct + " " + lock_name);

  std::vector<worker> workers;
  int next_id = 0;
  auto start_worker = [&](std::size_t slot) {
    auto id = "w" + std::to_string(next_id++);
    std::vector<std::string> order;
    for (int k = 0; k < 3; ++k) order.push_back(eps[(slot + static_cast<std::size_t>(k)) % 3]);
    auto cmd = "exec " COETCD_LOCKCHECK_PATH " work " + join(order) + " " + lock_name + " " + id + " " +
               std::to_string(worker_ttl) + " 3";
    worker w{id, std::make_unique<child_process>(cmd)};
    if (slot < workers.size()) workers[slot] = std::move(w);
    else workers.push_back(std::move(w));
  };
  for (int i = 0; i < workers_n; ++i) start_worker(static_cast<std::size_t>(i));
  std::vector<std::string> finished;  // summary lines of replaced workers

  const auto begin = clock_type::now();
  const auto until = begin + std::chrono::seconds(seconds);
  auto left = [&] { return until - clock_type::now(); };
  auto sleep_at_most = [&](clock_type::duration d) {
    auto l = left();
    if (l > 0s) std::this_thread::sleep_for(std::min(d, l));
  };
  sleep_at_most(10s);  // warm-up: connections made, allocator settled
  const long rss_start = rss_kib(workers[0].process->pid());
  const long fds_start = open_fds(workers[0].process->pid());

  std::map<std::string, int> faults;
  while (left() > 4s) {
    const int kind = pick(9);
    const int member = pick(3);
    std::string what;
    switch (kind) {
      case 0:
        what = "member isolated";
        cluster.isolate(member);
        sleep_at_most(std::chrono::seconds(3 + pick(4)));
        break;
      case 1: {
        what = "leader isolated";
        int l = cluster.leader();
        cluster.isolate(l >= 0 ? l : member);
        sleep_at_most(std::chrono::seconds(3 + pick(4)));
        break;
      }
      case 2:
        what = "clients cut off";
        cluster.isolate_clients_of(member);
        sleep_at_most(std::chrono::seconds(2 + pick(4)));
        break;
      case 3:
        what = "50 ms each way";
        cluster.delay_all(50ms);
        sleep_at_most(5s);
        break;
      case 4:
        what = "flapping";
        for (int i = 0; i < 4 && left() > 4s; ++i) {
          cluster.isolate((member + i) % 3);
          sleep_at_most(2s);
          cluster.heal();
          sleep_at_most(2s);
        }
        break;
      case 5: {
        what = "leader killed";
        int l = cluster.leader();
        auto& m = cluster.member(l >= 0 ? l : member);
        m.kill();
        sleep_at_most(3s);
        m.start();
        break;
      }
      case 6:
        what = "member paused";
        cluster.member(member).pause();
        sleep_at_most(3s);
        cluster.member(member).resume();
        break;
      case 7: {
        if (workers.size() < 2) continue;
        what = "worker killed";
        auto slot = 1 + static_cast<std::size_t>(pick(static_cast<int>(workers.size()) - 1));
        workers[slot].process->signal(SIGKILL);
        workers[slot].process->wait(5s);
        start_worker(slot);
        break;
      }
      case 8: {
        what = "worker paused past its TTL";
        auto slot = static_cast<std::size_t>(pick(static_cast<int>(workers.size())));
        workers[slot].process->signal(SIGSTOP);
        sleep_at_most(std::chrono::seconds(worker_ttl + 2));
        workers[slot].process->signal(SIGCONT);
        break;
      }
    }
    cluster.heal();
    for (int i = 0; i < 3; ++i) cluster.member(i).resume();
    ++faults[what];
    std::printf("soak: %6.1f s  %s\n", std::chrono::duration<double>(clock_type::now() - begin).count(), what.c_str());
    std::fflush(stdout);
    sleep_at_most(2s);  // calm between faults
  }
  cluster.heal();
  for (int i = 0; i < 3; ++i) {
    cluster.member(i).resume();
    cluster.member(i).start();  // no-op when running
  }
  cluster.wait_for_leader();
  sleep_at_most(3s);

  const long rss_end = rss_kib(workers[0].process->pid());
  const long fds_end = open_fds(workers[0].process->pid());
  long sessions_lost = 0, errors = 0, stale = 0;
  std::map<std::string, int> failures;
  bool workers_ok = true;
  for (auto& w : workers) w.process->signal(SIGTERM);
  for (auto& w : workers) {
    auto code = w.process->wait(30s);
    auto out = w.process->output();
    auto line_at = out.find("lockcheck work ");
    auto line = line_at == std::string::npos ? std::string() : out.substr(line_at, out.find('\n', line_at) - line_at);
    if (!code || *code != 0 || line.empty()) {
      workers_ok = false;
      std::printf("soak: worker %s did not stop cleanly:\n%s\n", w.id.c_str(), out.substr(out.size() > 2000 ? out.size() - 2000 : 0).c_str());
      continue;
    }
    std::printf("soak: %s\n", line.c_str());
    // Why its locks, writes or sessions failed (lockcheck says so on stderr), by kind.
    std::istringstream lines(out);
    for (std::string l; std::getline(lines, l);)
      if (auto at = l.find(" failed: "); at != std::string::npos && l.rfind("lockcheck ", 0) == 0)
        ++failures[l.substr(l.find(": ") + 2)];
    sessions_lost += std::max(0L, count_before(line, "sessions lost"));
    errors += std::max(0L, count_before(line, "errors"));
    stale += std::max(0L, count_before(line, "stale writes rejected"));
  }

  command_result verdict;
  for (int i = 0; i < 80; ++i) {  // a killed worker's key goes when its lease expires
    verdict = run_command(COETCD_LOCKCHECK_PATH " verify " + direct + " " + lock_name);
    if (verdict.exit_code == 0) break;
    std::this_thread::sleep_for(250ms);
  }
  if (verdict.output.ends_with('\n')) verdict.output.pop_back();
  const long overlaps = count_before(verdict.output, "overlaps");
  const long regressions = count_before(verdict.output, "token regressions");
  const long held = count_before(verdict.output, "held after the end");
  const long duplicates = count_before(verdict.output, "duplicate tokens");
  const long mismatches = count_before(verdict.output, "check-key mismatches");
  const long owner_rejections = count_before(verdict.output, "owner rejections");
  const long torn = count_before(verdict.output, "torn records");
  const long violations = (overlaps < 0 || regressions < 0 || held < 0 || duplicates < 0 || mismatches < 0 ||
                           owner_rejections < 0 || torn < 0)
                              ? -1
                              : overlaps + regressions + held + duplicates + mismatches + owner_rejections + torn;
  long sections = -1;
  if (auto colon = verdict.output.find(": "); colon != std::string::npos)
    sections = std::atol(verdict.output.c_str() + colon + 2);
  int total_faults = 0;
  std::string fault_list;
  for (auto& [k, n] : faults) {
    total_faults += n;
    fault_list += (fault_list.empty() ? "" : ", ") + k + " " + std::to_string(n);
  }
  const bool rss_ok = rss_start > 0 && rss_end > 0 && rss_end - rss_start <= rss_bound_kib;
  const bool fds_ok = fds_start > 0 && fds_end > 0 && fds_end <= fds_start + 8;
  run_command(COETCD_LOCKCHECK_PATH " clean " + direct + " " + lock_name);

  std::printf("\nsoak summary (%d s, seed %u)\n", seconds, seed);
  std::printf("  violations %ld\n", violations);
  std::printf("  acquisitions %ld\n", sections);
  std::printf("  faults injected %d (%s)\n", total_faults, fault_list.c_str());
  std::printf("  sessions lost %ld\n", sessions_lost);
  std::printf("  stale writes rejected %ld\n", stale);
  std::printf("  lock errors %ld\n", errors);
  for (auto& [why, n] : failures) std::printf("    %dx %s\n", n, why.c_str());
  std::printf("  client RSS %ld KiB at 10 s, %ld KiB at the end (bound: +%ld KiB) %s\n", rss_start, rss_end,
              rss_bound_kib, rss_ok ? "ok" : "GREW");
  std::printf("  file descriptors %ld at 10 s, %ld at the end (bound: +8) %s\n", fds_start, fds_end,
              fds_ok ? "ok" : "LEAK");
  std::printf("  verdict: %s\n", verdict.output.c_str());
  const bool ok = violations == 0 && verdict.exit_code == 0 && workers_ok && rss_ok && fds_ok;
  std::printf("soak %s\n", ok ? "OK" : "FAILED");
  return ok ? 0 : 1;
}
