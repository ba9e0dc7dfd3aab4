// The explorer's world (test_explore): the seed and length of a run, the random choices, clients
// behind fault proxies on the shared etcd (or on the endpoints a suite gives, test_explore_cluster),
// sessions (some sharing a lease across clients), recipe objects and the holds actors own, how an
// acquisition is cut short, and how a case stops.
#pragma once

#include "actor_hold.hpp"
#include "history.hpp"

#include "../support/fixture.hpp"
#include "../support/tcp_proxy.hpp"

#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/post.hpp>

#include <array>
#include <cstdlib>
#include <initializer_list>
#include <iostream>
#include <memory>
#include <optional>
#include <random>

namespace coetcd::test::explore {

using ms = std::chrono::milliseconds;

inline std::uint64_t env_u64(const char* name, std::uint64_t fallback) {
  auto v = std::getenv(name);
  return v && *v ? std::stoull(v) : fallback;
}

/// The run's seed (COETCD_EXPLORE_SEED, else random) and its length in seconds across every case
/// (COETCD_EXPLORE_SECONDS, default 60), read once.
struct run_config {
  std::uint64_t seed = 0;
  double seconds = 60;
  static const run_config& get() {
    static const run_config c = [] {
      run_config r;
      r.seed = env_u64("COETCD_EXPLORE_SEED", std::random_device{}() ^ static_cast<std::uint64_t>(
                                                   clock_type::now().time_since_epoch().count()));
      r.seconds = static_cast<double>(env_u64("COETCD_EXPLORE_SECONDS", 60));
      std::cerr << "explore: seed " << r.seed << ", " << r.seconds << " s (COETCD_EXPLORE_SEED=" << r.seed
                << " replays the choices)\n";
      return r;
    }();
    return c;
  }
};

/// Every random choice of one coroutine: each draws from its own generator, seeded from the
/// case's one, so its stream of choices depends on the seed alone (etcd's timing still varies).
class chooser {
 public:
  explicit chooser(std::uint64_t seed) : rng_(seed) {}
  int between(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  bool chance(int percent) { return between(0, 99) < percent; }
  /// An index drawn with the given weights.
  int weighted(std::initializer_list<int> weights) {
    int total = 0, i = 0;
    for (int w : weights) total += w;
    int x = between(0, total - 1);
    for (int w : weights) {
      if (x < w) return i;
      x -= w;
      ++i;
    }
    return i - 1;
  }
  std::uint64_t next() { return rng_(); }

 private:
  std::mt19937_64 rng_;
};

struct sess_rec {
  int id = 0, client = 0;
  session s;
  std::int64_t lease = 0;
  bool closed = false, orphaned = false;
  bool doomed = false;  // its lease is being ended on purpose (expiry.hpp): nothing new starts on it
  bool client_closed = false;  // its client was closed under it (churn.hpp): orphaned with it
  int adopted_from = -1;
  bool usable() const { return !closed && !orphaned && !doomed && !client_closed && !s.lost(); }
};

/// One recipe object; any number of actors may use it (one at a time for an election).
struct obj_rec {
  int id = 0, session = 0;
  recipe kind = recipe::mutex;
  std::string name;
  std::unique_ptr<coetcd::mutex> m;
  std::unique_ptr<semaphore> sem;
  std::unique_ptr<election> el;
  std::unique_ptr<coetcd::rw_mutex> rw;
  bool alive = true, busy = false;
  int moves = 0;  // times moved into another variable (churn.hpp)
  long destroyed_at = 0;
  int pending = 0;        // acquisitions in flight
  std::int64_t told = 0;  // holders told through it (permits, for a semaphore) whose actors still hold
  /// The client told of a grant (lock_acquired, leader_changed) for this object's session and
  /// name while an acquisition of the object was pending, and no acquisition of that session and
  /// name has completed since: the grant may be on its way to one of this object's callers.
  bool grant_landed = false;
  bool granted_untold() const { return alive && pending > 0 && grant_landed; }
};
using obj_ptr = std::shared_ptr<obj_rec>;

/// When, and how, an acquisition is cut short: never, or a cancellation of a random type emitted
/// after a random delay (a timeout is the same thing).
struct cut_plan {
  bool armed = false;
  ms after{0};
  asio::cancellation_type type = asio::cancellation_type::terminal;
};

inline cut_plan draw_cut(chooser& c) {
  cut_plan p;
  int how = c.weighted({35, 20, 30, 15});
  if (how == 0) return p;
  p.armed = true;
  p.after = ms(how == 1 ? c.between(0, 3) : how == 2 ? c.between(3, 300) : c.between(300, 2500));
  p.type = std::array{asio::cancellation_type::terminal, asio::cancellation_type::partial,
                      asio::cancellation_type::total}[static_cast<std::size_t>(c.between(0, 2))];
  return p;
}

/// Where a world's clients connect instead of the shared etcd (test_explore_cluster): each
/// client's endpoints, and the judge's. The world then has no proxies of its own (no link_faults).
struct world_links {
  std::vector<std::vector<std::string>> clients;
  std::vector<std::string> judge;
};

struct world {
  /// Three clients on the shared etcd (server()), two behind proxies of the world; or, with
  /// `links`, one client per entry of links.clients on those endpoints.
  world(asio::io_context& ioc_, std::string label_, std::uint64_t run_seed, std::uint64_t case_seed, double seconds_,
        const world_links& links = {})
      : ioc(ioc_), label(label_), seed(run_seed), choose(case_seed), h(label_), seconds(seconds_),
        names_prefix("explore/" + label_ + "/"), links_(links) {
    const int n = links.clients.empty() ? 3 : static_cast<int>(links.clients.size());
    for (int i = 0; i < n; ++i) {
      if (links_.clients.empty() && i < 2) proxies.push_back(std::make_unique<tcp_proxy>(server().endpoint()));
      clients.push_back(make_client(i));
    }
    judge = std::make_unique<client>(ioc, links_.clients.empty() ? options_for(server()) : on(links_.judge));
  }
  ~world() {
    *self_ = nullptr;  // the clients' event hooks may run after the world is gone
    for (auto& c : clients) c->close();
    for (auto& c : retired) c->close();
    judge->close();
  }
  /// Client `i`: on the shared etcd behind proxy `i` for 0 and 1, direct for 2; with links, on
  /// links.clients[i].
  std::unique_ptr<client> make_client(int i) {
    client_options o;
    if (!links_.clients.empty()) o = on(links_.clients[static_cast<std::size_t>(i)]);
    else o = i < 2 ? via(*proxies[static_cast<std::size_t>(i)]) : options_for(server());
    o.completions = completion_mode::thread;  // a polling client would take CPU from etcd
    // The grants this client makes, as they land (on its strand, a turn or more before the
    // caller's handler runs): what the destroyer and the mover aim at.
    o.on_event = [self = self_, i](const coetcd::event& e) {
      if (*self) (*self)->grant_seen(i, e);
    };
    return std::make_unique<client>(ioc, o);
  }
  /// Client `c` told of a grant to one of its sessions (a lock or permits taken, a campaign
  /// won): objects of that session and name with an acquisition pending may have it on its way.
  void grant_seen(int c, const coetcd::event& e) {
    if (e.kind != event_kind::lock_acquired && e.kind != event_kind::leader_changed) return;
    for (auto& o : objects) {
      if (!o->alive || o->pending == 0 || o->name != e.name) continue;
      auto& s = *sessions[static_cast<std::size_t>(o->session)];
      if (s.client == c && s.lease == e.lease && !s.client_closed) o->grant_landed = true;
    }
  }
  /// An acquisition through `o` completed: whatever grant was on its way to the session and name
  /// has arrived (or was given back).
  void acquisition_done(const obj_rec& o) {
    for (auto& x : objects)
      if (x->session == o.session && x->name == o.name) x->grant_landed = false;
  }
  static client_options on(const std::vector<std::string>& endpoints) {
    client_options o;
    o.endpoints = endpoints;
    o.request_timeout = std::chrono::seconds(5);
    return o;
  }

