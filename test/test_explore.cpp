// The operation explorer (issue 54), its first slice: random histories of the mutex, semaphore,
// election and double barrier, by callers over several sessions of three clients, under slow, held
// and cut links, with leases adopted across clients and objects destroyed with operations pending,
// each history checked against what the recipe promises (test/explore/). COETCD_EXPLORE_SEED
// replays a run's choices, COETCD_EXPLORE_SECONDS sets its length across the cases (default 60).
#define BOOST_TEST_MODULE coetcd_explore
#include "support/fixture.hpp"

#include "explore/barrier.hpp"
#include "explore/locks.hpp"

using namespace coetcd;
using namespace coetcd::test;
using namespace coetcd::test::explore;

BOOST_TEST_GLOBAL_FIXTURE(shared_etcd);

namespace {

/// Gives up a case whose coroutines still run: they reference the world and the io_context, so
/// both are left allocated (the clients closed first, so no thread of theirs posts any more).
void abandon(std::unique_ptr<asio::io_context> ioc, std::unique_ptr<world> w) {
  for (auto& c : w->clients) c->close();
  w->judge->close();
  ioc->restart();
  ioc->run_for(std::chrono::seconds(2));
  (void)w.release();
  (void)ioc.release();
}

/// Runs one case for `share` of the run's seconds. Its choices come from the run's seed and the
/// case's index, so `--run_test=<case>` with the same seed replays it alone.
template <class Body>
void explore_case(const std::string& label, int index, double share, bool holds_expected, Body body) {
  const auto& run = run_config::get();
  const std::uint64_t seed = run.seed ^ (0x9e3779b97f4a7c15ull * static_cast<std::uint64_t>(index + 1));
  const double seconds = std::max(3.0, run.seconds * share);
  BOOST_TEST_MESSAGE("explore " << label << ": COETCD_EXPLORE_SEED=" << run.seed << ", " << seconds << " s");
  auto ioc = std::make_unique<asio::io_context>();
  auto w = std::make_unique<world>(*ioc, label, run.seed, seed, seconds);
  const auto limit = std::chrono::milliseconds(static_cast<long>(seconds * 1000)) + std::chrono::seconds(90);
  std::string broke;
  try {
    run_for(*ioc, body(*w), limit);
  } catch (const std::exception& x) {
    broke = x.what();
  } catch (...) {  // run_for's BOOST_FAIL: past its time limit
    broke = "past its time limit";
  }
  if (!broke.empty()) {
    report(*w);
    BOOST_ERROR("explore " << label << " (COETCD_EXPLORE_SEED=" << run.seed << ") did not finish: " << broke);
    abandon(std::move(ioc), std::move(w));
    return;
  }
  report(*w);
  std::size_t holds = w->h.holds().size(), ops = 0;
  for (auto& e : w->h.events()) ops += e.phase == entry::invoke;
  BOOST_TEST_MESSAGE("explore " << label << ": " << ops << " operations, " << holds << " holds, "
                                << w->sessions.size() << " sessions, " << w->objects.size() << " objects, "
                                << w->h.violations().size() << " violations (COETCD_EXPLORE_SEED=" << run.seed
                                << " --run_test=" << label << " replays the choices)");
  BOOST_TEST(ops > 0u, "explore " << label << ": no operation ran");
  if (holds_expected) BOOST_TEST(holds > 0u, "explore " << label << ": no caller ever held anything");
  if (w->running > 0) {
    BOOST_ERROR("explore " << label << ": " << w->running << " coroutines still running");
    abandon(std::move(ioc), std::move(w));
  }
}

}  // namespace

// Mutexes: 12 callers on two names through objects shared per session (up to three per session
// and name), locks and tries cut short at random, holders writing through is_owner() and
// probing it after the unlock, objects destroyed as a local hand-off or a grant reaches them.
BOOST_AUTO_TEST_CASE(mutex_histories) {
  explore_case("mutex_histories", 0, 0.3, true, [](world& w) {
    lock_case lc;
    lc.kind = recipe::mutex;
    lc.actors = 12;
    lc.names = {w.name("m0"), w.name("m1")};
    lc.sessions = {.adopt = 15, .orphan_adopt = 10, .close = 15, .orphan = 10, .fresh = 30, .fresh_adopt = 10};
    return run_lock_case(w, lc);
  });
}

// Semaphores of 1 and 2 permits: 10 callers taking 1..permits, sessions sharing a lease across
// clients from their first acquisition on (each acquisition is its own key: together they never
// exceed the permits), objects destroyed as permits reach them.
BOOST_AUTO_TEST_CASE(semaphore_histories) {
  explore_case("semaphore_histories", 1, 0.25, true, [](world& w) {
    lock_case lc;
    lc.kind = recipe::semaphore;
    lc.actors = 10;
    lc.names = {w.name("s0"), w.name("s1")};
    lc.permits = {{lc.names[0], 1}, {lc.names[1], 2}};
    lc.sessions = {.adopt = 20, .orphan_adopt = 10, .close = 10, .orphan = 5, .fresh = 15, .fresh_adopt = 40};
    return run_lock_case(w, lc);
  });
}

