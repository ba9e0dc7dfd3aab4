// The mutual-exclusion checker. Several `lockcheck work` processes, each with CALLERS coroutines
// sharing one session and one mutex object (so the lock also passes between them locally), take
// one lock over and over; inside each critical section they write, guarded by their fencing
// token, an acquire record, the check key and a release record, named by the section's fencing
// token and local sequence. etcd's revisions order those writes, so afterwards
// `lockcheck verify` can prove from etcd alone that:
//   - no two critical sections overlap in revision order,
//   - (fencing token, local sequence) strictly increases from one section to the next,
//   - every acquired lock was released or expired (its key is gone),
//   - no key is left under the lock prefix,
// and print a one-line verdict with the counts. A stale holder (paused past its TTL, say) has
// its guarded writes rejected; `work` counts those.
//
//   lockcheck work   ENDPOINTS NAME CLIENT_ID [TTL_S [CALLERS]]   until SIGTERM/SIGINT
//   lockcheck verify ENDPOINTS NAME                      exit 0 if the verdict is OK
//   lockcheck clean  ENDPOINTS NAME                      removes the records
#include <coetcd.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <chrono>
#include <cinttypes>
#include <cstdlib>
#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <algorithm>
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

// Records live under NAME-check/: log/<token>/<local sequence>/acq and .../rel holding
// "<token> <client> <seq>", and the check key holding that stamp of the last section that wrote it.
std::string log_key(const std::string& name, std::int64_t token, std::uint64_t local, const char* what) {
  char b[64];
  std::snprintf(b, sizeof b, "%020" PRId64 "/%010" PRIu64 "/%s", token, local, what);
  return name + "-check/log/" + b;
}

