// The mutual-exclusion checker. Several `lockcheck work` processes, each with CALLERS coroutines
// sharing one session and one mutex object (so the lock also passes between them locally), take
// one lock over and over. Each critical section reads the check key and the lock key (one read,
// one revision), then writes, guarded by its hold's fence(), an acquire record and the check
// key (its own stamp), and later a release record. Records are named by the caller that wrote
// them (client id and PID, caller index, the caller's own counter), never by what the hold says
// about itself: two callers granted at once would read the same token and, named by it,
// write the same keys and look like one section. etcd's revisions order those writes, so
// afterwards `lockcheck verify` can prove from etcd alone that:
//   - no two sections overlap: in the order of their acquire revisions, each one's read and
//     acquire come after the release of every section before it,
//   - (fencing token, local sequence) strictly increases along that order and no two sections
//     claim the same pair,
//   - each section read the stamp of the section just before it in the check key (no lost
//     update), and the check key holds the last section's stamp,
//   - every acquired lock was released or expired (its key is gone),
//   - no worker saw its fenced write rejected while its key and session were still there,
//   - no key is left under the lock prefix,
// and print a one-line verdict with the counts. A stale holder (paused past its TTL, say) has
// its guarded writes rejected; `work` counts those. A rejection while the lock key still has the
// create revision we acquired with (and the lease lives) is not stale: it is a violation, which
// `work` records under NAME-check/violation/ for verify, prints and reports by its exit code.
//
//   lockcheck work   ENDPOINTS NAME CLIENT_ID [TTL_S [CALLERS]]   until SIGTERM/SIGINT
//   lockcheck verify ENDPOINTS NAME                      exit 0 if the verdict is OK
//   lockcheck clean  ENDPOINTS NAME                      removes the records
//
// LOCKCHECK_GRANTS=1: `work` prints a line per acquisition with the time (steady clock, which on
// Linux is CLOCK_MONOTONIC and so comparable between processes), for a test that must know when
// a worker held the lock and not only what reached etcd.
#include <coetcd.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

namespace asio = boost::asio;
using asio::use_awaitable;
using namespace std::chrono_literals;

