// A seeded stress of the recipes: mutex, rw_mutex, semaphore and election callers over sessions of
// two clients, cancelled at random, while sessions are revoked, closed or orphaned and a proxy in
// front of each client delays replies past request_timeout, holds or cuts its connections.
// COETCD_STRESS_SEED replays a run's choices, COETCD_STRESS_SECONDS sets its length (default 40).
#define BOOST_TEST_MODULE coetcd_stress
#include "support/fixture.hpp"
#include "support/tcp_proxy.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <random>
#include <set>

using namespace coetcd;
using namespace coetcd::test;
using namespace std::chrono_literals;
using namespace boost::asio::experimental::awaitable_operators;
using clock_type = std::chrono::steady_clock;
using ms = std::chrono::milliseconds;

namespace {

constexpr int kClients = 2, kSlots = 6, kCallers = 16, kNames = 3, kPermits = 3;
const std::chrono::seconds kTtl{5};

enum op_kind { mutex_lock, mutex_try, rw_write, rw_try_write, rw_read, rw_try_read, sem_acquire, sem_try, campaign, kinds };
const char* const kind_names[] = {"mutex.lock", "mutex.try_lock", "rw.lock", "rw.try_lock", "rw.lock_shared",
                                  "rw.try_lock_shared", "sem.acquire", "sem.try_acquire", "election.campaign"};

/// A session and what the test did to it: a doomed one was revoked, closed or orphaned on
/// purpose, so its holders may still believe in holds that etcd has already passed on.
struct sess {
  session s;
  int client = 0;
  bool doomed = false;
  bool live() const { return !doomed && !s.lost(); }
};
using sess_ptr = std::shared_ptr<sess>;

/// Every random choice of one operation, drawn up front so that a caller's stream of choices
/// depends on the seed only, not on how earlier operations turned out.
struct choice {
  int slot, kind, name, cut, cut_ms, hold_ms, n;
  asio::cancellation_type ctype;
  bool proclaim, probe;
};

choice draw(std::mt19937_64& rng, int caller) {
  auto u = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  choice c{};
  // Callers keep to a home session half the time and to the first name more than the others,
  // so that callers of one session also queue behind each other (local hand-offs).
  c.slot = u(0, 1) ? caller % kSlots : u(0, kSlots - 1);
  auto family = u(0, 99);
  c.kind = family < 35 ? (u(0, 3) ? mutex_lock : mutex_try)
         : family < 60 ? u(rw_write, rw_try_read)
         : family < 80 ? u(sem_acquire, sem_try)
                       : campaign;
  auto which = u(0, 99);
  c.name = which < 60 ? 0 : which < 85 ? 1 : 2;
  c.cut = u(0, 9) < 4 ? 0 : u(1, 2);  // none, `|| timer`, a signal emitted later
  c.cut_ms = u(0, 9) < 8 ? u(0, 300) : u(300, 1500);
  c.hold_ms = u(0, 15);
  c.n = u(1, 2);
  c.ctype = std::array{asio::cancellation_type::terminal, asio::cancellation_type::partial,
                       asio::cancellation_type::total}[u(0, 2)];
  c.proclaim = u(0, 1) == 1;
  c.probe = u(0, 1) == 1;
  return c;
}

/// The in-process ledger of one name: exclusive holders (mutex, rw writer, election leader) and
/// shared ones (rw readers, semaphore holders by permits). One io_context runs every client, so
/// what it sees at each entry is exact.
struct holder {
  long id;
  int caller;
  sess_ptr s;
  int weight;
};
struct name_ledger {
  std::vector<holder> exclusive, shared;
};

struct world {
  std::uint64_t seed;
  clock_type::time_point deadline;
  std::vector<std::unique_ptr<client>> clients;  // the two stressed clients, behind proxies
  client* judge = nullptr;                       // direct, never faulted: revokes and checks
  std::vector<std::unique_ptr<tcp_proxy>>* proxies = nullptr;
  std::vector<sess_ptr> slots;
  std::map<std::string, name_ledger> ledger;
  long next_holder = 0;
  std::vector<std::string> violations;  // overlaps, cancelled-but-held, suspicious rejections
  long started = 0, completed = 0, checking = 0;
  std::vector<std::string> current;     // per caller: the operation it is in
  std::map<std::string, long> outcomes;  // "kind: result" -> count
  std::set<std::string> fenced_ok, fenced_rejected, fenced_unknown;  // log keys
  long probes = 0, fenced_skipped = 0, busy_skipped = 0, chaos = 0, faults = 0;
  long late_entries = 0;  // callers that entered beside live holders under a session already ended
  std::set<std::string> election_values;
  std::set<std::pair<sess*, std::string>> campaigning;  // one election per session and name

