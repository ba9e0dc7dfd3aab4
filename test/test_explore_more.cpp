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
    w.ttl = std::chrono::seconds(5);
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
// session, as the mutex case; writers write through is_owner() and probe it after the unlock,
// readers write through theirs. A writer holds alone, readers only beside readers.
BOOST_AUTO_TEST_CASE(rw_mutex_histories) {
  more_case("rw_mutex_histories", 20, 0.14, [](world& w) {
    return run_lock_case(w, churned(recipe::rw_mutex, 12, {w.name("rw0"), w.name("rw1")}));
  });
}

// multi_lock: 6 callers take random subsets of three names (parts of one session, or a session
// each, listed in random order) beside 4 plain mutex callers on the same names; all or none,
// one holder per name whichever kind holds it, and every waiter granted at the end.
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
// objects moved while an acquisition is pending (or in the turn a grant lands), clients closed
// under their sessions, and the liveness end.
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
