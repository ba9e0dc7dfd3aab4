// The explorer's STM case (test_explore_data): random stm() bodies at every isolation level, with
// commit groups on and off, beside plain writers of the same keys, under slow, held and cut links.
// Each run puts a receipt key with its writes, so etcd's record says whether and at which
// revision it was applied; the applied runs are then replayed in commit order against a model of
// the keys (see check_stm).
#pragma once

#include "data.hpp"

#include <coetcd/stm.hpp>

namespace coetcd::test::explore {

/// One run of a body, as it went.
struct stm_body_rec {
  int number = 0;   // the run's bodies started so far, this one included
  int attempt = 0;  // tx.attempt()
  std::map<std::string, std::optional<std::string>> reads;   // key -> value read (none: absent)
  std::map<std::string, std::int64_t> mods;                  // key -> mod revision read, when asked
  std::map<std::string, std::optional<std::string>> writes;  // key -> value written (none: a delete)
  long ended = 0;   // the seq of its end: the turn order of the bodies of one group
};

/// One stm() call.
struct stm_run {
  int id = 0, actor = 0, client = 0;
  isolation level = isolation::serializable_snapshot;
  bool group = true, cut = false;
  int started = 0;                   // bodies started
  std::vector<long> starts;          // the last seq before each body started, in order
  std::vector<stm_body_rec> bodies;  // the bodies that returned (a body that threw wrote nothing)
  long invoked = 0, completed = 0;
  bool done = false;
  error_code ec;
  std::int64_t revision = 0;  // where etcd has its receipt (0: nowhere), filled in by the check
  std::string tag(int number) const { return "r" + std::to_string(id) + "." + std::to_string(number); }
};

/// One plain put of a hot writer.
struct hot_put {
  int actor = 0, client = 0;
  std::string key, value;
  long invoked = 0, completed = 0;
  bool done = false;
  error_code ec;
  std::int64_t revision = 0;  // its header's, when answered
};

struct stm_case {
  std::string name;                 // the history's name for every entry of the case
  std::vector<std::string> keys;    // the keys bodies and hot writers use
  std::string receipts;             // a run's receipt: receipts + its id, its tag as the value
  std::vector<std::shared_ptr<stm_run>> runs;
  std::vector<std::shared_ptr<hot_put>> puts;
  record_ptr record;
};
using stm_case_ptr = std::shared_ptr<stm_case>;

inline const char* level_name(isolation l) {
  switch (l) {
    case isolation::serializable_snapshot: return "serializable_snapshot";
    case isolation::serializable: return "serializable";
    case isolation::repeatable_reads: return "repeatable_reads";
    case isolation::read_committed: return "read_committed";
  }
  return "?";
}

/// A short digest of what a body read: the values it writes are derived from it.
inline std::string digest(const std::map<std::string, std::optional<std::string>>& reads) {
  std::uint32_t h = 2166136261u;
  for (auto& [k, v] : reads)
    for (char ch : k + "=" + v.value_or("-") + ";") h = (h ^ static_cast<unsigned char>(ch)) * 16777619u;
  std::ostringstream s;
  s << std::hex << h;
  return s.str();
}

inline std::string body_text(const stm_body_rec& b) {
  std::ostringstream s;
  s << "body " << b.number << " (attempt " << b.attempt << ") read";
  for (auto& [k, v] : b.reads) {
    s << " " << k.substr(k.rfind('/') + 1) << "=" << text_of(v);
    if (auto m = b.mods.find(k); m != b.mods.end()) s << "@" << m->second;
  }
  s << ", wrote";
  for (auto& [k, v] : b.writes) s << " " << k.substr(k.rfind('/') + 1) << "=" << text_of(v);
  return s.str();
}

inline std::string run_text(const stm_run& r) {
  std::ostringstream s;
  s << "run " << r.id << " (actor " << r.actor << ", client " << r.client << ", " << level_name(r.level)
    << (r.group ? ", commit group" : ", alone") << (r.cut ? ", cut short" : "") << ", told "
    << (!r.done ? "nothing" : r.ec ? r.ec.message() : "committed") << ", " << r.bodies.size() << " bodies returned)";
  return s.str();
}

/// One actor: stm() runs one after another, every choice of a run drawn before it starts.
inline asio::awaitable<void> stm_actor(world& w, stm_case_ptr sc, int actor, std::uint64_t seed) {
  chooser c(seed);
  while (!w.stopping && clock_type::now() < w.deadline) {
    auto run = std::make_shared<stm_run>();
    run->id = static_cast<int>(sc->runs.size()) + 1;
    run->actor = actor;
    run->client = c.between(0, static_cast<int>(w.clients.size()) - 1);
    run->level = static_cast<isolation>(c.between(0, 3));
    run->group = c.chance(65);
    cut_plan plan;
    plan.armed = run->cut = c.chance(15);
    plan.after = ms(c.between(0, 60));
    plan.type = asio::cancellation_type::terminal;
    const auto reads = pick_distinct(c, sc->keys, c.between(1, 3));
    const auto writes = pick_distinct(c, sc->keys, c.between(1, 2));
    std::set<std::string> dels;
    for (auto& k : writes)
      if (c.chance(10)) dels.insert(k);
    const bool ask_mod = c.chance(40), reread = c.chance(25);
    const auto pause = ms(c.between(0, 20));
    sc->runs.push_back(run);

    const std::string receipt = sc->receipts + std::to_string(run->id);
    auto body = [&w, sc, run, reads, writes, dels, ask_mod, reread, receipt](stm_tx& tx) -> asio::awaitable<void> {
      stm_body_rec b;
      b.number = ++run->started;
      run->starts.push_back(w.h.last_seq());
      b.attempt = tx.attempt();
      for (std::size_t i = 0; i < reads.size(); ++i) {
        const auto& k = reads[i];
        auto getting = tx.get(k);
        auto v = co_await std::move(getting);
        b.reads[k] = v;
        if (ask_mod) {
          auto asking = tx.mod_revision(k);
          b.mods[k] = co_await std::move(asking);
        }
        if (reread && i == 0) {
          auto again = tx.get(k);
          auto v2 = co_await std::move(again);
          if (v2 != v)
            w.h.fail({"a body reads each key once: a second read sees the first's value", sc->name,
                      run_text(*run) + ": " + k + " read " + text_of(v) + ", then " + text_of(v2), run->invoked,
                      w.h.last_seq(), {}});
        }
      }
      const auto tag = run->tag(b.number);
      const auto value = tag + "|" + digest(b.reads);
      for (auto& k : writes) {
        if (dels.count(k)) {
          tx.del(k);
          b.writes[k] = std::nullopt;
        } else {
          tx.put(k, value);
          b.writes[k] = value;
        }
      }
      tx.put(receipt, tag);
      b.ended = w.h.note(run->actor, "stm.body", sc->name, run->client, -1, 0, "run " + std::to_string(run->id) + " " + body_text(b));
      run->bodies.push_back(std::move(b));
    };
    stm_options o;
    o.level = run->level;
    o.group_commit = run->group;
    o.max_attempts = 16;
    auto op = w.h.invoke(actor, "stm", sc->name, run->client, -1, 0, run->id);
    run->invoked = w.h.last_seq();
    std::exception_ptr failed;
    {
      canceller cut(w, plan);  // also cut at the end of the case, as every operation still waiting
      auto running = stm(*w.clients[static_cast<std::size_t>(run->client)], std::move(body), o,
                         asio::bind_cancellation_slot(cut.slot(), asio::as_tuple(use_awaitable)));
      auto [e] = co_await std::move(running);
      failed = e;
    }
    run->done = true;
    run->ec = code_of(failed);
    run->completed = w.h.complete(op, std::string(level_name(run->level)) + (run->group ? " group" : " alone") + ": " +
                                          (run->ec ? run->ec.message() : "committed"));
    co_await sleep_for(pause);
  }
}

/// A hot writer: plain puts of unique values to the keys, the first ones most.
inline asio::awaitable<void> stm_hot_writer(world& w, stm_case_ptr sc, int actor, std::uint64_t seed) {
  chooser c(seed);
  for (int n = 0; !w.stopping && clock_type::now() < w.deadline; ++n) {
    co_await sleep_for(ms(c.between(5, 80)));
    auto p = std::make_shared<hot_put>();
    p->actor = actor;
    p->client = c.between(0, static_cast<int>(w.clients.size()) - 1);
    p->key = sc->keys[static_cast<std::size_t>(c.weighted({40, 30, 10, 10, 10})) % sc->keys.size()];
    p->value = "h" + std::to_string(actor) + "." + std::to_string(n);
    sc->puts.push_back(p);
    auto op = w.h.invoke(actor, "put", sc->name, p->client, -1, 0, n);
    p->invoked = w.h.last_seq();
    auto putting = w.clients[static_cast<std::size_t>(p->client)]->async_put(p->key, p->value, put_options{},
                                                                            asio::as_tuple(use_awaitable));
    auto [ec, r] = co_await std::move(putting);
    p->done = true;
    p->ec = ec;
    p->revision = ec ? 0 : r.header.revision;
    p->completed = w.h.complete(op, p->key + "=" + p->value + ": " + (ec ? ec.message() : "ok at " + std::to_string(p->revision)));
  }
}

inline void check_stm(history& h, stm_case& sc);  // data_stm_check.hpp

/// The STM case: 8 actors over three clients (two behind fault proxies), two hot writers, links
/// slowed, held and cut; then the check.
inline asio::awaitable<void> run_stm_case(world& w) {
  auto sc = std::make_shared<stm_case>();
  sc->name = w.name("stm");
  for (int i = 0; i < 5; ++i) sc->keys.push_back(sc->name + "/k" + std::to_string(i));
  sc->receipts = w.name("stm-runs/");
  const int actors = 8, writers = 2;
  std::vector<std::uint64_t> seeds;
  for (int i = 0; i < actors + writers + 1; ++i) seeds.push_back(w.choose.next());
  // Some keys exist before the case, the others do not.
  for (std::size_t i = 0; i < sc->keys.size(); i += 2) {
    const std::string v = "init" + std::to_string(i);
    auto putting = w.judge->async_put(sc->keys[i], v, put_options{}, use_awaitable);
    co_await std::move(putting);
  }
  auto starting = start_record(w, w.names_prefix);
  sc->record = co_await std::move(starting);
  w.deadline = clock_type::now() + std::chrono::milliseconds(static_cast<long>(w.seconds * 1000));
  for (int a = 0; a < capped(actors); ++a) w.spawn(stm_actor(w, sc, a, seeds[static_cast<std::size_t>(a)]));
  for (int h = 0; h < capped(writers); ++h) w.spawn(stm_hot_writer(w, sc, 100 + h, seeds[static_cast<std::size_t>(actors + h)]));
  w.spawn(link_faults(w, seeds.back(), false));
  auto draining = w.drain();
  const bool drained = co_await std::move(draining);
  auto finishing = finish_record(w, sc->record);
  const bool complete = co_await std::move(finishing);
  if (!complete) {
    w.h.fail({"etcd's record of the case is read back whole", sc->name, "the judge's watch did not reach the end", 0, 0, {}});
    co_return;
  }
  if (drained) check_stm(w.h, *sc);
}

}  // namespace coetcd::test::explore

#include "data_stm_check.hpp"