  void note(const std::string& v) {
    violations.push_back(v);
    std::cerr << "stress: VIOLATION " << v << "\n";
  }
  // A loss told, or a fenced write rejected, while the session still lives: the safe direction
  // (nobody holds twice), so printed with its seed for a look, not failed.
  std::vector<std::string> warnings;
  void warn(const std::string& v) {
    warnings.push_back(v);
    std::cerr << "stress: WARNING " << v << "\n";
  }
};

std::string hex(std::int64_t lease) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%llx", static_cast<unsigned long long>(lease));
  return buf;
}

std::string lock_name(int kind, int i) {
  const char* base = kind <= mutex_try ? "m" : kind <= rw_try_read ? "rw" : kind <= sem_try ? "sem" : "el";
  return "stress/" + std::string(base) + std::to_string(i);
}

/// Enters the ledger of `name` and checks who else is inside, counting only holders whose session
/// is live (a doomed or lost session's holder may lag behind etcd); leaves it when destroyed. A
/// caller whose own session is no longer live may enter late in the same way (its lease revoked
/// by another client, or expired, after its grant was decided on a view that had not seen it go):
/// counted, not failed; its fenced write is rejected, and the count of fenced writes shows any
/// that passed.
struct inside {
  world& w;
  std::string name;
  long id;
  bool excl;
  enum what { exclusive, reader, permits };
  inside(world& w_, std::string n, what kind, int caller, sess_ptr s, int weight)
      : w(w_), name(std::move(n)), id(++w_.next_holder), excl(kind == exclusive) {
    auto& l = w.ledger[name];
    long live_excl = 0, live_shared = 0;
    for (auto& h : l.exclusive) live_excl += h.s->live();
    for (auto& h : l.shared) live_shared += h.s->live() ? h.weight : 0;
    bool clash = kind == exclusive ? live_excl + live_shared > 0
               : kind == reader    ? live_excl > 0
                                   : live_shared + weight > kPermits;
    if (clash && !s->live()) {
      ++w.late_entries;
    } else if (clash) {
      // Leases in hex, as in the keys: a replay with prints can follow each one.
      std::string others;
      for (auto* v : {&l.exclusive, &l.shared})
        for (auto& h : *v)
          if (h.s->live()) others += " caller " + std::to_string(h.caller) + " (lease " + hex(h.s->s.lease()) + ")";
      w.note(name + ": caller " + std::to_string(caller) + " (lease " + hex(s->s.lease()) + ") entered beside " +
             std::to_string(live_excl) + " exclusive and " + std::to_string(live_shared) + " shared live holders:" +
             others);
    }
    (excl ? l.exclusive : l.shared).push_back({id, caller, std::move(s), weight});
  }
  ~inside() {
    auto& v = excl ? w.ledger[name].exclusive : w.ledger[name].shared;
    std::erase_if(v, [this](const holder& h) { return h.id == id; });
  }
};

/// Runs one acquisition, cut short as the choice says: not at all, by `|| timer`, or by a
/// cancellation signal emitted after a delay (of a random cancellation type). Its error and the
/// hold it handed over (empty when cut short: a grant that met the cut was given back).
template <class Start>
auto cancellable(Start& start, const choice& c) -> decltype(start(asio::as_tuple(use_awaitable))) {
  using result = typename decltype(start(asio::as_tuple(use_awaitable)))::value_type;
  using hold_type = std::tuple_element_t<1, result>;
  if (c.cut == 1) {
    auto r = co_await (start(asio::as_tuple(use_awaitable)) || sleep_for(ms(c.cut_ms)));
    if (r.index() == 1) co_return result(error_code(asio::error::operation_aborted), hold_type());
    co_return std::move(std::get<0>(r));
  }
  if (c.cut == 2) {
    // The signal outlives the operation: the timer's handler owns it too.
    auto sig = std::make_shared<asio::cancellation_signal>();
    asio::steady_timer t(co_await asio::this_coro::executor, ms(c.cut_ms));
    t.async_wait([sig, type = c.ctype](error_code e) {
      if (!e) sig->emit(type);
    });
    auto r = co_await start(asio::bind_cancellation_slot(sig->slot(), asio::as_tuple(use_awaitable)));
    t.cancel();
    co_return std::move(r);
  }
  co_return co_await start(asio::as_tuple(use_awaitable));
}

