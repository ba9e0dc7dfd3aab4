// The operation explorer (issue 54): random histories of the mutex, semaphore, election and
// double barrier, by callers over several sessions of three clients, under slow, held and cut
// links, with leases adopted across clients, objects destroyed with operations pending (their
// holds going on) and holds dropped without a release, each history checked against what the
// recipe promises; and of plain KV calls and watches, checked
// for linearizability and etcd's watch guarantees (test/explore/). COETCD_EXPLORE_SEED replays a
// run's choices, COETCD_EXPLORE_SECONDS sets the length each case takes a share of (default 60).
#define BOOST_TEST_MODULE coetcd_explore
#include "support/fixture.hpp"

#include "explore/barrier.hpp"
#include "explore/kv_case.hpp"
#include "explore/locks.hpp"
#include "explore/run_case.hpp"

using namespace coetcd;
using namespace coetcd::test;
using namespace coetcd::test::explore;

BOOST_TEST_GLOBAL_FIXTURE(shared_etcd);

namespace {

/// A case of this suite: run_case, then what it did; `holds_expected`: a lock case, whose callers
/// must have held something.
template <class Body>
void explore_case(const std::string& label, int index, double share, bool holds_expected, Body body) {
  run_case(label, index, share, std::move(body), [&](world& w, const run_config& run) {
    std::size_t holds = w.h.holds().size(), ops = 0;
    for (auto& e : w.h.events()) ops += e.phase == entry::invoke;
    BOOST_TEST_MESSAGE("explore " << label << ": " << ops << " operations, " << holds << " holds, "
                                  << w.sessions.size() << " sessions, " << w.objects.size() << " objects, "
                                  << w.h.violations().size() << " violations (COETCD_EXPLORE_SEED=" << run.seed
                                  << " --run_test=" << label << " replays the choices)");
    BOOST_TEST(ops > 0u, "explore " << label << ": no operation ran");
    if (holds_expected) BOOST_TEST(holds > 0u, "explore " << label << ": no caller ever held anything");
  });
}

}  // namespace

// Mutexes: 12 callers on two names through objects shared per session (up to three per session
// and name), locks and tries cut short at random, holders writing through their hold's fence()
// and probing it after the release (or, for a hold dropped without one, at the end), objects
// destroyed as a local hand-off or a grant reaches them and while holds taken through them go on.
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
// exceed the permits), objects destroyed as permits reach them, holds dropped without a release.
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
// through their election::hold's fence (their key's create revision), objects destroyed as a win
// reaches them, leaderships dropped without a resign.
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
  h.discount_holds_if([&](const explore::hold& x) { return x.id == z; });
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
  // A hold dropped without a release ends at the drop, as a released one ends at the release's
  // call (its release lands in the background, later, and etcd's hold with it): a holder told
  // after the drop is no violation; two holds of two leases before their drops are (1).
  history dr("dropped");
  auto held_d = [&](int session, std::int64_t lease) {
    auto op = dr.invoke(0, "lock", "m", 0, session, lease, 1);
    dr.complete(op, "ok");
    return dr.begin_hold("m", 0, 0, session, lease, 1);
  };
  auto drop = [&](long id) {
    dr.note(0, "drop", "m", 0, 0, 0, "");
    dr.end_hold(id, dr.last_seq());
  };
  auto d1 = held_d(1, 0xa);
  drop(d1);
  auto d2 = held_d(2, 0xb), d3 = held_d(3, 0xc);
  drop(d2);
  drop(d3);
  check_exclusive(dr, "dropped", mutex_conflict);
  BOOST_TEST_REQUIRE(dr.violations().size() == 1u);
  BOOST_TEST((dr.violations().front().holds == std::vector<long>{d2, d3}));
}

