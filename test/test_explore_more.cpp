// The operation explorer, continued (issue 54): random histories of the rw_mutex, the multi_lock
// beside plain mutexes, and leader, and of the mutex, semaphore and election again, with recipe
// objects moved into new variables while an acquisition is pending and whole clients closed and
// opened again; each history checked against what the recipe promises, and for liveness at the
// end (test/explore/). COETCD_EXPLORE_SEED and COETCD_EXPLORE_SECONDS as for test_explore.
#define BOOST_TEST_MODULE coetcd_explore_more
#include "support/fixture.hpp"

#include "explore/leaders.hpp"
#include "explore/multi.hpp"
#include "explore/run_case.hpp"

using namespace coetcd;
using namespace coetcd::test;
using namespace coetcd::test::explore;

BOOST_TEST_GLOBAL_FIXTURE(shared_etcd);

namespace {

/// A case of this suite: run_case with sessions of a 5 s TTL (so keys a closed client left go
/// within the liveness window), then what it did. Its callers must have held something, and in
/// a case of 5 s or more, objects must have been moved and clients closed.
template <class Body>
void more_case(const std::string& label, int index, double share, Body body) {
  auto with_ttl = [body](world& w) {
    w.session_ttl = std::chrono::seconds(5);
    return body(w);
  };
  run_case(label, index, share, with_ttl, [&](world& w, const run_config& run) {
    std::size_t holds = 0, ops = 0;
    for (auto& h : w.h.holds()) holds += h.end > h.start;
    for (auto& e : w.h.events()) ops += e.phase == entry::invoke;
    std::ostringstream tally;
    for (auto& [what, n] : w.tally) tally << ", " << n << " " << what;
    BOOST_TEST_MESSAGE("explore " << label << ": " << ops << " operations, " << holds << " holds judged, "
                                  << w.sessions.size() << " sessions" << tally.str() << ", " << w.h.violations().size()
                                  << " violations (COETCD_EXPLORE_SEED=" << run.seed << " --run_test=" << label
                                  << " replays the choices)");
    BOOST_TEST(ops > 0u, "explore " << label << ": no operation ran");
    BOOST_TEST(holds > 0u, "explore " << label << ": no caller ever held anything that was judged");
    if (w.seconds < 5) return;
    BOOST_TEST(w.tally["moves"] > 0, "explore " << label << ": no object was moved");
    BOOST_TEST(w.tally["client closes"] > 0, "explore " << label << ": no client was closed");
  });
}

lock_case churned(recipe kind, int actors, std::vector<std::string> names) {
  lock_case lc;
  lc.kind = kind;
  lc.actors = actors;
  lc.names = std::move(names);
  lc.sessions = {.adopt = 15, .orphan_adopt = 10, .close = 15, .orphan = 10, .fresh = 30, .fresh_adopt = 10};
  lc.moves = lc.closes = lc.live_end = true;
  return lc;
}

}  // namespace

// rw_mutex: 12 callers, readers (55 %) and writers, on two names through objects shared per
// session, as the mutex case; writers write through their rw_mutex::hold's fence() and probe it
// after the release, readers write through their shared_hold's. A writer holds alone, readers only
// beside readers.
BOOST_AUTO_TEST_CASE(rw_mutex_histories) {
  more_case("rw_mutex_histories", 20, 0.14, [](world& w) {
    return run_lock_case(w, churned(recipe::rw_mutex, 12, {w.name("rw0"), w.name("rw1")}));
  });
}

// multi_lock: 6 callers take random subsets of three names (parts of one session, or a session
// each, listed in random order) beside 4 plain mutex callers on the same names; all or none,
// one holder per name whichever kind holds it, a multi_lock::hold that outlives its multi_lock,
// and every waiter granted at the end.
BOOST_AUTO_TEST_CASE(multi_lock_histories) {
  more_case("multi_lock_histories", 21, 0.14, [](world& w) {
    return run_multi_case(w, churned(recipe::mutex, 4, {w.name("ml0"), w.name("ml1"), w.name("ml2")}), 6);
  });
}

// leader: 6 leaders at a time on one name over the three clients, cancelled, destroyed and moved
// while campaigning or leading; never two leading, each term etcd's, runs ending as they must.
BOOST_AUTO_TEST_CASE(leader_histories) {
  more_case("leader_histories", 22, 0.14, [](world& w) { return run_leader_case(w, 6); });
}