  std::shared_ptr<world*> self_ = std::make_shared<world*>(this);  // null once the world is gone
  asio::io_context& ioc;
  std::string label;
  std::uint64_t seed;  // the run's (COETCD_EXPLORE_SEED)
  chooser choose;      // the case's: draws the seed of each of its coroutines, in a fixed order
  history h;
  double seconds;
  std::string names_prefix;  // every name explored in the case is under it
  std::vector<std::unique_ptr<tcp_proxy>> proxies;  // in front of clients 0 and 1; client 2 is direct (none with links)
  std::vector<std::unique_ptr<client>> clients;
  // Clients closed and replaced mid-case (churn.hpp): kept until the sessions and objects made
  // from them are gone, as their lifetimes require.
  std::vector<std::unique_ptr<client>> retired;
  std::unique_ptr<client> judge;  // direct, never faulted by the world: reads and clean-ups of the checks
  world_links links_;             // where the clients connect (empty: the shared etcd)
  std::vector<std::unique_ptr<sess_rec>> sessions;
  std::vector<obj_ptr> objects;
  // The holds actors own, by their history id (weak: the actor is the owner; a released or
  // dropped one goes), for the checks that ask a hold what it says (expiry.hpp).
  std::map<long, std::weak_ptr<actor_hold>> holding;
  /// A hold dropped without a release, and the fences it built while it held: they must stop
  /// passing once its release in the background lands (checked at the end: check_dropped_fences).
  struct dropped_fence {
    long hold = 0;
    std::vector<std::string> names;  // the hold's names (a multi_lock's: one per part)
    std::vector<int> sessions;       // and their sessions
    std::vector<compare> fences;
  };
  std::vector<dropped_fence> dropped;
  std::map<long, std::shared_ptr<asio::cancellation_signal>> cancels;  // acquisitions in flight
  long next_cancel = 0;
  std::map<std::int64_t, int> sessions_on_lease;  // every session that ever kept the lease
  std::set<std::int64_t> revoked;  // leases a session close revoked, or the case ends on purpose (expiry.hpp)
  std::set<std::int64_t> expired;  // leases lost otherwise (a fault outlasted the TTL): holds not judged
  std::map<std::pair<std::string, std::int64_t>, std::set<int>> key_users;  // sessions by (name, lease)
  clock_type::time_point deadline;
  bool stopping = false;
  std::set<std::string> fence_told_ok, fence_told_rejected;
  std::chrono::seconds session_ttl{10};  // of every session new_session makes without a TTL of its own
  std::map<std::string, long> tally;  // what the churn did (moves, client closes), for the summary
  // Operations that concern a client beyond their entry's session: a multi_lock's parts'
  // sessions, a leader's client (churn.hpp judges what was pending on a client it closed).
  std::map<long, std::vector<int>> op_sessions;
  std::map<long, int> op_client;
  std::vector<int> client_gen = std::vector<int>(3, 0);  // closes of each client so far
  // Told when client `c` closes (at seq): a case's own records of what lived on it.
  std::vector<std::function<void(int c, long seq)>> on_client_close;