/// After a fenced write was rejected or a loss was reported: the holder's session should be doomed
/// by us or known lost within 3 s; a rejection or loss with the session alive is suspicious, in
/// the safe direction (a holder told too much, never too little): a warning, with the seed.
asio::awaitable<void> suspect(world& w, sess_ptr s, std::string what) {
  for (int i = 0; i < 300 && s->live(); ++i) co_await sleep_for(10ms);
  if (s->live()) w.warn("session alive and not lost 3 s after: " + what);
  --w.checking;
}

void spawn_suspect(world& w, const sess_ptr& s, std::string what) {
  ++w.checking;
  asio::co_spawn(s->s.get_executor(), suspect(w, s, std::move(what)), asio::detached);
}

/// The fenced increment of an exclusive section: read the name's counter, then write counter+1
/// and a log key named by the caller, only if `fence` holds. A lost update (two holders inside
/// at once) leaves the counter below the number of log keys.
asio::awaitable<void> fenced_increment(world& w, client& c, compare fence, std::string name, sess_ptr s,
                                       std::string stamp) {
  auto counter = "stress-data/" + name + "/counter";
  auto [ge, got] = co_await c.async_get(counter, asio::as_tuple(use_awaitable));
  if (ge) {
    ++w.fenced_skipped;
    co_return;
  }
  long v = got.kvs.empty() ? 0 : std::stol(got.kvs.front().value);
  auto log = "stress-data/" + name + "/log/" + stamp;
  auto t = txn().when(std::move(fence)).then(txn_op::put(counter, std::to_string(v + 1))).then(txn_op::put(log, "1"));
  auto [te, tr] = co_await c.async_txn(t, asio::as_tuple(use_awaitable));
  if (te) {
    w.fenced_unknown.insert(log);  // timed out or cut: applied or not, the log key tells
  } else if (tr.succeeded) {
    w.fenced_ok.insert(log);
  } else {
    w.fenced_rejected.insert(log);
    spawn_suspect(w, s, "fenced write rejected: " + log);
  }
}

/// After an exclusive hold ended well (unlock or resign succeeded), its fence must never pass
/// again: the key is gone, or was put again before the next local holder got it. A marker
/// written under it shows a stale holder's write that would have landed.
asio::awaitable<void> probe_stale(world& w, client& c, compare fence, std::string name, std::string stamp) {
  auto marker = "stress-data/" + name + "/stale/" + stamp;
  auto t = txn().when(std::move(fence)).then(txn_op::put(marker, "1"));
  auto [ec, r] = co_await c.async_txn(t, asio::as_tuple(use_awaitable));
  ++w.probes;
  if (!ec && r.succeeded) w.note(name + ": the fence of a finished hold still passes: " + stamp);
}

/// Counts an outcome. A loss reported to a caller (session_lost, or not_leader right after a
/// campaign won) must come with a real one: its session doomed by us or known lost soon.
void tally(world& w, int kind, const char* step, error_code ec, const sess_ptr& s, const std::string& stamp) {
  ++w.outcomes[std::string(kind_names[kind]) + " " + step + ": " + (ec ? ec.message() : "ok")];
  if (ec == error::session_lost || ec == error::not_leader)
    spawn_suspect(w, s, std::string(kind_names[kind]) + " " + step + " told " + ec.message() + ": " + stamp);
}

/// After a cut-short operation (and 2 ms, for a grant already posted when the cut came to be
/// given back on the strand): it must not have handed over a hold. (The lock objects no longer
/// keep a hold to look at; a grant that was not given back leaves a key of a live session, which
/// the check at the end of the run finds.)
template <class Hold>
asio::awaitable<void> expect_not_held(world& w, int k, const choice& c, const Hold& got) {
  co_await sleep_for(2ms);
  if (!got.key().empty()) w.note(std::string(kind_names[c.kind]) + " cancelled but held, caller " + std::to_string(k));
}