// The shortest history a violation is printed with: exactly the entries of its name from the last
// point at which nothing was in flight on it (no hold, no operation pending) up to the end of its
// stretch, none of another name or of the schedule (which its window shows); and, for a name that
// was never quiet so near, the last 40 before the violation.
BOOST_AUTO_TEST_CASE(excerpt_is_the_names_history_since_it_was_quiet) {
  history h("excerpt");
  auto a = h.invoke(0, "lock", "m", 0, 1, 0xa);  // #1
  h.complete(a, "ok");                            // #2
  auto ha = h.begin_hold("m", 0, 0, 1, 0xa, 1);
  auto ua = h.invoke(0, "unlock", "m", 0, 1, 0xa);  // #3
  h.end_hold(ha, h.last_seq());
  h.complete(ua, "ok");                                  // #4: m quiet from here
  h.note(-1, "fault.cut", "", -1, -1, 0, "client 0");    // #5: the schedule's
  auto o = h.invoke(3, "lock", "other", 3, 3, 0xc);      // #6: another name
  auto b = h.invoke(1, "lock", "m", 1, 2, 0xb);          // #7: m busy from here on
  h.complete(b, "ok");                                   // #8
  auto hb = h.begin_hold("m", 1, 1, 2, 0xb, 1);
  auto c = h.invoke(2, "lock", "m", 2, 4, 0xd);          // #9
  h.complete(o, "ok");                                   // #10
  h.note(-1, "session.orphan", "", -1, 2, 0xb, "");      // #11: a note on hb's lease
  h.complete(c, "ok");                                   // #12: a second holder
  auto hc = h.begin_hold("m", 2, 2, 4, 0xd, 1);
  auto ub = h.invoke(1, "unlock", "m", 1, 2, 0xb);       // #13: the overlap ends
  h.end_hold(hb, h.last_seq());
  h.complete(ub, "ok");                                  // #14
  auto uc = h.invoke(2, "unlock", "m", 2, 4, 0xd);       // #15
  h.end_hold(hc, h.last_seq());
  h.complete(uc, "ok");                                  // #16
  h.set_revision(13, 77);
  check_exclusive(h, "exclusive", mutex_conflict);
  BOOST_TEST_REQUIRE(h.violations().size() == 1u);
  const auto& v = h.violations().front();
  BOOST_TEST(v.from == 12);
  BOOST_TEST(v.to == 13);
  const auto x = h.excerpt(v);
  BOOST_TEST(x.quiet == 6);
  std::vector<long> seqs;
  for (auto* e : x.entries) seqs.push_back(e->seq);
  BOOST_TEST(seqs == (std::vector<long>{7, 8, 9, 12, 13}), boost::test_tools::per_element());
  const auto text = h.excerpt_text(v);
  std::size_t lines = 0;
  for (auto at = text.find("\n    #"); at != std::string::npos; at = text.find("\n    #", at + 1)) ++lines;
  BOOST_TEST(lines == 5u, text);
  BOOST_TEST(text.find("rev 77") != std::string::npos, text);
  BOOST_TEST(text.find("other") == std::string::npos, text);
  BOOST_TEST(h.window(v).find("session.orphan") != std::string::npos);  // the window has more
  BOOST_TEST(text.find("session.orphan") == std::string::npos, text);

  // Never quiet: a hold that never ends, then 50 refused tries; the last 40 entries before the
  // violation's stretch (#101..#102) and the stretch.
  history busy("busy");
  auto first = busy.invoke(0, "lock", "n", 0, 1, 0xa);  // #1
  busy.complete(first, "ok");                           // #2
  busy.begin_hold("n", 0, 0, 1, 0xa, 1);
  for (int i = 0; i < 50; ++i) busy.complete(busy.invoke(1, "try_lock", "n", 1, 2, 0xb), "busy");  // #3..#102
  const violation made{"made", "n", "by hand", 101, 102, {}};
  const auto y = busy.excerpt(made);
  BOOST_TEST(y.quiet == 0);
  BOOST_TEST(y.left_before == 60u);
  BOOST_TEST(y.kept_before == 40u);
  BOOST_TEST_REQUIRE(y.entries.size() == 42u);
  BOOST_TEST(y.entries.front()->seq == 61);
  BOOST_TEST(y.entries.back()->seq == 102);
}

// KV: 8 callers (3 and 3 behind the faulted links, with deadlines of 0.5 and 1 s; 2 direct, in a
// namespace) put, get, delete, compare-and-set and put two keys in one txn on 4 keys. Each key's
// history must be linearizable (a call failed ambiguously: maybe applied), revisions must follow
// real time, and etcd's history must hold every write answered, once, and nothing else.
BOOST_AUTO_TEST_CASE(kv_histories_are_linearizable) {
  explore_case("kv_histories_are_linearizable", 4, 0.25, false, [](world& w) { return run_kv_case(w, kv_case{}); });
}

// Watches: the KV callers (2, 2 and 1) under four watchers through the faulted links, two from the
// case's first revision (one with prev_kv), one from a revision already past, one from its
// creation; each must deliver exactly etcd's history, in order, a revision in one batch, across
// every resumption, up to the case's last write.
BOOST_AUTO_TEST_CASE(watch_histories_keep_etcds_guarantees) {
  explore_case("watch_histories_keep_etcds_guarantees", 5, 0.25, false, [](world& w) {
    kv_case kc;
    kc.actors = {2, 2, 1};
    kc.watchers = true;
    return run_kv_case(w, kc);
  });
}