  std::string name(const std::string& leaf) const { return names_prefix + leaf; }
  std::string data_key(const std::string& name, const std::string& leaf) const {
    return "explore-data/" + name + "/" + leaf;
  }
  bool lease_shared(std::int64_t lease) const {
    auto it = sessions_on_lease.find(lease);
    return it != sessions_on_lease.end() && it->second > 1;
  }
  asio::any_io_executor executor() { return ioc.get_executor(); }

  /// A session callers may use now; one draw whatever the sessions are, so that a coroutine's
  /// later choices do not depend on how many there were.
  sess_rec* pick_usable(chooser& c) {
    const int x = c.between(0, 1 << 20);
    // Half the time one of the two newest: a lease adopted from another client at once is such a
    // pair, and what its two sessions do first (their first keys, their first holds) is where
    // adoption bugs live (two sessions numbering their semaphore keys alike, say).
    const bool newest = c.chance(50);
    std::vector<sess_rec*> ok;
    for (auto& s : sessions)
      if (s->usable()) ok.push_back(s.get());
    if (ok.empty()) return nullptr;
    if (newest && ok.size() >= 2) return ok[ok.size() - 1 - static_cast<std::size_t>(x) % 2];
    return ok[static_cast<std::size_t>(x) % ok.size()];
  }

  /// An object of `kind` on `name` under `s`: one that exists (not busy) more often than not, at
  /// most three per session and name, so several callers and objects of a session meet. One
  /// election per session and name: two would share its key and both lead, as in Go.
  obj_ptr object_for(chooser& c, recipe kind, sess_rec& s, const std::string& name, std::int64_t permits) {
    const std::size_t most = kind == recipe::election ? 1 : 3;
    const bool reuse = c.chance(60);
    const int x = c.between(0, 1 << 20);
    std::vector<obj_ptr> mine;
    for (auto& o : objects)
      if (o->alive && o->session == s.id && o->name == name && o->kind == kind) mine.push_back(o);
    std::vector<obj_ptr> free;
    for (auto& o : mine)
      if (!o->busy) free.push_back(o);
    if (!free.empty() && (mine.size() >= most || reuse)) return free[static_cast<std::size_t>(x) % free.size()];
    if (mine.size() >= most) return nullptr;
    auto o = std::make_shared<obj_rec>();
    o->id = static_cast<int>(objects.size());
    o->session = s.id;
    o->kind = kind;
    o->name = name;
    if (kind == recipe::mutex) o->m = std::make_unique<coetcd::mutex>(s.s, name);
    if (kind == recipe::semaphore) o->sem = std::make_unique<semaphore>(s.s, name, permits);
    if (kind == recipe::election) o->el = std::make_unique<election>(s.s, name);
    if (kind == recipe::rw_mutex) o->rw = std::make_unique<coetcd::rw_mutex>(s.s, name);
    h.note(-1, "object.create", name, o->id, s.id, s.lease, "");
    objects.push_back(o);
    return o;
  }