struct counts {
  long sections = 0, stale_rejected = 0, sessions_lost = 0, resent = 0, errors = 0;
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

/// One caller: takes the shared mutex over and over while its session lives.
asio::awaitable<void> sections(coetcd::client& c, coetcd::session& s, coetcd::mutex& m, std::string name,
                               std::string id, bool& stop, counts& n, long& seq) {
  auto check = name + "-check/value";
  while (!stop && !s.lost()) {
    auto [ec] = co_await m.async_lock(asio::as_tuple(use_awaitable));
    if (ec == coetcd::error::session_lost) {
      ++n.sessions_lost;
      break;
    }
    if (ec) {
      ++n.errors;
      std::fprintf(stderr, "lockcheck %s: lock failed: %s\n", id.c_str(), ec.message().c_str());
      continue;
    }
    ++seq;
    // Ours until we unlock: the object describes its current holder.
    auto token = m.fencing_token();
    auto local = m.local_sequence();
    auto stamp = std::to_string(token) + " " + id + " " + std::to_string(seq);
    auto acq = coetcd::txn()
                   .when(m.is_owner())
                   .then(coetcd::txn_op::put(log_key(name, token, local, "acq"), stamp))
                   .then(coetcd::txn_op::put(check, stamp));
    auto [e1, r1] = co_await guarded(c, acq, n);
    asio::steady_timer hold(co_await asio::this_coro::executor, 5ms);
    co_await hold.async_wait(asio::as_tuple(use_awaitable));
    auto rel = coetcd::txn().when(m.is_owner()).then(coetcd::txn_op::put(log_key(name, token, local, "rel"), stamp));
    auto [e2, r2] = co_await guarded(c, rel, n);
    if (e1 || e2) {
      ++n.errors;
      std::fprintf(stderr, "lockcheck %s: fenced write failed: %s\n", id.c_str(), (e1 ? e1 : e2).message().c_str());
    }
    else if (!r1.succeeded || !r2.succeeded) {
      ++n.stale_rejected;
      auto k = co_await c.async_get(m.key(), asio::as_tuple(use_awaitable));
      auto& kvs = std::get<1>(k).kvs;
      std::fprintf(stderr, "lockcheck %s: write rejected: token %lld, acq %d rel %d, key %s, session %s\n", id.c_str(),
                   (long long)token, (int)r1.succeeded, (int)r2.succeeded,
                   kvs.empty() ? "gone" : ("create_revision " + std::to_string(kvs.front().create_revision)).c_str(),
                   s.lost() ? "lost" : "alive");
    }
    else ++n.sections;
    co_await m.async_unlock(asio::as_tuple(use_awaitable));
  }
}

asio::awaitable<void> work(coetcd::client& c, std::string name, std::string id, int ttl, int callers, bool& stop,
                           counts& n) {
  long seq = 0;
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
      asio::co_spawn(ex, sections(c, s, m, name, id, stop, n, seq), [&running, &n](std::exception_ptr e) {
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
  std::int64_t token = 0, local = 0, acq_rev = 0, rel_rev = 0;
};

asio::awaitable<int> verify(coetcd::client& c, std::string name) {
  auto logs = co_await c.async_get(name + "-check/log/", coetcd::get_options{.prefix = true}, use_awaitable);
  std::map<std::pair<std::int64_t, std::int64_t>, section> by_token;
  for (auto& kv : logs.kvs) {
    auto rest = kv.key.substr(name.size() + std::string("-check/log/").size());
    auto token = std::stoll(rest.substr(0, 20));
    auto local = std::stoll(rest.substr(21, 10));
    auto& sec = by_token[{token, local}];
    sec.token = token;
    sec.local = local;
    (rest.ends_with("/acq") ? sec.acq_rev : sec.rel_rev) = kv.mod_revision;
  }
  std::vector<section> order;
  for (auto& [t, sec] : by_token) order.push_back(sec);
  std::sort(order.begin(), order.end(), [](auto& a, auto& b) { return a.acq_rev < b.acq_rev; });
  long overlaps = 0, token_regressions = 0, unreleased_held = 0, expired = 0, torn = 0, local_handoffs = 0;
  for (std::size_t i = 0; i < order.size(); ++i) {
    auto& s = order[i];
    if (s.acq_rev == 0) ++torn;  // a release record without its acquire: impossible
    auto end = s.rel_rev ? s.rel_rev : s.acq_rev;
    if (!s.rel_rev) {
      // Never released by its holder: it must have expired, so its key is gone by now.
      auto k = co_await c.async_get(name + "/", coetcd::get_options{.prefix = true}, use_awaitable);
      bool still = false;
      for (auto& kv : k.kvs) still |= kv.create_revision == s.token;
      still ? ++unreleased_held : ++expired;
    }
    if (i + 1 < order.size()) {
      if (order[i + 1].acq_rev <= end) ++overlaps;
      if (order[i + 1].token == s.token) ++local_handoffs;
      auto next = std::pair(order[i + 1].token, order[i + 1].local);
      if (next <= std::pair(s.token, s.local)) ++token_regressions;
    }
  }
  auto left = co_await c.async_get(name + "/", coetcd::get_options{.prefix = true, .count_only = true}, use_awaitable);
  bool ok = !order.empty() && overlaps == 0 && token_regressions == 0 && unreleased_held == 0 && torn == 0 &&
            left.count == 0;
  std::printf("lockcheck %s: %zu sections (%ld local hand-offs), %ld expired without release, %ld overlaps, "
              "%ld token regressions, %ld held after the end, %" PRId64 " keys left under %s/\n",
              ok ? "OK" : "VIOLATION", order.size(), local_handoffs, expired, overlaps, token_regressions,
              unreleased_held, left.count, name.c_str());
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
                  "%ld errors\n",
                  a[3].c_str(), n.sections, n.stale_rejected, n.sessions_lost, n.resent, n.errors);
    } else if (a[0] == "verify") {
      rc = co_await verify(c, a[2]);
    } else if (a[0] == "clean") {
      co_await c.async_delete(a[2] + "-check/", coetcd::delete_options{.prefix = true}, use_awaitable);
    } else {
      rc = 2;
    }
    signals.cancel();
    c.close();
  };
  asio::co_spawn(ioc, body(), [&](std::exception_ptr e) {
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
