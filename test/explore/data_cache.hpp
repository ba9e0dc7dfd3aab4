// The explorer's cache case (test_explore_data): writers put, delete and write pairs of keys under
// a prefix through three clients (two behind fault proxies), a cache of the prefix on each client
// and readers of its changes (its own, and cache_readers made and destroyed at random, some slow,
// some cut short), links slowed, held and cut, and history compacted while a cache is cut off.
// At random moments a cache's range() at its revision() is compared with a linearizable get at
// that revision; at the end every reader's updates are replayed against etcd's record.
#pragma once

#include "data.hpp"

#include <coetcd/cache.hpp>

namespace coetcd::test::explore {

/// What one reader of a cache was given: its start, and every update in order.
struct reader_log {
  int id = 0, cache = 0;
  bool own = false;           // the cache's own reader (cache::async_next)
  ms slow{0};                 // the longest pause between its updates
  std::int64_t start_rev = 0;
  std::map<std::string, key_value> start;  // the cache's range() when the reader was made
  long started = 0;
  std::vector<cache_update> updates;
  std::vector<long> seqs;  // the history's seq of each update
  std::optional<error_code> ended;
  std::unique_ptr<cache_reader> reader;  // none for a cache's own reader
  bool destroyed = false;                // its object was destroyed on purpose
};
using reader_ptr = std::shared_ptr<reader_log>;

/// A cache's range() at its revision(), taken in one turn.
struct probe_rec {
  int cache = 0;
  std::int64_t revision = 0;
  std::map<std::string, key_value> range;
  long seq = 0;
  std::string why;
};

struct cache_case {
  std::string prefix;
  std::vector<std::string> keys;
  std::vector<std::unique_ptr<cache>> caches;
  std::vector<std::int64_t> last_revision;  // of each cache, as probed
  std::vector<reader_ptr> readers;
  std::vector<probe_rec> probes;
  record_ptr record;
  int compared = 0, compacted_skips = 0, compactions = 0, writes = 0, readers_destroyed = 0;
};
using cache_case_ptr = std::shared_ptr<cache_case>;

inline std::map<std::string, key_value> as_map(const std::vector<key_value>& kvs) {
  std::map<std::string, key_value> out;
  for (auto& kv : kvs) out.emplace(kv.key, kv);
  return out;
}

/// Takes a probe of cache `i` now; a revision() below the last one probed is a violation.
inline probe_rec& take_probe(world& w, cache_case& cc, int i, std::string why) {
  auto& k = *cc.caches[static_cast<std::size_t>(i)];
  probe_rec p;
  p.cache = i;
  p.revision = k.revision();
  p.range = as_map(k.range());
  p.why = std::move(why);
  p.seq = w.h.note(-1, "cache.probe", cc.prefix, i, -1, 0,
                   p.why + ": revision " + std::to_string(p.revision) + ", " + std::to_string(p.range.size()) + " keys");
  auto& last = cc.last_revision[static_cast<std::size_t>(i)];
  if (p.revision < last)
    w.h.fail({"(k1) a cache's revision never goes back", cc.prefix,
              "cache " + std::to_string(i) + " at " + std::to_string(p.revision) + " after " + std::to_string(last), p.seq, p.seq, {}});
  last = std::max(last, p.revision);
  cc.probes.push_back(std::move(p));
  return cc.probes.back();
}

inline asio::awaitable<void> read_updates(world& w, cache_case_ptr cc, reader_ptr r, std::uint64_t seed) {
  chooser c(seed);
  auto& k = *cc->caches[static_cast<std::size_t>(r->cache)];
  const std::string what = r->own ? "cache.next" : "reader.next";
  while (!w.stopping) {
    cut_plan plan;
    plan.armed = c.chance(10);
    plan.after = ms(c.between(0, 50));
    plan.type = std::array{asio::cancellation_type::terminal, asio::cancellation_type::partial,
                           asio::cancellation_type::total}[static_cast<std::size_t>(c.between(0, 2))];
    const auto pause = ms(c.between(0, static_cast<int>(r->slow.count())));
    if (!r->own && !r->reader) break;
    std::tuple<error_code, cache_update> got;
    {
      canceller cut(w, plan);
      auto token = asio::bind_cancellation_slot(cut.slot(), asio::as_tuple(use_awaitable));
      if (r->own) {
        auto next = k.async_next(token);
        got = co_await std::move(next);
      } else {
        auto next = r->reader->async_next(token);
        got = co_await std::move(next);
      }
    }
    auto& [ec, u] = got;
    if (ec == asio::error::operation_aborted && !w.stopping && !r->destroyed) continue;  // the changes wait for the next
    if (ec) {
      r->ended = ec;
      w.h.note(r->id, what, cc->prefix, r->cache, -1, 0, "ended: " + ec.message());
      break;
    }
    // Still the handler's turn: the cache is at the update's revision.
    const auto seq = w.h.note(r->id, what, cc->prefix, r->cache, -1, 0,
                              std::string(u.reset ? "reset, " : "") + std::to_string(u.events.size()) + " events to revision " +
                                  std::to_string(u.revision));
    if (k.revision() != u.revision)
      w.h.fail({"(k2) a reader's handler sees the cache at the update's revision", cc->prefix,
                "reader " + std::to_string(r->id) + " of cache " + std::to_string(r->cache) + ": update to " + std::to_string(u.revision) +
                    ", the cache at " + std::to_string(k.revision()),
                seq, seq, {}});
    r->updates.push_back(std::move(u));
    r->seqs.push_back(seq);
    co_await sleep_for(pause);
  }
}

/// A reader of cache `i` made now, its start read in the same turn.
inline reader_ptr new_reader(world& w, cache_case& cc, int i, bool own, ms slow) {
  auto& k = *cc.caches[static_cast<std::size_t>(i)];
  auto r = std::make_shared<reader_log>();
  r->id = 200 + static_cast<int>(cc.readers.size());
  r->cache = i;
  r->own = own;
  r->slow = slow;
  if (!own) r->reader = std::make_unique<cache_reader>(k);
  r->start_rev = k.revision();
  r->start = as_map(k.range());
  r->started = w.h.note(r->id, own ? "cache.reader" : "reader.create", cc.prefix, i, -1, 0,
                        "at revision " + std::to_string(r->start_rev) + (slow.count() ? ", slow" : ""));
  cc.readers.push_back(r);
  return r;
}

inline asio::awaitable<void> end_reader_later(world& w, cache_case_ptr cc, reader_ptr r, ms after) {
  co_await sleep_for(after);
  if (w.stopping) co_return;
  r->destroyed = true;
  ++cc->readers_destroyed;
  w.h.note(r->id, "reader.destroy", cc->prefix, r->cache, -1, 0, "");
  r->reader.reset();
}

/// Makes cache_readers now and then, at most four per cache; some slow, some destroyed later.
inline asio::awaitable<void> reader_maker(world& w, cache_case_ptr cc, std::uint64_t seed) {
  chooser c(seed);
  while (!w.stopping && clock_type::now() < w.deadline - std::chrono::seconds(1)) {
    co_await sleep_for(ms(c.between(300, 1500)));
    const int i = c.between(0, static_cast<int>(cc->caches.size()) - 1);
    const auto slow = ms(c.chance(30) ? c.between(50, 400) : 0);
    const bool ends = c.chance(25);
    const auto life = ms(c.between(1000, 4000));
    const auto reader_seed = c.next();
    int mine = 0;
    for (auto& r : cc->readers) mine += r->cache == i && !r->own && r->reader != nullptr;
    if (mine >= 4 || !cc->caches[static_cast<std::size_t>(i)]->synced()) continue;
    auto r = new_reader(w, *cc, i, false, slow);
    w.spawn(read_updates(w, cc, r, reader_seed));
    if (ends) w.spawn(end_reader_later(w, cc, r, life));
  }
}

/// A writer on client `actor`: puts, deletes and two-key txns of unique values; after some
/// answered writes, waits for its client's cache to reach the write's revision and probes it.
inline asio::awaitable<void> cache_writer(world& w, cache_case_ptr cc, int actor, std::uint64_t seed) {
  chooser c(seed);
  auto& cl = *w.clients[static_cast<std::size_t>(actor)];
  for (int n = 0; !w.stopping && clock_type::now() < w.deadline; ++n) {
    co_await sleep_for(ms(c.between(0, 40)));
    const int kind = c.weighted({60, 20, 20});
    const auto two = pick_distinct(c, cc->keys, 2);
    const bool second_put = c.chance(50), wait = c.chance(20);
    const std::string value = "w" + std::to_string(actor) + "." + std::to_string(n);
    const std::string value2 = value + "b";
    auto op = w.h.invoke(actor, kind == 0 ? "put" : kind == 1 ? "delete" : "txn", cc->prefix, actor, -1, 0, n);
    error_code ec;
    std::int64_t rev = 0;
    if (kind == 0) {
      auto putting = cl.async_put(two[0], value, put_options{}, asio::as_tuple(use_awaitable));
      auto [e, r] = co_await std::move(putting);
      ec = e;
      rev = r.header.revision;
    } else if (kind == 1) {
      auto deleting = cl.async_delete(two[0], delete_options{}, asio::as_tuple(use_awaitable));
      auto [e, r] = co_await std::move(deleting);
      ec = e;
      rev = r.header.revision;
    } else {
      txn t;
      t.then(txn_op::put(two[0], value));
      t.then(second_put ? txn_op::put(two[1], value2) : txn_op::del(two[1]));
      auto writing = cl.async_txn(t, asio::as_tuple(use_awaitable));
      auto [e, r] = co_await std::move(writing);
      ec = e;
      rev = r.header.revision;
    }
    ++cc->writes;
    w.h.complete(op, two[0] + (kind == 2 ? " and " + two[1] : "") + ": " + (ec ? ec.message() : "ok at " + std::to_string(rev)));
    if (ec || !wait) continue;
    cut_plan plan;
    plan.armed = true;
    plan.after = ms(10000);
    auto& k = *cc->caches[static_cast<std::size_t>(actor)];
    auto waited = w.h.invoke(actor, "cache.wait_for", cc->prefix, actor, -1, 0, rev);
    error_code wec;
    {
      canceller cut(w, plan);
      auto waiting = k.async_wait_for(rev, asio::bind_cancellation_slot(cut.slot(), asio::as_tuple(use_awaitable)));
      auto [e] = co_await std::move(waiting);
      wec = e;
    }
    w.h.complete(waited, wec ? wec.message() : "at " + std::to_string(k.revision()));
    if (wec == asio::error::operation_aborted && !w.stopping)
      w.h.fail({"(k3) a cache reaches a revision written through its client", cc->prefix,
                "cache " + std::to_string(actor) + " still short of " + std::to_string(rev) + " after 10 s, at " + std::to_string(k.revision()),
                w.h.last_seq(), w.h.last_seq(), {}});
    if (wec) continue;
    auto& p = take_probe(w, *cc, actor, "after its client's write at " + std::to_string(rev));
    if (p.revision < rev)
      w.h.fail({"(k3) a cache reaches a revision written through its client", cc->prefix,
                "cache " + std::to_string(actor) + " waited for " + std::to_string(rev) + " and is at " + std::to_string(p.revision), p.seq, p.seq, {}});
  }
}

/// Probes a cache now and then, and compares it with a linearizable get at its revision.
inline asio::awaitable<void> cache_prober(world& w, cache_case_ptr cc, std::uint64_t seed) {
  chooser c(seed);
  while (!w.stopping && clock_type::now() < w.deadline) {
    co_await sleep_for(ms(c.between(50, 400)));
    const int i = c.between(0, static_cast<int>(cc->caches.size()) - 1);
    if (!cc->caches[static_cast<std::size_t>(i)]->synced()) continue;
    const auto& p = take_probe(w, *cc, i, "probe");
    const auto at = p.revision;
    const auto seq = p.seq;
    const auto range = p.range;
    get_options o;
    o.prefix = true;
    o.revision = at;
    auto reading = w.judge->async_get(cc->prefix, o, asio::as_tuple(use_awaitable));
    auto [ec, r] = co_await std::move(reading);
    if (ec == error::compacted) {
      ++cc->compacted_skips;
      continue;
    }
    if (ec) continue;  // the judge is never faulted; a failed read proves nothing
    ++cc->compared;
    if (auto d = state_difference(range, as_map(r.kvs)); !d.empty())
      w.h.fail({"(k1) a cache's range() at its revision() is etcd's state at that revision", cc->prefix,
                "cache " + std::to_string(i) + " at revision " + std::to_string(at) + " against a get at that revision: " + d, seq, seq, {}});
  }
}

/// Faults on the proxies, one at a time: a slow link, a held one, a cut one, and a cut one whose
/// history is compacted meanwhile up to what the record has seen (its cache must list again).
inline asio::awaitable<void> cache_faults(world& w, cache_case_ptr cc, std::uint64_t seed) {
  chooser c(seed);
  std::int64_t compacted = 0;
  while (!w.stopping && clock_type::now() < w.deadline - std::chrono::seconds(1)) {
    co_await sleep_for(ms(c.between(500, 2500)));
    const auto p = c.between(0, static_cast<int>(w.proxies.size()) - 1);
    auto& proxy = *w.proxies[static_cast<std::size_t>(p)];
    const int kind = c.weighted({30, 20, 25, 25});
    const auto length = ms(kind == 0 ? c.between(300, 2000) : kind == 1 ? c.between(100, 1200) : c.between(300, 900));
    const auto d = ms(c.between(20, 250));
    const char* what = kind == 0 ? "fault.delay" : kind == 1 ? "fault.hold" : kind == 2 ? "fault.cut" : "fault.cut+compact";
    w.h.note(-1, what, "", -1, -1, 0, "client " + std::to_string(p) + " for " + std::to_string(length.count()) + " ms");
    if (kind == 0) proxy.delay(d);
    else if (kind == 1) proxy.hold();
    else proxy.cut();
    if (kind == 3) {
      co_await sleep_for(length / 2);  // the others write meanwhile
      const auto rev = cc->record->seen;
      if (rev > compacted) {
        auto compacting = w.judge->async_compact(rev, false, asio::as_tuple(use_awaitable));
        auto [ec, hdr] = co_await std::move(compacting);
        w.h.note(-1, "fault.compact", "", -1, -1, 0, "at " + std::to_string(rev) + ": " + (ec ? ec.message() : "ok"));
        if (!ec) {
          compacted = rev;
          ++cc->compactions;
        }
      }
      co_await sleep_for(length / 2);
    } else {
      co_await sleep_for(length);
    }
    proxy.restore();
    proxy.delay(ms(0));
    w.h.note(-1, "fault.end", "", -1, -1, 0, "client " + std::to_string(p));
  }
}

inline asio::awaitable<void> check_cache(world& w, cache_case& cc);

/// The cache case: eight keys, a cache on each client (client 1's keeps at most 4 changes per
/// reader), their own readers (client 1's slow), cache_readers coming and going, three writers,
/// a prober, faults with compaction; then each cache brought to the end and the check.
inline asio::awaitable<void> run_cache_case(world& w) {
  auto cc = std::make_shared<cache_case>();
  cc->prefix = w.name("cache/");
  for (int i = 0; i < 8; ++i) cc->keys.push_back(cc->prefix + "k" + std::to_string(i));
  std::vector<std::uint64_t> seeds;
  for (int i = 0; i < 12; ++i) seeds.push_back(w.choose.next());
  for (std::size_t i = 0; i < cc->keys.size(); i += 3) {
    const std::string v = "init" + std::to_string(i);
    auto putting = w.judge->async_put(cc->keys[i], v, put_options{}, use_awaitable);
    co_await std::move(putting);
  }
  auto starting = start_record(w, w.names_prefix);
  cc->record = co_await std::move(starting);
  error_code synced;
  for (std::size_t i = 0; i < w.clients.size() && !synced; ++i) {
    cache_options o;
    if (i == 1) o.max_pending_events = 4;
    cc->caches.push_back(std::make_unique<cache>(w.clients[i]->get_executor(), *w.clients[i], cc->prefix, o));
    cc->last_revision.push_back(0);
    auto syncing = cc->caches.back()->async_wait_synced(asio::as_tuple(use_awaitable));
    auto [ec] = co_await std::move(syncing);
    synced = ec;
    if (ec) w.h.fail({"a cache syncs", cc->prefix, "cache " + std::to_string(i) + ": " + ec.message(), 0, 0, {}});
  }
  if (synced) co_return;
  w.deadline = clock_type::now() + std::chrono::milliseconds(static_cast<long>(w.seconds * 1000));
  for (int i = 0; i < static_cast<int>(cc->caches.size()); ++i) {
    auto r = new_reader(w, *cc, i, true, ms(i == 1 ? 300 : 0));
    w.spawn(read_updates(w, cc, r, seeds[static_cast<std::size_t>(i)]));
  }
  for (int a = 0; a < capped(static_cast<int>(w.clients.size())); ++a) w.spawn(cache_writer(w, cc, a, seeds[static_cast<std::size_t>(3 + a)]));
  w.spawn(reader_maker(w, cc, seeds[6]));
  w.spawn(cache_prober(w, cc, seeds[7]));
  w.spawn(cache_faults(w, cc, seeds[8]));
  auto draining = w.drain();
  const bool drained = co_await std::move(draining);
  auto finishing = finish_record(w, cc->record);
  const bool complete = co_await std::move(finishing);
  if (!complete) {
    w.h.fail({"etcd's record of the case is read back whole", cc->prefix, "the judge's watch did not reach the end", 0, 0, {}});
    co_return;
  }
  if (!drained) co_return;
  auto checking = check_cache(w, *cc);
  co_await std::move(checking);
  for (auto& r : cc->readers) r->reader.reset();  // before their caches
}

}  // namespace coetcd::test::explore

#include "data_cache_check.hpp"