  /// A session did something to a mutex or election name (acquire, release, destroy). Sessions
  /// of one lease share the name's key (documented: one holder as far as etcd can tell), so any
  /// of them may delete or rewrite the key another holds through, now or in a clean-up later:
  /// once two sessions of a lease have used a name, holds of that lease on it are not judged
  /// (those running end here, later ones count no time; see shared_key).
  void touch(recipe kind, const std::string& name, std::int64_t lease, int session, long seq) {
    if (kind == recipe::semaphore) return;  // one key per acquisition: nothing is shared
    auto& users = key_users[{name, lease}];
    users.insert(session);
    if (users.size() > 1)
      h.end_holds_if([&](const hold& x) { return x.name == name && x.lease == lease && x.session != session; }, seq);
  }
  bool shared_key(const std::string& name, std::int64_t lease) const {
    auto it = key_users.find({name, lease});
    return it != key_users.end() && it->second.size() > 1;
  }

  /// Destroys an object now, whatever is pending on it: its pending acquisitions are aborted (a
  /// grant on its way to one is given back). The holds taken through it are their actors' and go
  /// on: each ends when its actor releases or drops it.
  void destroy(const obj_ptr& o, int actor, const std::string& why) {
    if (!o->alive) return;
    auto& s = *sessions[static_cast<std::size_t>(o->session)];
    auto seq = h.note(actor, "destroy", o->name, o->id, s.id, s.lease,
                      why + " (" + std::to_string(o->pending) + " pending, " + std::to_string(o->told) + " told)");
    touch(o->kind, o->name, s.lease, s.id, seq);
    o->alive = false;
    o->destroyed_at = seq;
    o->m.reset();
    o->sem.reset();
    o->el.reset();
    o->rw.reset();
  }

  /// A new session on client `c` (with a lease of `ttl`), or one adopting `lease` (of session `from`).
  asio::awaitable<sess_rec*> new_session(int c, std::int64_t lease = 0, int from = -1,
                                         std::chrono::seconds ttl = std::chrono::seconds(0)) {
    auto op = h.invoke(-1, lease ? "session.adopt" : "session.create", "", -1, from, lease);
    op_client[op] = c;
    auto created = session::async_create(*clients[static_cast<std::size_t>(c)],
                                         session_options{.ttl = ttl.count() ? ttl : session_ttl, .lease = lease},
                                         asio::as_tuple(use_awaitable));
    auto [ec, s] = co_await std::move(created);
    if (ec) {
      h.complete(op, "client " + std::to_string(c) + ": " + ec.message());
      co_return nullptr;
    }
    auto r = std::make_unique<sess_rec>();
    r->id = static_cast<int>(sessions.size());
    r->client = c;
    r->lease = s.lease();
    r->s = std::move(s);
    r->adopted_from = from;
    ++sessions_on_lease[r->lease];
    h.complete(op, "s" + std::to_string(r->id) + " on client " + std::to_string(c) + ", lease " + hex(r->lease) +
                       (ttl.count() ? ", TTL " + std::to_string(ttl.count()) + " s" : ""));
    // A loss nobody caused (a close revokes; orphan and the end abort the wait; a client closed
    // under it stops renewing, as an orphan): the lease may have expired in etcd before anyone
    // here knew, so its holds cannot be judged.
    r->s.async_wait_lost([this, id = r->id, lease = r->lease](error_code ec, loss_reason why) {
      if (ec || revoked.count(lease)) return;  // operation_aborted: ended by its owner
      if (sessions[static_cast<std::size_t>(id)]->client_closed) return;
      expired.insert(lease);
      h.note(-1, "session.lost", "", -1, id, lease, why.cause.message());
    });
    sessions.push_back(std::move(r));
    co_return sessions.back().get();
  }