/// An exclusive section under `held` (a mutex's or an rw_mutex writer's hold): the fenced
/// increment, the hold's time, the release, and the probe of its fence once released.
template <class Hold>
asio::awaitable<void> exclusive_section(world& w, int k, sess_ptr s, const choice& c, std::string name,
                                        std::string stamp, Hold& held) {
  auto& cl = *w.clients[s->client];
  auto fence = held.fence();  // named: a temporary across co_await trips g++ 12
  {
    inside in(w, name, inside::exclusive, k, s, 1);
    co_await fenced_increment(w, cl, fence, name, s, stamp);
    co_await sleep_for(ms(c.hold_ms));
  }
  auto [ue] = co_await held.async_release(asio::as_tuple(use_awaitable));
  tally(w, c.kind, "unlock", ue, s, stamp);
  if (!ue && c.probe) co_await probe_stale(w, cl, fence, name, stamp);
}

asio::awaitable<void> one_op(world& w, int k, sess_ptr s, const choice& c, std::string stamp) {
  auto& cl = *w.clients[s->client];
  auto name = lock_name(c.kind, c.name);
  const auto aborted = error_code(asio::error::operation_aborted);
  if (c.kind == mutex_lock || c.kind == mutex_try) {
    mutex m(s->s, name);
    auto start = [&](auto tok) { return c.kind == mutex_try ? m.async_try_lock(std::move(tok)) : m.async_lock(std::move(tok)); };
    auto [ec, held] = co_await cancellable(start, c);
    tally(w, c.kind, "lock", ec, s, stamp);
    if (ec == aborted) co_await expect_not_held(w, k, c, held);
    if (ec) co_return;
    co_await exclusive_section(w, k, s, c, name, stamp, held);
  } else if (c.kind == rw_write || c.kind == rw_try_write) {
    rw_mutex rw(s->s, name);
    auto start = [&](auto tok) {
      return c.kind == rw_try_write ? rw.async_try_lock(std::move(tok)) : rw.async_lock(std::move(tok));
    };
    auto [ec, held] = co_await cancellable(start, c);
    tally(w, c.kind, "lock", ec, s, stamp);
    if (ec == aborted) co_await expect_not_held(w, k, c, held);
    if (ec) co_return;
    co_await exclusive_section(w, k, s, c, name, stamp, held);
  } else if (c.kind == rw_read || c.kind == rw_try_read) {
    rw_mutex rw(s->s, name);
    auto start = [&](auto tok) {
      return c.kind == rw_try_read ? rw.async_try_lock_shared(std::move(tok)) : rw.async_lock_shared(std::move(tok));
    };
    auto [ec, held] = co_await cancellable(start, c);
    tally(w, c.kind, "lock", ec, s, stamp);
    if (ec == aborted) co_await expect_not_held(w, k, c, held);
    if (ec) co_return;
    {
      inside in(w, name, inside::reader, k, s, 1);
      co_await sleep_for(ms(c.hold_ms));
    }
    auto [ue] = co_await held.async_release(asio::as_tuple(use_awaitable));
    tally(w, c.kind, "unlock", ue, s, stamp);
  } else if (c.kind == sem_acquire || c.kind == sem_try) {
    semaphore sem(s->s, name, kPermits);
    auto start = [&](auto tok) {
      return c.kind == sem_try ? sem.async_try_acquire(c.n, std::move(tok)) : sem.async_acquire(c.n, std::move(tok));
    };
    auto [ec, held] = co_await cancellable(start, c);
    tally(w, c.kind, "acquire", ec, s, stamp);
    if (ec == aborted) co_await expect_not_held(w, k, c, held);
    if (ec) co_return;
    if (held.permits() != c.n) w.note(name + ": a hold of " + std::to_string(held.permits()) + " permits for " + std::to_string(c.n));
    {
      inside in(w, name, inside::permits, k, s, c.n);
      co_await sleep_for(ms(c.hold_ms));
    }
    auto [re] = co_await held.async_release(asio::as_tuple(use_awaitable));
    tally(w, c.kind, "release", re, s, stamp);
  } else {
    // A second campaign of one session on one name (its key) fails with already_started while
    // the first is pending or leads: keep one per session and name, so that leaders are sessions
    // and every campaign is a real one.
    auto busy = std::pair(s.get(), name);
    if (w.campaigning.count(busy)) {
      ++w.busy_skipped;
      co_return;
    }
    w.campaigning.insert(busy);
    election e(s->s, name);
    auto value = "v-" + stamp;
    w.election_values.insert(value);
    auto start = [&](auto tok) { return e.async_campaign(value, std::move(tok)); };
    auto [ec, lead] = co_await cancellable(start, c);
    tally(w, c.kind, "campaign", ec, s, stamp);
    if (ec == aborted) co_await expect_not_held(w, k, c, lead);
    if (!ec) {
      auto fence = lead.fence();
      {
        inside in(w, name, inside::exclusive, k, s, 1);
        co_await fenced_increment(w, cl, fence, name, s, stamp);
        if (c.proclaim) {
          auto again = value + "-p";
          w.election_values.insert(again);
          auto [pe] = co_await lead.async_proclaim(again, asio::as_tuple(use_awaitable));
          tally(w, c.kind, "proclaim", pe, s, stamp);
        }
        co_await sleep_for(ms(c.hold_ms));
      }
      auto [re] = co_await lead.async_release(asio::as_tuple(use_awaitable));
      tally(w, c.kind, "resign", re, s, stamp);
      if (!re && c.probe) co_await probe_stale(w, cl, fence, name, stamp);
    }
    w.campaigning.erase(busy);
  }
}