namespace {

/// A hand-made answered operation on key `key`, its call and completion at the given seqs.
kv_op made(kv_op::kind_t kind, long call, long ret, std::int64_t revision, std::string key = "k") {
  kv_op o;
  o.kind = kind;
  o.op = call;
  o.call = call;
  o.ret = ret;
  o.key = std::move(key);
  o.revision = revision;
  return o;
}
kv_op put(long call, long ret, std::string v, std::int64_t rev) {
  auto o = made(kv_op::put, call, ret, rev);
  o.value = std::move(v);
  return o;
}
kv_op get(long call, long ret, std::optional<std::string> v, std::int64_t mod, std::int64_t rev, std::string key = "k") {
  auto o = made(kv_op::get, call, ret, rev, std::move(key));
  o.read = std::move(v);
  o.read_mod = mod;
  return o;
}
kv_op del(long call, long ret, std::int64_t deleted, std::int64_t rev) {
  auto o = made(kv_op::del, call, ret, rev);
  o.deleted = deleted;
  return o;
}
kv_op cas(long call, long ret, std::optional<std::string> expect, std::string v, bool ok, std::int64_t rev,
          std::optional<std::string> read = {}, std::int64_t mod = 0) {
  auto o = made(kv_op::cas, call, ret, rev);
  o.expect = std::move(expect);
  o.value = std::move(v);
  o.succeeded = ok;
  o.read = std::move(read);
  o.read_mod = mod;
  return o;
}
kv_op with(kv_op o, kv_op::outcome_t outcome) {
  o.outcome = outcome;
  return o;
}
std::size_t count(const history& h, const std::string& part) {
  std::size_t n = 0;
  for (auto& v : h.violations()) n += v.invariant.find(part) != std::string::npos;
  return n;
}

}  // namespace

