// The operation explorer (issue 54) on the data recipes: random histories of stm, counter, queue
// and priority_queue, cache, and registration, over three clients (two behind fault proxies), each checked
// against a model built from etcd's own record of the case's keys (test/explore/data*.hpp).
// COETCD_EXPLORE_SEED replays a run's choices, COETCD_EXPLORE_SECONDS sets its length across the
// cases (default 60: 20 % each, 15 % registration).
#define BOOST_TEST_MODULE coetcd_explore_data
#include "support/fixture.hpp"

#include "explore/data_cache.hpp"
#include "explore/data_counter.hpp"
#include "explore/data_queue.hpp"
#include "explore/data_registration.hpp"
#include "explore/data_stm.hpp"
#include "explore/run_case.hpp"

using namespace coetcd;
using namespace coetcd::test;
using namespace coetcd::test::explore;

BOOST_TEST_GLOBAL_FIXTURE(shared_etcd);

namespace {

/// A case of this suite: run_case, then what it did, from the summary its check recorded.
template <class Body>
void data_case(const std::string& label, int index, double share, Body body) {
  run_case(label, index, share, std::move(body), [&](world& w, const run_config& run) {
    std::size_t ops = 0;
    std::string said = "no summary (the case ended before its check)";
    for (auto& e : w.h.events()) {
      ops += e.phase == entry::invoke;
      if (e.what == "summary") said = e.result;
    }
    BOOST_TEST_MESSAGE("explore " << label << ": " << ops << " operations; " << said << "; " << w.h.violations().size()
                                  << " violations (COETCD_EXPLORE_SEED=" << run.seed << " --run_test=" << label
                                  << " replays the choices)");
    BOOST_TEST(ops > 0u, "explore " << label << ": no operation ran");
  });
}

}  // namespace

// stm: 8 actors run random bodies (read 1-3 of 5 keys, write 1-2 from what they read, a receipt
// key each) at every isolation level, commit groups on and off, some cut short, beside two plain
// writers; each applied run's reads replayed in commit order against a model of the keys, and
// each body run again only for a conflict of its own.
BOOST_AUTO_TEST_CASE(stm_histories) {
  data_case("stm_histories", 10, 0.2, [](world& w) { return run_stm_case(w); });
}

// counter: 9 actors add positive amounts, compare-and-set (some cut short) and read through 10
// objects on three clients; no add lost or made twice, each read a value the key held.
BOOST_AUTO_TEST_CASE(counter_histories) {
  data_case("counter_histories", 11, 0.2, [](world& w) { return run_counter_case(w); });
}

// queue and priority_queue: 4 producers, 5 consumers (many cut short), sessions closed and
// replaced; each item taken once or left once.
BOOST_AUTO_TEST_CASE(queue_histories) {
  data_case("queue_histories", 12, 0.2, [](world& w) { return run_queue_case(w); });
}

// cache: 3 writers, a cache per client with readers coming and going, compaction while a cache
// is cut off; its range against etcd at its revision, each reader's updates against etcd's record.
BOOST_AUTO_TEST_CASE(cache_histories) {
  data_case("cache_histories", 13, 0.2, [](world& w) { return run_cache_case(w); });
}

// registration: 6 registrations of 3 keys (two per key, on different clients), TTLs of 2-5 s,
// stopped and made again, beside an interferer that revokes their leases, deletes their keys and
// puts over them; every key settles on one live registration, in etcd with its value and lease.
BOOST_AUTO_TEST_CASE(registration_histories) {
  data_case("registration_histories", 14, 0.15, [](world& w) { return run_registration_case(w); });
}