  /// Closes a session: its lease is revoked, so every hold under the lease ends here, of this
  /// session and of any other that adopted the lease.
  asio::awaitable<void> close_session(sess_rec& s) {
    auto op = h.invoke(-1, "session.close", "", -1, s.id, s.lease);
    h.end_holds_if([&](const hold& x) { return x.lease == s.lease; }, h.last_seq());
    s.closed = true;
    revoked.insert(s.lease);
    auto closing = s.s.async_close(asio::as_tuple(use_awaitable));
    auto [ec] = co_await std::move(closing);
    h.complete(op, ec ? ec.message() : "ok");
  }

  /// Orphans a session: its keys live on with the lease; its callers' holds end here (they can no
  /// longer trust them), those of another session on the lease go on.
  void orphan_session(sess_rec& s) {
    auto seq = h.note(-1, "session.orphan", "", -1, s.id, s.lease, "");
    h.end_holds_if([&](const hold& x) { return x.session == s.id; }, seq);
    s.orphaned = true;
    s.s.orphan();
  }

  /// Cuts every acquisition still waiting short (the end of a case).
  void cancel_all() {
    auto all = cancels;
    for (auto& [k, sig] : all) sig->emit(asio::cancellation_type::terminal);
  }

  int running = 0;  // the case's coroutines still running
  void spawn(asio::awaitable<void> a) {
    ++running;
    asio::co_spawn(ioc, std::move(a), [this](std::exception_ptr e) {
      --running;
      if (!e) return;
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& x) {
        h.fail({"the explorer's coroutines do not throw", "", x.what(), 0, 0, {}});
      } catch (...) {
        h.fail({"the explorer's coroutines do not throw", "", "a non-standard exception", 0, 0, {}});
      }
    });
  }

  /// Waits for the deadline, then stops the case: no new operation starts, and every
  /// acquisition still waiting is cut short until every coroutine has ended. Whether they all
  /// did within `grace`; otherwise each operation still pending is a violation (an operation
  /// must complete, and a cut-short one promptly), and the clients are closed to end them.
  asio::awaitable<bool> drain(std::chrono::seconds grace = std::chrono::seconds(15)) {
    while (clock_type::now() < deadline) co_await sleep_for(ms(100));
    stopping = true;
    auto until = clock_type::now() + grace;
    while (running > 0 && clock_type::now() < until) {
      cancel_all();
      co_await sleep_for(ms(100));
    }
    if (running == 0) co_return true;
    for (auto& e : h.open_operations())
      h.fail({"every operation completes (one cut short at the end, promptly)", e.name,
              "still pending " + std::to_string(grace.count()) + " s after the end: " + history::describe(e), e.seq, h.last_seq(), {}});
    for (auto& c : clients) c->close();
    until = clock_type::now() + std::chrono::seconds(5);
    while (running > 0 && clock_type::now() < until) co_await sleep_for(ms(100));
    co_return false;
  }
};

/// The cancellation of one acquisition: emitted by a timer as its plan says, or by the end of
/// the case; it outlives the operation (its timer's handler keeps it).
class canceller {
 public:
  canceller(world& w, const cut_plan& p) : w_(w), sig_(std::make_shared<asio::cancellation_signal>()), key_(++w.next_cancel) {
    w.cancels.emplace(key_, sig_);
    if (!p.armed) return;
    timer_ = std::make_shared<asio::steady_timer>(w.executor(), p.after);
    timer_->async_wait([sig = sig_, type = p.type](error_code ec) {
      if (!ec) sig->emit(type);
    });
  }
  ~canceller() {
    if (timer_) timer_->cancel();
    w_.cancels.erase(key_);
  }
  canceller(const canceller&) = delete;
  canceller& operator=(const canceller&) = delete;
  asio::cancellation_slot slot() { return sig_->slot(); }

 private:
  world& w_;
  std::shared_ptr<asio::cancellation_signal> sig_;
  long key_;
  std::shared_ptr<asio::steady_timer> timer_;
};

/// Waits for an operation started with a callback (set() as its handler), so a caller can do
/// something else in the turn that started it.
class callback_result {
 public:
  explicit callback_result(asio::any_io_executor ex) : timer_(ex, clock_type::time_point::max()) {}
  void set(error_code ec) {
    ec_ = ec;
    timer_.cancel();
  }
  asio::awaitable<error_code> wait() {
    while (!ec_) {
      auto waiting = timer_.async_wait(asio::as_tuple(use_awaitable));
      co_await std::move(waiting);
    }
    co_return *ec_;
  }

 private:
  asio::steady_timer timer_;
  std::optional<error_code> ec_;
};

}  // namespace coetcd::test::explore