// The KV and watch checks on hand-made histories (no etcd): a linearizable history passes, a
// stale read and a lost write do not, a write that failed ambiguously passes applied, applied
// late and never, but not applied and then undone; each revision and watch check sees the
// violation written into it, and none where there is none.
BOOST_AUTO_TEST_CASE(kv_checks_see_hand_made_violations) {
  auto verdict = [](const std::vector<kv_op>& ops, long budget = 100000) { return check_register("k", ops, budget).verdict; };
  const std::vector<kv_op> fine{put(1, 2, "v1", 10),          get(3, 4, "v1", 10, 10), put(5, 10, "v2", 11),
                                get(6, 7, "v1", 10, 10),      get(8, 9, "v2", 11, 11), cas(11, 12, "v2", "v3", true, 12),
                                cas(13, 14, "v2", "v4", false, 12, "v3", 12),          del(15, 16, 1, 13),
                                del(17, 18, 0, 13),           get(19, 20, {}, 0, 13),  cas(21, 22, {}, "v5", true, 14),
                                get(23, 24, "v5", 14, 14)};
  BOOST_TEST(verdict(fine) == lin_result::linearizable);
  BOOST_TEST(verdict(fine, 3) == lin_result::unknown);  // out of steps: no verdict, no hang
  history quiet("fine");
  check_revisions(quiet, fine);
  BOOST_TEST(quiet.violations().empty());

  // A stale read: v1 after v2 was written.
  auto stale = check_register("k", {put(1, 2, "v1", 10), put(3, 4, "v2", 11), get(5, 6, "v1", 10, 11)}, 100000);
  BOOST_TEST(stale.verdict == lin_result::violated);
  BOOST_TEST(stale.to == 6);  // the window ends with the read no order explains
  BOOST_TEST(stale.from <= 3);  // and starts before the write it missed
  // A lost write: answered, then absent.
  BOOST_TEST(verdict({put(1, 2, "v1", 10), get(3, 4, {}, 0, 10)}) == lin_result::violated);
  // An ambiguous write: applied, applied after its failure came back, never applied; but not
  // undone once read, and a write surely not applied never shows.
  const auto v2 = with(put(3, 4, "v2", 0), kv_op::maybe);
  BOOST_TEST(verdict({put(1, 2, "v1", 10), v2, get(5, 6, "v2", 11, 11)}) == lin_result::linearizable);
  BOOST_TEST(verdict({put(1, 2, "v1", 10), v2, get(5, 6, "v1", 10, 11), get(7, 8, "v2", 11, 11)}) == lin_result::linearizable);
  BOOST_TEST(verdict({put(1, 2, "v1", 10), v2, get(5, 6, "v1", 10, 10), get(7, 8, "v1", 10, 10)}) == lin_result::linearizable);
  BOOST_TEST(verdict({put(1, 2, "v1", 10), v2, get(5, 6, "v2", 11, 11), get(7, 8, "v1", 10, 11)}) == lin_result::violated);
  BOOST_TEST(verdict({put(1, 2, "v1", 10), with(put(3, 4, "v2", 0), kv_op::failed), get(5, 6, "v2", 11, 11)}) ==
             lin_result::violated);

  // Unknown outcomes settled by etcd's history: v2 is not there, so nothing explains a read of
  // it; a delete there that nobody answered explains the key's absence after it, and without it
  // (an unknown delete alone, not in the history) nothing does.
  const std::vector<kv_op> unsettled{put(1, 2, "v1", 10), v2, get(5, 6, "v2", 11, 11)};
  history settling("settling");
  BOOST_TEST(verdict(settle_unknown(settling, unsettled, {{10, "k", "v1"}})) == lin_result::violated);
  BOOST_TEST(verdict(settle_unknown(settling, unsettled, {{10, "k", "v1"}, {11, "k", "v2"}})) == lin_result::linearizable);
  const std::vector<kv_op> unknown_delete{put(1, 2, "v1", 10), with(del(3, 4, 0, 0), kv_op::maybe), get(5, 6, "v1", 10, 10),
                                          get(7, 8, {}, 0, 11)};
  BOOST_TEST(verdict(settle_unknown(settling, unknown_delete, {{10, "k", "v1"}, {11, "k", {}}})) == lin_result::linearizable);
  BOOST_TEST(verdict(settle_unknown(settling, unknown_delete, {{10, "k", "v1"}})) == lin_result::violated);
  BOOST_TEST(settling.violations().empty());

  // Revisions: two writes at one; an answer older than one completed before its call; a write
  // whose outcome was unknown read at two revisions (applied twice); a refused write read.
  history revs("revisions");
  check_revisions(revs, {put(1, 2, "v1", 10), put(3, 4, "v2", 10)});
  BOOST_TEST(count(revs, "share a revision") == 1u);
  history old("old");
  check_revisions(old, {put(1, 2, "v1", 10), get(3, 4, {}, 0, 9, "j")});
  BOOST_TEST(old.violations().size() == 1u);
  BOOST_TEST(count(old, "follow real time") == 1u);
  history twice("twice");
  const std::vector<kv_op> reread{v2, get(5, 6, "v2", 11, 11), get(7, 8, "v2", 12, 12)};
  check_revisions(twice, reread);
  BOOST_TEST(count(twice, "at most once") == 1u);
  BOOST_TEST(verdict(reread) == lin_result::linearizable);  // only the revisions tell
  history refused("refused");
  check_revisions(refused, {with(put(1, 2, "v1", 0), kv_op::failed), get(3, 4, "v1", 9, 10)});
  BOOST_TEST(count(refused, "surely not applied") == 1u);

  // Watches against a reference: r10 k=v1 | r11 k=v2 and j=v3 (one txn) | r12 del k.
  const std::vector<seen_event> ref{{10, true, "k", "v1", {}, 1, 1}, {11, true, "k", "v2", {}, 2, 2},
                                    {11, true, "j", "v3", {}, 2, 2}, {12, false, "k", "", {}, 3, 3}};
  auto judged = [&](std::vector<seen_event> events, const std::string& part, std::size_t total = 1) {
    history h("watch");
    watch_rec r;
    r.label = r.name = "w";
    r.start = 10;
    r.events = std::move(events);
    r.reached_end = r.done = true;
    check_watch_order(h, r);
    check_watch_delivery(h, r, ref);
    BOOST_TEST(h.violations().size() == (part.empty() ? 0u : total), "watch check \"" << part << "\"");
    return count(h, part);
  };
  BOOST_TEST(judged(ref, "") == 0u);
  BOOST_TEST(judged({ref[0], ref[1], ref[3]}, "every change") == 1u);                                  // a gap
  BOOST_TEST(judged({ref[0], ref[1], {11, true, "j", "v3", {}, 3, 3}, ref[3]}, "one batch") == 1u);   // split
  // Twice: and so, from there on, not etcd's history either.
  BOOST_TEST(judged({ref[0], ref[0], ref[1], ref[2], ref[3]}, "each change once", 2) == 1u);
  // etcd's history against the calls: v1 applied twice, v2 answered but absent.
  history applied("applied");
  check_applied(applied, {put(1, 2, "v1", 10), put(3, 4, "v2", 11)},
                {{10, true, "k", "v1", {}, 1, 1}, {12, true, "k", "v1", {}, 2, 2}}, "end");
  BOOST_TEST(count(applied, "at most once") == 1u);
  BOOST_TEST(count(applied, "holds the writes answered") == 1u);
  // A read at rev 12 of a key etcd's history deleted at 11.
  history reads("reads");
  check_applied(reads, {put(1, 2, "v1", 10), get(3, 4, "v1", 10, 12)},
                {{10, true, "k", "v1", {}, 1, 1}, {11, false, "k", "", {}, 2, 2}}, "end");
  BOOST_TEST(count(reads, "at the read's revision") == 1u);
  // A txn's two puts, one of them missing from etcd's history.
  auto half = put(1, 2, "a", 10), other = put(1, 2, "b", 10);
  half.group = other.group = 1;
  other.key = "j";
  history whole("whole");
  check_applied(whole, {half, other}, {{10, true, "k", "a", {}, 1, 1}}, "end");
  BOOST_TEST(count(whole, "applies whole") == 1u);
}