// The checks themselves on hand-made records (no etcd): a counter's subset sums, the versions of
// a key by revision, the difference of two states.
BOOST_AUTO_TEST_CASE(data_checks_see_hand_made_cases) {
  const auto sums = subset_sums({3, 5, 9});
  for (std::int64_t x : {0, 3, 5, 8, 9, 12, 14, 17}) BOOST_TEST(can_make(sums, x), x);
  for (std::int64_t x : {1, 2, 4, 6, 7, 10, 11, 13, 15, 16, 18, -1}) BOOST_TEST(!can_make(sums, x), x);

  etcd_record r;
  r.first = 10;
  key_value a{.key = "p/a", .value = "1", .create_revision = 5, .mod_revision = 5, .version = 1};
  r.initial.emplace(a.key, a);
  watch_event put_b{.type = watch_event::kind::put, .kv = {.key = "p/b", .value = "x", .create_revision = 11, .mod_revision = 11, .version = 1}};
  watch_event del_a{.type = watch_event::kind::del, .kv = {.key = "p/a", .mod_revision = 12}};
  watch_event put_a{.type = watch_event::kind::put, .kv = {.key = "p/a", .value = "2", .create_revision = 13, .mod_revision = 13, .version = 1}};
  r.events = {put_b, del_a, put_a};
  const versions vs(r);
  BOOST_TEST(vs.at("p/a", 9)->value == "1");
  BOOST_TEST(vs.at("p/a", 11)->value == "1");
  BOOST_TEST(!vs.at("p/a", 12));
  BOOST_TEST(vs.at("p/a", 13)->value == "2");
  BOOST_TEST(!vs.at("p/b", 10));
  BOOST_TEST(vs.state_at(11, "p/").size() == 2u);
  BOOST_TEST(vs.state_at(12, "p/").size() == 1u);
  BOOST_TEST(state_difference(vs.state_at(13), vs.state_at(13)).empty());
  BOOST_TEST(!state_difference(vs.state_at(11), vs.state_at(13)).empty());  // p/a "1" against "2"
  BOOST_TEST(!state_difference(vs.state_at(12), vs.state_at(13)).empty());  // p/a missing
}

// The STM check on a hand-made record (no etcd): a stale read at a serializable level, a run told
// committed that etcd does not have, a change nobody made, a run told failed that was applied;
// none for a read_committed run's old value, a plain put, a commit of two runs where the second
// read the first's write, or a delete of a key that is not there (etcd records no change).
BOOST_AUTO_TEST_CASE(stm_check_sees_hand_made_violations) {
  history h("hand-made stm");
  stm_case sc;
  sc.name = "stm";
  sc.keys = {"stm/k0", "stm/k1", "stm/k2"};
  sc.receipts = "runs/";
  sc.record = std::make_shared<etcd_record>();
  auto& rec = *sc.record;
  rec.first = 10;
  rec.initial["stm/k0"] = key_value{.key = "stm/k0", .value = "init", .create_revision = 5, .mod_revision = 5, .version = 1};
  auto change = [&](const std::string& k, const std::string& v, std::int64_t rev) {
    watch_event e;
    e.kv.key = k;
    e.kv.value = v;
    e.kv.mod_revision = rev;
    rec.events.push_back(e);
  };
  long turn = 0;
  auto run = [&](isolation level, std::map<std::string, std::optional<std::string>> reads,
                 std::map<std::string, std::optional<std::string>> writes, error_code told, std::int64_t at) {
    auto r = std::make_shared<stm_run>();
    r->id = static_cast<int>(sc.runs.size()) + 1;
    r->level = level;
    r->done = true;
    r->ec = told;
    stm_body_rec b;
    b.number = r->started = 1;
    b.reads = std::move(reads);
    b.writes = std::move(writes);
    b.ended = ++turn;
    if (at) {
      for (auto& [k, v] : b.writes)
        if (v) change(k, *v, at);  // (the hand-made runs delete only keys that are not there)
      change(sc.receipts + std::to_string(r->id), r->tag(1), at);
    }
    r->bodies.push_back(std::move(b));
    sc.runs.push_back(r);
  };
  const auto ser = isolation::serializable;
  run(ser, {{"stm/k0", "init"}}, {{"stm/k0", "r1.1|a"}}, {}, 10);
  run(ser, {{"stm/k0", "init"}}, {{"stm/k1", "r2.1|b"}}, {}, 11);  // stale: k0 was r1.1|a
  run(isolation::read_committed, {{"stm/k0", "init"}}, {{"stm/k1", "r3.1|c"}}, {}, 12);
  run(ser, {{"stm/k1", std::nullopt}}, {{"stm/k1", "r4.1|x"}}, {}, 0);  // told committed, not applied
  auto p = std::make_shared<hot_put>();
  p->key = "stm/k0";
  p->value = "h0.0";
  p->done = true;
  p->revision = 13;
  sc.puts.push_back(p);
  change("stm/k0", "h0.0", 13);
  change("stm/k1", "mystery", 14);  // nobody's
  run(ser, {{"stm/k0", "h0.0"}}, {{"stm/k0", "r5.1|d"}}, {}, 15);  // one commit of two runs
  run(ser, {{"stm/k0", "r5.1|d"}}, {{"stm/k1", "r6.1|e"}}, {}, 15);
  std::stable_sort(rec.events.begin(), rec.events.end(),
                   [](const watch_event& a, const watch_event& b) { return a.kv.mod_revision < b.kv.mod_revision; });
  run(ser, {{"stm/k1", "r6.1|e"}}, {{"stm/k0", "r7.1|f"}}, make_error_code(error::conflict), 16);  // told failed, applied
  run(ser, {{"stm/k0", "r7.1|f"}}, {{"stm/k2", std::nullopt}}, {}, 17);  // a delete of nothing: no change in etcd
  check_stm(h, sc);
  std::map<std::string, int> seen;
  for (auto& v : h.violations()) ++seen[v.invariant.substr(0, 4)];
  BOOST_TEST(seen["(s1)"] == 3);
  BOOST_TEST(seen["(s2)"] == 1);
  BOOST_TEST(h.violations().size() == 4u);
  for (auto& v : h.violations()) BOOST_TEST_MESSAGE(v.invariant << ": " << v.what);
}