// Elections: 8 candidates on two names, one campaign at a time per object, leaders writing
// through their key's create revision, objects destroyed as a win reaches them.
BOOST_AUTO_TEST_CASE(election_histories) {
  explore_case("election_histories", 2, 0.2, true, [](world& w) {
    lock_case lc;
    lc.kind = recipe::election;
    lc.actors = 8;
    lc.names = {w.name("e0"), w.name("e1")};
    lc.sessions = {.adopt = 15, .orphan_adopt = 10, .close = 15, .orphan = 10, .fresh = 30, .fresh_adopt = 10};
    return run_lock_case(w, lc);
  });
}

// Double barriers of 2 or 3 with up to two extra participants, mostly some entering first and the
// rest together a moment later.
BOOST_AUTO_TEST_CASE(double_barrier_histories) {
  explore_case("double_barrier_histories", 3, 0.25, false, [](world& w) { return run_barrier_case(w); });
}

// The checks themselves, on hand-made histories (no etcd): each must see the violation written
// into it, and none where there is none.
BOOST_AUTO_TEST_CASE(checks_see_hand_made_violations) {
  history h("hand-made");
  auto held = [&](const std::string& name, int session, std::int64_t lease, std::int64_t n) {
    auto op = h.invoke(0, "lock", name, 0, session, lease, n);
    h.complete(op, "ok");
    return h.begin_hold(name, 0, 0, session, lease, n);
  };
  auto release = [&](long id) {
    h.invoke(0, "unlock", "", 0, 0, 0);
    h.end_hold(id, h.last_seq());
  };
  // m: two leases overlap (1); one lease, two sessions overlap (allowed); one session twice (1).
  auto a = held("m", 1, 0xa, 1), b = held("m", 2, 0xb, 1);
  release(a);
  release(b);
  auto c = held("m", 3, 0xc, 1), d = held("m", 4, 0xc, 1);
  release(c);
  release(d);
  auto e = held("m", 5, 0xe, 1), f = held("m", 5, 0xe, 1);
  release(f);
  release(e);
  // One after the other, and a hold that counts no time beside another: no violation.
  auto g = held("m", 6, 0xf, 1);
  release(g);
  auto k = held("m", 7, 0x10, 1);
  auto z = held("m", 8, 0x11, 1);
  h.discount_holds_if([&](const hold& x) { return x.id == z; });
  release(k);
  check_exclusive(h, "exclusive", mutex_conflict);
  BOOST_TEST(h.violations().size() == 2u);
  for (auto& v : h.violations()) BOOST_TEST(!h.window(v).empty());
  // Elections: one leader per lease, sessions of a lease together.
  history el("elections");
  auto l1 = el.begin_hold("e", 0, 0, 1, 0xa, 1);
  auto l2 = el.begin_hold("e", 0, 1, 2, 0xa, 1);
  el.note(0, "x", "e", 0, 0, 0, "");
  el.end_hold(l1, el.last_seq());
  el.end_hold(l2, el.last_seq());
  check_exclusive(el, "leaders", election_conflict);
  BOOST_TEST(el.violations().empty());
  // s (1 permit): two of one lease at once (1); t (2 permits): 1 + 1 fits, then 2 + 1 does not (1).
  history p("permits");
  auto held_p = [&](const std::string& name, int session, std::int64_t lease, std::int64_t n) {
    p.note(0, "acquired", name, 0, session, lease, "");
    return p.begin_hold(name, 0, 0, session, lease, n);
  };
  auto end_p = [&](long id) {
    p.note(0, "released", "", 0, 0, 0, "");
    p.end_hold(id, p.last_seq());
  };
  auto s1 = held_p("s", 1, 0xa, 1), s2 = held_p("s", 2, 0xa, 1);
  end_p(s1);
  end_p(s2);
  auto t1 = held_p("t", 1, 0xa, 1), t2 = held_p("t", 2, 0xb, 1);
  end_p(t1);
  auto t3 = held_p("t", 3, 0xc, 2);
  end_p(t2);
  end_p(t3);
  auto never_ends = held_p("s", 4, 0xd, 1);
  (void)never_ends;
  check_permits(p, {{"s", 1}, {"t", 2}});
  BOOST_TEST(p.violations().size() == 2u);
  for (auto& v : p.violations()) BOOST_TEST(v.holds.size() == 2u, v.what);
}