asio::awaitable<void> caller(world& w, int k) {
  std::mt19937_64 rng(w.seed * 1000003u + static_cast<std::uint64_t>(k));
  long own = 0;
  while (clock_type::now() < w.deadline) {
    auto c = draw(rng, k);
    auto s = w.slots[static_cast<std::size_t>(c.slot)];
    auto stamp = "c" + std::to_string(s->client) + "-k" + std::to_string(k) + "-" + std::to_string(++own);
    ++w.started;
    w.current[static_cast<std::size_t>(k)] = std::string(kind_names[c.kind]) + " " + stamp;
    co_await one_op(w, k, s, c, stamp);
    w.current[static_cast<std::size_t>(k)].clear();
    ++w.completed;
  }
}

asio::awaitable<sess_ptr> new_session(world& w, int client_index) {
  for (;;) {
    auto [ec, s] = co_await session::async_create(*w.clients[static_cast<std::size_t>(client_index)],
                                                  session_options{.ttl = kTtl}, asio::as_tuple(use_awaitable));
    if (!ec) co_return std::make_shared<sess>(sess{std::move(s), client_index});
    co_await sleep_for(100ms);  // a faulted proxy: try again
  }
}

/// Ends a random session now and then (lease revoked by its client or by another, closed,
/// orphaned, or dropped: revoked by its destructor once its last user lets go) and puts a new
/// one in its slot.
asio::awaitable<void> chaos(world& w) {
  std::mt19937_64 rng(w.seed ^ 0x9e3779b97f4a7c15ull);
  auto u = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  while (clock_type::now() < w.deadline - 2s) {
    auto pause = u(300, 2500), slot = u(0, kSlots - 1), how = u(0, 4);
    co_await sleep_for(ms(pause));
    auto old = w.slots[static_cast<std::size_t>(slot)];
    old->doomed = true;
    ++w.chaos;
    if (how <= 1) {
      auto& by = how == 0 ? *w.clients[static_cast<std::size_t>(old->client)] : *w.judge;
      co_await by.async_lease_revoke(old->s.lease(), asio::as_tuple(use_awaitable));
    } else if (how == 2) {
      co_await old->s.async_close(asio::as_tuple(use_awaitable));
    } else if (how == 3) {
      old->s.orphan();
    }
    w.slots[static_cast<std::size_t>(slot)] = co_await new_session(w, old->client);
  }
}

/// Faults on one client's proxy at a time: replies delayed past request_timeout, connections
/// held (nothing passes, nobody told), or cut.
asio::awaitable<void> faults(world& w) {
  std::mt19937_64 rng(w.seed ^ 0xc2b2ae3d27d4eb4full);
  auto u = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  while (clock_type::now() < w.deadline - 3s) {
    auto pause = u(500, 3000), p = u(0, kClients - 1), kind = u(0, 2), length = u(100, 1500);
    co_await sleep_for(ms(pause));
    auto& proxy = *(*w.proxies)[static_cast<std::size_t>(p)];
    ++w.faults;
    if (kind == 0) proxy.delay(1500ms);
    else if (kind == 1) proxy.hold();
    else proxy.cut();
    co_await sleep_for(ms(kind == 0 ? length + 500 : length));
    proxy.restore();
    proxy.delay(0ms);
  }
}