// The body-run check on a hand-made record (no etcd): reruns after a key read changed, after a key
// written changed (serializable_snapshot), after a read of a write etcd never applied (a member of
// the group that failed) pass, as does one in a cut of its client's link (not judged); a
// serializable rerun though the one key it read never changed fails, and so does a read_committed
// one, whose commit compares nothing, even though the key it read changed.
BOOST_AUTO_TEST_CASE(stm_rerun_check_sees_hand_made_violations) {
  history h("hand-made stm reruns");
  stm_case sc;
  sc.name = "stm";
  sc.keys = {"stm/k0", "stm/k1", "stm/k2", "stm/k3", "stm/k4"};
  sc.receipts = "runs/";
  sc.record = std::make_shared<etcd_record>();
  auto& rec = *sc.record;
  rec.first = 10;
  for (auto [k, rev] : {std::pair{0, 5}, std::pair{1, 6}, std::pair{3, 7}}) {
    const auto key = "stm/k" + std::to_string(k);
    rec.initial[key] = key_value{.key = key, .value = "init" + std::to_string(k), .create_revision = rev, .mod_revision = rev, .version = 1};
  }
  auto put = [&](const std::string& k, const std::string& v, std::int64_t rev) {  // called and answered now
    auto p = std::make_shared<hot_put>();
    p->key = k;
    p->value = v;
    p->done = true;
    p->revision = rev;
    auto op = h.invoke(100, "put", sc.name, 2, -1, 0);
    p->invoked = h.last_seq();
    p->completed = h.complete(op, "ok");
    sc.puts.push_back(p);
    watch_event e;
    e.kv.key = k;
    e.kv.value = v;
    e.kv.mod_revision = rev;
    rec.events.push_back(e);
  };
  // A run whose first body read `key` as `value` and wrote `wrote`; again() starts its second.
  auto run = [&](isolation level, int client, const std::string& key, std::string value, const std::string& wrote) {
    auto r = std::make_shared<stm_run>();
    r->id = static_cast<int>(sc.runs.size()) + 1;
    r->level = level;
    r->client = client;
    h.invoke(r->id, "stm", sc.name, client, -1, 0, r->id);
    r->invoked = h.last_seq();
    r->starts.push_back(h.last_seq());
    stm_body_rec b;
    b.number = r->started = 1;
    b.reads[key] = std::move(value);
    b.writes[wrote] = r->tag(1) + "|x";
    b.ended = h.note(r->id, "stm.body", sc.name, client, -1, 0, "");
    r->bodies.push_back(std::move(b));
    sc.runs.push_back(r);
  };
  auto again = [&] {
    for (auto& r : sc.runs) {
      r->started = 2;
      r->starts.push_back(h.last_seq());
    }
  };
  run(isolation::serializable, 2, "stm/k0", "init0", "stm/k2");            // k0 changes at 10
  run(isolation::serializable, 2, "stm/k3", "init3", "stm/k4");            // k3 never changes: fails
  run(isolation::serializable_snapshot, 2, "stm/k3", "init3", "stm/k1");   // k1, which it wrote, changes at 11
  run(isolation::serializable, 2, "stm/k4", "r9.1|x", "stm/k2");           // run 9's write, never applied
  run(isolation::read_committed, 2, "stm/k0", "init0", "stm/k2");          // compares nothing: fails
  h.note(-1, "fault.cut", "", -1, -1, 0, "client 0 for 100 ms");
  run(isolation::serializable, 0, "stm/k3", "init3", "stm/k4");            // in a cut of its link: not judged
  h.note(-1, "fault.end", "", -1, -1, 0, "client 0");
  put("stm/k0", "h100.0", 10);
  put("stm/k1", "h100.1", 11);
  again();
  put("stm/k2", "h100.2", 12);  // called after every second body began: the attempts came before 12
  const versions vs(rec);
  const auto t = check_stm_reruns(h, sc, vs);
  BOOST_TEST(t.bodies == 12);
  BOOST_TEST(t.reruns == 6);
  BOOST_TEST(t.judged == 5);
  BOOST_TEST(t.unjustified == 2);
  BOOST_TEST_REQUIRE(h.violations().size() == 2u);
  BOOST_TEST(h.violations()[0].what.rfind("run 2 ", 0) == 0, h.violations()[0].what);
  BOOST_TEST(h.violations()[1].what.rfind("run 5 ", 0) == 0, h.violations()[1].what);
  for (auto& v : h.violations()) BOOST_TEST_MESSAGE(v.invariant << ": " << v.what);
}