// The mutex, semaphore (1 and 2 permits) and election cases of test_explore, shorter, with
// objects moved while an acquisition is pending (or in the turn a grant lands, or while holds
// taken through them go on), clients closed under their sessions, and the liveness end.
BOOST_AUTO_TEST_CASE(mutex_moves_and_closes) {
  more_case("mutex_moves_and_closes", 23, 0.1, [](world& w) {
    return run_lock_case(w, churned(recipe::mutex, 10, {w.name("m0"), w.name("m1")}));
  });
}

BOOST_AUTO_TEST_CASE(semaphore_moves_and_closes) {
  more_case("semaphore_moves_and_closes", 24, 0.09, [](world& w) {
    auto lc = churned(recipe::semaphore, 8, {w.name("s0"), w.name("s1")});
    lc.permits = {{lc.names[0], 1}, {lc.names[1], 2}};
    return run_lock_case(w, lc);
  });
}

BOOST_AUTO_TEST_CASE(election_moves_and_closes) {
  more_case("election_moves_and_closes", 25, 0.09, [](world& w) {
    return run_lock_case(w, churned(recipe::election, 6, {w.name("e0"), w.name("e1")}));
  });
}

// The rw_mutex and leader checks on hand-made histories (no etcd): each sees the violations
// written into it, and none where there is none.
BOOST_AUTO_TEST_CASE(rw_and_leader_checks_see_hand_made_violations) {
  history h("rw");
  auto held = [&](int session, std::int64_t lease, bool shared) {
    h.note(0, "acquired", "r", 0, session, lease, "");
    auto id = h.begin_hold("r", 0, 0, session, lease, 1);
    if (shared) h.mark_shared(id);
    return id;
  };
  auto end = [&](long id) {
    h.note(0, "released", "r", 0, 0, 0, "");
    h.end_hold(id, h.last_seq());
  };
  // Readers of three leases at once: none.
  auto a = held(1, 0xa, true), b = held(2, 0xb, true), c = held(3, 0xc, true);
  end(a), end(b), end(c);
  // A writer beside a reader of another lease (1), and of its own lease and session (1).
  auto d = held(4, 0xd, false), e = held(5, 0xe, true);
  end(e), end(d);
  auto f = held(6, 0xf, false), g = held(6, 0xf, true);
  end(g), end(f);
  // Two writers of one lease and two sessions: one holder to etcd (none); of two leases (1).
  auto i = held(7, 0x10, false), j = held(8, 0x10, false);
  end(j), end(i);
  auto k = held(9, 0x11, false), l = held(10, 0x12, false);
  end(l), end(k);
  check_exclusive(h, "rw", rw_conflict);
  BOOST_TEST(h.violations().size() == 3u);

  // Terms against etcd's record of the election: a leads (10), b waits (11) and leads once a is
  // gone (12); d comes (13) behind b and goes (14) before it led; b goes (15).
  leader_case lc;
  lc.name = "lead";
  etcd_record rec;
  rec.prefix = "lead/";
  auto event = [&](bool put, const std::string& key, std::int64_t create, std::int64_t mod) {
    watch_event ev;
    ev.type = put ? watch_event::kind::put : watch_event::kind::del;
    ev.kv.key = key;
    ev.kv.create_revision = create;
    ev.kv.mod_revision = mod;
    rec.events.push_back(ev);
  };
  event(true, "lead/a", 10, 10);
  event(true, "lead/b", 11, 11);
  event(false, "lead/a", 0, 12);
  event(true, "lead/d", 13, 13);
  event(false, "lead/d", 0, 14);
  event(false, "lead/b", 0, 15);
  history told_h("terms");
  auto told = [&](const std::string& key, std::int64_t revision, std::int64_t lease) {
    auto seq = told_h.note(0, "term", "lead", 0, -1, lease, key);
    lc.terms.push_back({told_h.begin_hold("lead", 0, 0, -1, lease, 1), seq, lease, revision, key});
  };
  told("lead/a", 10, 1);
  told("lead/b", 11, 2);
  history fine("fine");
  check_terms(fine, lc, rec, true, {});
  BOOST_TEST(fine.violations().empty());
  told("lead/d", 13, 3);  // put, but never the oldest key (1)
  told("lead/a", 10, 1);  // told after a newer term (1)
  told("lead/x", 20, 4);  // not in etcd's record (1)
  lc.rejected.push_back({lc.terms[1].hold, 2});  // a write refused to a running body (1)
  lc.rejected.push_back({lc.terms[0].hold, 1});  // the same, its lease lost to a fault (none)
  history wrong("wrong");
  check_terms(wrong, lc, rec, true, {1});
  BOOST_TEST(wrong.violations().size() == 4u);
  history partial("partial");  // an incomplete record: only the order and the refused write
  check_terms(partial, lc, rec, false, {1});
  BOOST_TEST(partial.violations().size() == 2u);
}