/// Follows one election on the judge: every leader seen must be a value some caller campaigned
/// or proclaimed; returns the last state seen.
asio::awaitable<void> observe(world& w, std::string name, asio::cancellation_slot stop,
                              std::optional<std::optional<key_value>>& last) {
  election_observer o(*w.judge, name);
  for (;;) {
    auto [ec, v] = co_await o.async_next(asio::bind_cancellation_slot(stop, asio::as_tuple(use_awaitable)));
    if (ec) co_return;
    if (v && !w.election_values.count(v->value)) w.note(name + ": observed unknown leader value " + v->value);
    last = v;
  }
}

std::uint64_t env_or(const char* name, std::uint64_t fallback) {
  auto v = std::getenv(name);
  return v && *v ? std::stoull(v) : fallback;
}

}  // namespace

BOOST_AUTO_TEST_CASE(seeded_stress_of_the_recipes_under_faults) {
  auto seed = env_or("COETCD_STRESS_SEED", std::random_device{}() ^ static_cast<std::uint64_t>(
                                                                        clock_type::now().time_since_epoch().count()));
  auto seconds = env_or("COETCD_STRESS_SECONDS", 40);
  BOOST_TEST_MESSAGE("stress seed " << seed << " for " << seconds << " s (COETCD_STRESS_SEED=" << seed << " replays it)");
  std::cerr << "stress: seed " << seed << ", " << seconds << " s\n";

  etcd_process etcd;
  std::vector<std::unique_ptr<tcp_proxy>> proxies;
  asio::io_context ioc;
  world w;
  w.seed = seed;
  w.proxies = &proxies;
  w.current.resize(kCallers);
  for (int i = 0; i < kClients; ++i) {
    proxies.push_back(std::make_unique<tcp_proxy>(etcd.endpoint()));
    client_options o;
    o.endpoints = {proxies.back()->endpoint()};
    o.request_timeout = 1s;  // the proxy's 1.5 s delays outlast it
    w.clients.push_back(std::make_unique<client>(ioc, o));
  }
  client judge(ioc, options_for(etcd));
  w.judge = &judge;

  run_for(ioc, [](world& w, std::uint64_t seconds) -> asio::awaitable<void> {
    auto ex = co_await asio::this_coro::executor;
    for (int i = 0; i < kSlots; ++i) w.slots.push_back(co_await new_session(w, i % kClients));
    std::vector<asio::cancellation_signal> stop_observing(kNames);
    std::vector<std::optional<std::optional<key_value>>> last(kNames);
    int observing = kNames;
    for (int i = 0; i < kNames; ++i)
      asio::co_spawn(ex, observe(w, lock_name(campaign, i), stop_observing[i].slot(), last[i]),
                     [&observing](std::exception_ptr e) {
                       BOOST_TEST(!e);
                       --observing;
                     });
    w.deadline = clock_type::now() + std::chrono::seconds(seconds);
    int running = kCallers + 2;
    auto done = [&running](std::exception_ptr e) {
      BOOST_TEST(!e, "a stress coroutine threw");
      --running;
    };
    for (int k = 0; k < kCallers; ++k) asio::co_spawn(ex, caller(w, k), done);
    asio::co_spawn(ex, chaos(w), done);
    asio::co_spawn(ex, faults(w), done);

    // Every operation completes: a hang shows here (which caller, in what) before run_for's limit.
    auto settle_by = w.deadline + 12s;
    while (running > 0 && clock_type::now() < settle_by) co_await sleep_for(20ms);
    for (int k = 0; k < kCallers; ++k)
      BOOST_TEST(w.current[static_cast<std::size_t>(k)].empty(), "caller " << k << " hangs in " << w.current[static_cast<std::size_t>(k)]);
    BOOST_TEST_REQUIRE(running == 0, running << " stress coroutines still running");
    BOOST_TEST(w.started == w.completed);
    while (w.checking > 0) co_await sleep_for(20ms);

    // Nothing pending: no key under a name may belong to a live session (a cancelled lock's key
    // is deleted in the background, a late put swept up 1 and 4 s after its clean-up).
    std::set<std::int64_t> live;
    for (auto& s : w.slots)
      if (s->live()) live.insert(s->s.lease());
    std::vector<std::string> stray;
    for (int i = 0; i < 60; ++i) {
      stray.clear();
      auto keys = co_await w.judge->async_get("stress/", get_options{.prefix = true, .keys_only = true}, use_awaitable);
      for (auto& kv : keys.kvs)
        if (live.count(kv.lease)) stray.push_back(kv.key);
      if (stray.empty()) break;
      co_await sleep_for(100ms);
    }
    for (auto& k : stray) BOOST_TEST(false, "key of a live session left with no holder or waiter: " << k);

    for (auto& s : w.slots) co_await s->s.async_close(asio::as_tuple(use_awaitable));
    w.slots.clear();
    // Orphaned leases run out within their TTL.
    for (int i = 0; i < 100 && co_await count_keys(*w.judge, "stress/") > 0; ++i) co_await sleep_for(100ms);
    for (int kind : {mutex_lock, rw_write, sem_acquire, campaign})
      for (int i = 0; i < kNames; ++i) {
        auto name = lock_name(kind, i);
        auto prefix = name + "/";
        auto left = co_await count_keys(*w.judge, prefix);
        BOOST_TEST(left == 0, "keys left under " << prefix);
      }
    for (int i = 0; i < 50; ++i) {
      bool quiet = true;
      for (auto& l : last) quiet &= l.has_value() && !l->has_value();
      if (quiet) break;
      co_await sleep_for(20ms);
    }
    for (int i = 0; i < kNames; ++i) {
      BOOST_TEST((last[i].has_value() && !last[i]->has_value()), "the observer of " << lock_name(campaign, i) << " still sees a leader");
      stop_observing[i].emit(asio::cancellation_type::terminal);
    }
    while (observing > 0) co_await sleep_for(10ms);

    // The fenced counters: each equals the log keys written with it (no lost update), every
    // increment told it succeeded has its log key, and none told it was rejected has one.
    std::set<std::string> applied;
    for (int kind : {mutex_lock, rw_write, campaign})
      for (int i = 0; i < kNames; ++i) {
        auto name = lock_name(kind, i);
        auto counter_key = "stress-data/" + name + "/counter", log_prefix = "stress-data/" + name + "/log/";
        auto counter = co_await w.judge->async_get(counter_key, use_awaitable);
        long value = counter.kvs.empty() ? 0 : std::stol(counter.kvs.front().value);
        auto logs = co_await w.judge->async_get(log_prefix, get_options{.prefix = true, .keys_only = true}, use_awaitable);
        for (auto& kv : logs.kvs) applied.insert(kv.key);
        BOOST_TEST(value == static_cast<long>(logs.kvs.size()), name << ": counter " << value << ", fenced increments applied " << logs.kvs.size());
        auto stale_prefix = "stress-data/" + name + "/stale/";
        auto stale = co_await w.judge->async_get(stale_prefix, get_options{.prefix = true, .count_only = true}, use_awaitable);
        BOOST_TEST(stale.count == 0, name << ": " << stale.count << " writes under the fence of a finished hold landed");
      }
    for (auto& p : applied)
      BOOST_TEST((w.fenced_ok.count(p) || w.fenced_unknown.count(p)), "applied but told rejected or never sent: " << p);
    for (auto& ok : w.fenced_ok) BOOST_TEST(applied.count(ok) == 1u, "told it succeeded, not in etcd: " << ok);

    for (auto& v : w.violations) BOOST_TEST(false, v);
    std::ostringstream summary;
    summary << "seed " << w.seed << ": " << w.completed << " operations, " << w.fenced_ok.size() << " fenced increments ok, "
            << w.fenced_rejected.size() << " rejected, " << w.fenced_unknown.size() << " unknown (" << applied.size()
            << " applied in all), " << w.fenced_skipped << " skipped (read failed), " << w.busy_skipped
            << " campaigns skipped (session busy on the name), " << w.chaos << " sessions ended, " << w.faults
            << " proxy faults, " << w.probes << " stale fences probed, " << w.late_entries
            << " entered under an ended session beside live holders, " << w.violations.size() << " violations, "
            << w.warnings.size() << " warnings\n";
    std::cerr << "stress: " << summary.str();
    for (auto& [what, n] : w.outcomes) summary << "  " << what << ": " << n << "\n";
    BOOST_TEST_MESSAGE(summary.str());
    BOOST_TEST(w.fenced_ok.size() > 0u);
  }(w, seconds), std::chrono::seconds(seconds) + 40s);
  for (auto& c : w.clients) c->close();
  judge.close();
}