// The counter check on a hand-made record: on c/k, adds batched into one change and one of
// unknown outcome that was applied (no violation); on c/j, an add told a value no change reached
// (lost), a read below an add that had completed, a read of a value the key never held.
BOOST_AUTO_TEST_CASE(counter_check_sees_hand_made_violations) {
  history h("hand-made counter");
  etcd_record rec;
  rec.first = 10;
  auto change = [&](const std::string& k, std::int64_t v, std::int64_t rev) {
    watch_event e;
    e.kv.key = k;
    e.kv.value = std::to_string(v);
    e.kv.mod_revision = rev;
    rec.events.push_back(e);
  };
  change("c/k", 10, 10);
  change("c/k", 25, 11);
  change("c/k", 26, 12);
  change("c/j", 5, 13);
  change("c/j", 12, 14);
  std::vector<std::shared_ptr<add_rec>> adds;
  long seq = 0;
  auto add = [&](const std::string& k, std::int64_t delta, std::int64_t told, error_code ec = {}) {
    auto a = std::make_shared<add_rec>();
    a->key = k;
    a->delta = delta;
    a->value = told;
    a->ec = ec;
    a->done = true;
    a->invoked = ++seq;
    a->completed = ++seq;
    adds.push_back(a);
  };
  add("c/k", 4, 4);
  add("c/k", 6, 10);  // with the one before, in one change
  add("c/k", 15, 25);
  add("c/k", 1, 0, make_error_code(error::outcome_unknown));  // applied at 12
  add("c/k", 7, 0, make_error_code(error::outcome_unknown));  // not applied
  add("c/j", 5, 5);
  add("c/j", 7, 12);
  add("c/j", 9, 21);  // lost: no change reaches 21
  std::vector<std::shared_ptr<get_rec>> gets;
  auto get = [&](const std::string& k, std::int64_t v, long invoked) {
    auto g = std::make_shared<get_rec>();
    g->key = k;
    g->value = v;
    g->done = true;
    g->invoked = invoked;
    g->completed = invoked + 1;
    gets.push_back(g);
  };
  get("c/k", 10, 5);   // after the add told 10 completed: fine
  get("c/j", 5, 100);  // after the add told 12 completed: stale
  get("c/j", 7, 0);    // never held
  const auto k = judge_counter_key(h, "c", "c/k", rec, adds, gets);
  BOOST_TEST(k.first == 26);
  BOOST_TEST(h.violations().empty());
  const auto j = judge_counter_key(h, "c", "c/j", rec, adds, gets);
  BOOST_TEST(j.first == 12);
  std::map<std::string, int> seen;
  for (auto& v : h.violations()) ++seen[v.invariant.substr(0, 4)];
  BOOST_TEST(seen["(c1)"] == 2);  // the add's stretch, and the record's total below the adds told applied
  BOOST_TEST(seen["(c2)"] == 2);
  BOOST_TEST(h.violations().size() == 4u);
  for (auto& v : h.violations()) BOOST_TEST_MESSAGE(v.invariant << ": " << v.what);
}