namespace {

coetcd::client_options options(const std::string& endpoints) {
  coetcd::client_options o;
  std::stringstream in(endpoints);
  for (std::string e; std::getline(in, e, ',');) o.endpoints.push_back(e);
  o.request_timeout = 10s;
  // LOCKCHECK_EVENTS=1: the client's events on stderr, with the time, to read a fault run.
  if (std::getenv("LOCKCHECK_EVENTS"))
    o.on_event = [start = std::chrono::steady_clock::now()](const coetcd::event& e) {
      std::fprintf(stderr, "%8.3f %s\n",
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                   coetcd::to_string(e).c_str());
    };
  return o;
}

// Records live under NAME-check/:
//   log/<caller>/acq  "token=T local=L read=R key=C prev=P"  (R: revision of the section's read,
//                     C: the lock key's create revision then, P: the check key's stamp then, "-" absent)
//   log/<caller>/rel  "token=T local=L"
//   value             the stamp (<caller>) of the last section that wrote it
//   violation/<client>/<n>  why a worker's fenced write was rejected while it owned the key
// where <caller> is "<client id>.<pid>/<caller index %03d>/<the caller's counter %010d>".
std::string log_prefix(const std::string& name) { return name + "-check/log/"; }
std::string check_key(const std::string& name) { return name + "-check/value"; }
std::string violation_prefix(const std::string& name) { return name + "-check/violation/"; }

std::string caller_stamp(const std::string& process, int caller, long counter) {
  char b[64];
  std::snprintf(b, sizeof b, "/%03d/%010ld", caller, counter);
  return process + b;
}

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct counts {
  long sections = 0, stale_rejected = 0, sessions_lost = 0, resent = 0, errors = 0, owner_rejected = 0;
};

/// Our records are puts of fixed values: resending one after a failover changes nothing.
asio::awaitable<std::tuple<boost::system::error_code, coetcd::txn_result>> guarded(coetcd::client& c,
                                                                                   const coetcd::txn& t, counts& n) {
  for (int attempt = 0;; ++attempt) {
    auto [ec, r] = co_await c.async_txn(t, asio::as_tuple(use_awaitable));
    if (!ec || attempt == 20) co_return std::tuple(ec, std::move(r));
    ++n.resent;
    asio::steady_timer pause(co_await asio::this_coro::executor, 250ms);
    co_await pause.async_wait(asio::as_tuple(use_awaitable));
  }
}

/// The lock key as the else branch of a rejected fenced write saw it, at the rejection's revision.
const coetcd::key_value* key_at_rejection(const coetcd::txn_result& r) {
  if (r.succeeded || r.responses.empty()) return nullptr;
  auto& kvs = r.responses.front().get().kvs;
  return kvs.empty() ? nullptr : &kvs.front();
}

struct caller_context {
  coetcd::client& c;
  coetcd::session& s;
  coetcd::mutex& m;
  const std::string& name;
  const std::string& id;       // CLIENT_ID as given
  const std::string& process;  // CLIENT_ID.PID: unique even if an id is reused
  bool& stop;
  counts& n;
};

/// A fenced write was rejected. Stale if our key is gone or another one (the lock moved on);
/// a violation if, at the rejection's revision, our key still had the create revision it had when
/// we acquired (so our fence() failed while we owned it, or someone else changed our key), or
/// if it has it now and the session's lease is alive.
asio::awaitable<void> rejected(caller_context& x, const char* what, const coetcd::txn_result& r, std::int64_t token,
                               std::int64_t key_create, const std::string& stamp) {
  auto* then = key_at_rejection(r);
  bool violation = then && then->create_revision == key_create;
  auto [gec, now] = co_await x.c.async_get(x.m.key(), asio::as_tuple(use_awaitable));
  auto [lec, lease] = co_await x.c.async_lease_time_to_live(x.s.lease(), asio::as_tuple(use_awaitable));
  const bool key_now = !gec && !now.kvs.empty() && now.kvs.front().create_revision == key_create;
  const bool lease_alive = !lec && lease.ttl.count() > 0;
  violation |= key_now && lease_alive;
  char why[512];
  std::snprintf(why, sizeof why,
                "%s write of %s rejected: token %lld, acquired with key create_revision %lld; at the rejection "
                "(revision %lld) the key was %s; now it is %s, lease %s",
                what, stamp.c_str(), (long long)token, (long long)key_create, (long long)r.header.revision,
                then ? ("create_revision " + std::to_string(then->create_revision) + " mod_revision " +
                        std::to_string(then->mod_revision)).c_str()
                     : "gone",
                gec ? gec.message().c_str()
                    : now.kvs.empty() ? "gone"
                                      : ("create_revision " + std::to_string(now.kvs.front().create_revision)).c_str(),
                lec ? lec.message().c_str() : lease_alive ? ("alive, " + std::to_string(lease.ttl.count()) + " s").c_str()
                                                          : "gone");
  if (!violation) {
    ++x.n.stale_rejected;
    std::fprintf(stderr, "lockcheck %s: %s (session %s)\n", x.id.c_str(), why, x.s.lost() ? "lost" : "alive");
    co_return;
  }
  ++x.n.owner_rejected;
  std::fprintf(stderr, "lockcheck %s: VIOLATION: %s\n", x.id.c_str(), why);
  // For verify too: a worker's verdict only reaches a test that reads its exit code.
  auto key = violation_prefix(x.name) + x.process + "/" + std::to_string(x.n.owner_rejected);
  co_await guarded(x.c, coetcd::txn().then(coetcd::txn_op::put(key, why)), x.n);
}

/// One caller: takes the shared mutex over and over while its session lives.
asio::awaitable<void> sections(caller_context x, int caller, long& counter) {
  static const bool print_grants = std::getenv("LOCKCHECK_GRANTS") != nullptr;
  while (!x.stop && !x.s.lost()) {
    auto [ec, held] = co_await x.m.async_lock(asio::as_tuple(use_awaitable));
    if (ec == coetcd::error::session_lost) {
      ++x.n.sessions_lost;
      break;
    }
    if (ec) {
      ++x.n.errors;
      std::fprintf(stderr, "lockcheck %s: lock failed: %s\n", x.id.c_str(), ec.message().c_str());
      continue;
    }
    // Ours until we release it: the hold describes this section.
    const auto token = held.fencing_token();
    const auto local = static_cast<std::int64_t>(held.local_sequence());
    const auto stamp = caller_stamp(x.process, caller, ++counter);
    if (print_grants) {
      std::printf("lockcheck %s grant at %.6f token %lld local %lld caller %s\n", x.id.c_str(), steady_seconds(),
                  (long long)token, (long long)local, stamp.c_str());
      std::fflush(stdout);
    }
    // The section's read: what the section before us left, and our key as we hold it.
    auto read = coetcd::txn()
                    .then(coetcd::txn_op::get(check_key(x.name)))
                    .then(coetcd::txn_op::get(x.m.key()));
    auto [e0, r0] = co_await guarded(x.c, read, x.n);
    if (e0) {  // nothing written: the section leaves no record
      ++x.n.errors;
      std::fprintf(stderr, "lockcheck %s: read failed: %s\n", x.id.c_str(), e0.message().c_str());
      co_await held.async_release(asio::as_tuple(use_awaitable));
      continue;
    }
    auto& prev_kvs = r0.responses.at(0).get().kvs;
    auto& key_kvs = r0.responses.at(1).get().kvs;
    const std::string prev = prev_kvs.empty() ? "-" : prev_kvs.front().value;
    const std::int64_t key_create = key_kvs.empty() ? 0 : key_kvs.front().create_revision;
    const auto common = "token=" + std::to_string(token) + " local=" + std::to_string(local);
    auto acq = coetcd::txn()
                   .when(held.fence())
                   .then(coetcd::txn_op::put(log_prefix(x.name) + stamp + "/acq",
                                             common + " read=" + std::to_string(r0.header.revision) +
                                                 " key=" + std::to_string(key_create) + " prev=" + prev))
                   .then(coetcd::txn_op::put(check_key(x.name), stamp))
                   .otherwise(coetcd::txn_op::get(x.m.key()));
    auto [e1, r1] = co_await guarded(x.c, acq, x.n);
    bool ok = !e1 && r1.succeeded;
    if (!e1 && !r1.succeeded) co_await rejected(x, "acquire", r1, token, key_create, stamp);
    if (ok) {
      asio::steady_timer hold(co_await asio::this_coro::executor, 5ms);
      co_await hold.async_wait(asio::as_tuple(use_awaitable));
      auto rel = coetcd::txn()
                     .when(held.fence())
                     .then(coetcd::txn_op::put(log_prefix(x.name) + stamp + "/rel", common))
                     .otherwise(coetcd::txn_op::get(x.m.key()));
      auto [e2, r2] = co_await guarded(x.c, rel, x.n);
      if (e2) e1 = e2;
      else if (!r2.succeeded) co_await rejected(x, "release", r2, token, key_create, stamp);
      ok = !e2 && r2.succeeded;
    }
    if (e1) {
      ++x.n.errors;
      std::fprintf(stderr, "lockcheck %s: fenced write failed: %s\n", x.id.c_str(), e1.message().c_str());
    } else if (ok) {
      ++x.n.sections;
    }
    co_await held.async_release(asio::as_tuple(use_awaitable));
  }
}

asio::awaitable<void> work(coetcd::client& c, std::string name, std::string id, int ttl, int callers, bool& stop,
                           counts& n) {
  const std::string process = id + "." + std::to_string(::getpid());
  std::vector<long> counters(static_cast<std::size_t>(callers), 0);  // each caller's own, across sessions
  auto ex = co_await asio::this_coro::executor;
  while (!stop) {  // one session per turn of this loop: a lost one is replaced
    auto [sec, s] = co_await coetcd::session::async_create(
        c, coetcd::session_options{.ttl = std::chrono::seconds(ttl)}, asio::as_tuple(use_awaitable));
    if (sec) {
      ++n.errors;
      std::fprintf(stderr, "lockcheck %s: session failed: %s\n", id.c_str(), sec.message().c_str());
      continue;
    }
    coetcd::mutex m(s, name);
    int running = callers;
    for (int i = 0; i < callers; ++i)
      asio::co_spawn(ex, sections(caller_context{c, s, m, name, id, process, stop, n}, i,
                                  counters[static_cast<std::size_t>(i)]),
                     [&running, &n](std::exception_ptr e) {
                       if (e) ++n.errors;
                       --running;
                     });
    while (running > 0) {
      asio::steady_timer pause(ex, 10ms);
      co_await pause.async_wait(asio::as_tuple(use_awaitable));
    }
    co_await s.async_close(asio::as_tuple(use_awaitable));
  }
}

struct section {
  std::string caller;
  std::int64_t token = 0, local = 0, read_rev = 0, key_create = 0, acq_rev = 0, rel_rev = 0;
  std::string prev;
  bool malformed = false;
};

/// "k=v" of a record's value; nullopt if absent.
std::optional<std::string> field(const std::string& value, const std::string& k) {
  std::istringstream in(value);
  for (std::string w; in >> w;)
    if (w.rfind(k + "=", 0) == 0) return w.substr(k.size() + 1);
  return std::nullopt;
}

std::int64_t number(const std::optional<std::string>& v, bool& bad) {
  try {
    if (v) return std::stoll(*v);
  } catch (const std::exception&) {
  }
  bad = true;
  return 0;
}

asio::awaitable<int> verify(coetcd::client& c, std::string name) {
  auto logs = co_await c.async_get(log_prefix(name), coetcd::get_options{.prefix = true}, use_awaitable);
  std::map<std::string, section> by_caller;
  for (auto& kv : logs.kvs) {
    auto rest = kv.key.substr(log_prefix(name).size());
    auto slash = rest.rfind('/');
    auto caller = rest.substr(0, slash == std::string::npos ? 0 : slash);
    auto what = slash == std::string::npos ? std::string() : rest.substr(slash + 1);
    auto& sec = by_caller[caller];
    sec.caller = caller;
    bool bad = false;
    auto token = number(field(kv.value, "token"), bad);
    auto local = number(field(kv.value, "local"), bad);
    if (what == "acq") {
      sec.acq_rev = kv.mod_revision;
      sec.read_rev = number(field(kv.value, "read"), bad);
      sec.key_create = number(field(kv.value, "key"), bad);
      sec.prev = field(kv.value, "prev").value_or("");
      if (sec.prev.empty()) bad = true;
    } else if (what == "rel") {
      sec.rel_rev = kv.mod_revision;
    } else {
      bad = true;
    }
    // acq and rel of one caller's section must name the same holder.
    if ((sec.token || sec.local) && (sec.token != token || sec.local != local)) bad = true;
    sec.token = token;
    sec.local = local;
    sec.malformed |= bad;
  }
  std::vector<section> order;
  for (auto& [caller, sec] : by_caller) order.push_back(sec);
  std::sort(order.begin(), order.end(), [](auto& a, auto& b) { return a.acq_rev < b.acq_rev; });
  long overlaps = 0, token_regressions = 0, duplicate_tokens = 0, check_mismatches = 0, unreleased_held = 0,
       expired = 0, torn = 0, local_handoffs = 0;
  std::map<std::pair<std::int64_t, std::int64_t>, std::string> claimed;
  std::int64_t released_by = 0;  // the latest revision at which a section before this one ended
  std::string first_problem;
  auto problem = [&](const std::string& what) {
    if (first_problem.empty()) first_problem = what;
  };
  for (std::size_t i = 0; i < order.size(); ++i) {
    auto& s = order[i];
    if (s.acq_rev == 0 || s.malformed) {  // a release without its acquire, or words we did not write
      ++torn;
      problem("torn or malformed record of " + s.caller);
    }
    auto end = s.rel_rev ? s.rel_rev : s.acq_rev;
    if (s.rel_rev && s.rel_rev < s.acq_rev) {
      ++torn;
      problem(s.caller + " released before it acquired");
    }
    // Before this section read and wrote, every earlier one (in acquire order) must have ended.
    if (i > 0 && (s.read_rev < released_by || s.acq_rev <= released_by)) {
      ++overlaps;
      problem(s.caller + " (read " + std::to_string(s.read_rev) + ", acquired " + std::to_string(s.acq_rev) +
              ") overlaps a section that ended at " + std::to_string(released_by));
    }
    released_by = std::max(released_by, end);
    if (auto [at, fresh] = claimed.emplace(std::pair(s.token, s.local), s.caller); !fresh) {
      ++duplicate_tokens;
      problem(s.caller + " and " + at->second + " both claim token " + std::to_string(s.token) + " local " +
              std::to_string(s.local));
    }
    const std::string expected = i == 0 ? "-" : order[i - 1].caller;
    if (s.prev != expected) {
      ++check_mismatches;
      problem(s.caller + " read the check key as " + s.prev + ", the section before it was " + expected);
    }
    if (i > 0) {
      auto& p = order[i - 1];
      if (std::pair(s.token, s.local) <= std::pair(p.token, p.local)) {
        ++token_regressions;
        problem(s.caller + " (token " + std::to_string(s.token) + " local " + std::to_string(s.local) +
                ") after " + p.caller + " (token " + std::to_string(p.token) + " local " + std::to_string(p.local) +
                ")");
      }
      // One key passed on within a process: a local hand-off, however the tokens are numbered.
      if (s.key_create != 0 && s.key_create == p.key_create && s.caller.substr(0, s.caller.find('/')) ==
                                                                    p.caller.substr(0, p.caller.find('/')))
        ++local_handoffs;
    }
    if (!s.rel_rev) {
      // Never released by its holder: it must have expired, so its key is gone by now.
      auto k = co_await c.async_get(name + "/", coetcd::get_options{.prefix = true}, use_awaitable);
      bool still = false;
      for (auto& kv : k.kvs) still |= s.key_create != 0 && kv.create_revision == s.key_create;
      still ? ++unreleased_held : ++expired;
      if (still) problem(s.caller + " never released and its key is still there");
    }
  }
  auto check = co_await c.async_get(check_key(name), use_awaitable);
  const std::string last = check.kvs.empty() ? "-" : check.kvs.front().value;
  if (last != (order.empty() ? "-" : order.back().caller)) {
    ++check_mismatches;
    problem("the check key holds " + last + ", the last section was " + (order.empty() ? "-" : order.back().caller));
  }
  auto violations = co_await c.async_get(violation_prefix(name), coetcd::get_options{.prefix = true}, use_awaitable);
  for (auto& kv : violations.kvs) problem("a worker: " + kv.value);
  auto left = co_await c.async_get(name + "/", coetcd::get_options{.prefix = true, .count_only = true}, use_awaitable);
  bool ok = !order.empty() && overlaps == 0 && token_regressions == 0 && duplicate_tokens == 0 &&
            check_mismatches == 0 && violations.kvs.empty() && unreleased_held == 0 && torn == 0 && left.count == 0;
  std::printf("lockcheck %s: %zu sections (%ld local hand-offs), %ld expired without release, %ld overlaps, "
              "%ld token regressions, %ld duplicate tokens, %ld check-key mismatches, %zu owner rejections, "
              "%ld torn records, %ld held after the end, %" PRId64 " keys left under %s/\n",
              ok ? "OK" : "VIOLATION", order.size(), local_handoffs, expired, overlaps, token_regressions,
              duplicate_tokens, check_mismatches, violations.kvs.size(), torn, unreleased_held, left.count,
              name.c_str());
  if (!first_problem.empty()) std::printf("lockcheck: first problem: %s\n", first_problem.c_str());
  co_return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> a(argv + 1, argv + argc);
  if (a.size() < 3 || (a[0] == "work" && a.size() < 4)) {
    std::fprintf(stderr, "usage: lockcheck work ENDPOINTS NAME CLIENT_ID [TTL_S [CALLERS]] | verify ENDPOINTS NAME | "
                         "clean ENDPOINTS NAME\n");
    return 2;
  }
  asio::io_context ioc;
  coetcd::client c(ioc, options(a[1]));
  int rc = 0;
  bool stop = false;
  counts n;
  asio::signal_set signals(ioc, SIGINT, SIGTERM);
  signals.async_wait([&](boost::system::error_code ec, int) {
    if (!ec) stop = true;
  });
  auto body = [&]() -> asio::awaitable<void> {
    if (a[0] == "work") {
      co_await work(c, a[2], a[3], a.size() > 4 ? std::stoi(a[4]) : 5, a.size() > 5 ? std::stoi(a[5]) : 1, stop, n);
      std::printf("lockcheck work %s: %ld sections, %ld stale writes rejected, %ld sessions lost, %ld writes resent, "
                  "%ld errors, %ld owner rejections\n",
                  a[3].c_str(), n.sections, n.stale_rejected, n.sessions_lost, n.resent, n.errors, n.owner_rejected);
      if (n.owner_rejected) rc = 1;
    } else if (a[0] == "verify") {
      rc = co_await verify(c, a[2]);
    } else if (a[0] == "clean") {
      co_await c.async_delete(a[2] + "-check/", coetcd::delete_options{.prefix = true}, use_awaitable);
    } else {
      rc = 2;
    }
  };
  asio::co_spawn(ioc, body(), [&](std::exception_ptr e) {
    // Also when the body failed: a signal wait left pending kept ioc.run() from returning, and
    // a `clean` whose delete failed waited for a SIGTERM nobody sent.
    signals.cancel();
    c.close();
    if (!e) return;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      std::fprintf(stderr, "lockcheck: %s\n", x.what());
      rc = 1;
    }
  });
  ioc.run();
  std::fflush(stdout);
  return rc;
}