// The queue check on a hand-made case: an item taken twice, one taken that nobody enqueued, one
// taken whose enqueue was cut short, one told enqueued that is gone, a failed dequeue carrying an
// item; none for an item left in the queue or one of unknown outcome taken once.
BOOST_AUTO_TEST_CASE(queue_check_sees_hand_made_violations) {
  history h("hand-made queue");
  queue_case qc;
  qc.q = "q";
  qc.pq = "pq";
  auto item = [&](const std::string& v, bool priority, error_code ec = {}) {
    auto it = std::make_shared<item_rec>();
    it->value = v;
    it->priority = priority;
    it->done = true;
    it->ec = ec;
    qc.items.push_back(it);
  };
  auto take = [&](const std::string& v, bool priority, error_code ec = {}) {
    auto t = std::make_shared<take_rec>();
    t->value = v;
    t->priority = priority;
    t->done = true;
    t->ec = ec;
    qc.takes.push_back(t);
  };
  item("a", false);
  item("b", false);  // left in the queue
  item("c", false, make_error_code(error::outcome_unknown));
  item("d", false, make_error_code(asio::error::operation_aborted));
  item("e", false);  // gone
  item("f", true);
  take("a", false);
  take("a", false);  // twice
  take("c", false);
  take("d", false);  // its enqueue was cut short
  take("zzz", false);  // nobody's
  take("f", true);
  take("", false, make_error_code(asio::error::operation_aborted));
  take("g", false, make_error_code(error::session_lost));  // carries an item
  const std::map<std::string, std::vector<std::string>> left{{"b", {"q/1"}}};
  const std::map<std::string, bool> left_priority{{"b", false}};
  judge_queue(h, qc, left, left_priority, {}, 0);
  std::map<std::string, int> seen;
  for (auto& v : h.violations()) ++seen[v.invariant.substr(0, 4)];
  BOOST_TEST(seen["(q1)"] == 4);
  BOOST_TEST(seen["(q2)"] == 1);
  BOOST_TEST(h.violations().size() == 5u);
  for (auto& v : h.violations()) BOOST_TEST_MESSAGE(v.invariant << ": " << v.what);
}

// The cache reader check on a hand-made record: a reader given every change with its prev_kv, then
// a reset, sees no violation; one whose update misses a delete, and one whose delete carries
// another prev_kv, each one.
BOOST_AUTO_TEST_CASE(cache_reader_check_sees_hand_made_violations) {
  history h("hand-made cache");
  etcd_record rec;
  rec.first = 10;
  const key_value a1{.key = "c/a", .value = "1", .create_revision = 5, .mod_revision = 5, .version = 1};
  const key_value b{.key = "c/b", .value = "x", .create_revision = 10, .mod_revision = 10, .version = 1};
  const key_value a2{.key = "c/a", .value = "2", .create_revision = 12, .mod_revision = 12, .version = 1};
  rec.initial.emplace(a1.key, a1);
  watch_event put_b, del_a, put_a;
  put_b.kv = b;
  del_a.type = watch_event::kind::del;
  del_a.kv.key = "c/a";
  del_a.kv.mod_revision = 11;
  put_a.kv = a2;
  rec.events = {put_b, del_a, put_a};
  const versions vs(rec);
  std::vector<const watch_event*> changes;
  for (auto& e : rec.events) changes.push_back(&e);
  auto reader = [&](std::vector<cache_update> updates) {
    reader_log r;
    r.start_rev = 9;
    r.start.emplace(a1.key, a1);
    r.updates = std::move(updates);
    r.seqs.assign(r.updates.size(), 0);
    return judge_reader(h, "c/", vs, changes, r);
  };
  auto with_prev = [](watch_event e, std::optional<key_value> prev) {
    e.prev_kv = std::move(prev);
    return e;
  };
  // Every change, then a reset to revision 12 (a/ came back).
  const auto fine = reader({cache_update{false, {put_b, with_prev(del_a, a1)}, 11}, cache_update{true, {put_a}, 12}});
  BOOST_TEST(std::get<0>(fine) == 2u);
  BOOST_TEST(std::get<1>(fine) == 1u);
  BOOST_TEST(h.violations().empty());
  reader({cache_update{false, {put_b}, 11}});  // the delete of c/a missing
  BOOST_TEST(h.violations().size() == 1u);
  reader({cache_update{false, {put_b, with_prev(del_a, b)}, 11}});  // the delete's prev_kv is another key's
  BOOST_TEST(h.violations().size() == 2u);
  for (auto& v : h.violations()) BOOST_TEST_MESSAGE(v.invariant << ": " << v.what);
}
