// The explorer's registration case (test_explore_data): registrations of three keys, two per key
// on different clients, started, stopped and made again at random with short TTLs, beside an
// interferer that revokes their leases, deletes their keys and puts over them, under faulted
// links; then each key settles on one registered owner whose value and lease etcd holds, and no
// key is left under a stopped registration's lease.
#pragma once

#include "data.hpp"

#include <coetcd/registration.hpp>

#include <sstream>

namespace coetcd::test::explore {

struct reg_rec {
  int id = 0, slot = 0, client = 0;
  std::string key, value;
  std::unique_ptr<registration> r;
  long op = 0;                       // its async_run in the history
  std::optional<error_code> ended;   // how its async_run ended
  bool stopped = false;              // destroyed by the case
  clock_type::time_point stopped_at;
  bool live() const { return r && !stopped; }
};
using reg_ptr = std::shared_ptr<reg_rec>;

struct registration_case {
  std::vector<std::string> keys;
  std::vector<reg_ptr> regs;  // every registration made, in order
  int revokes = 0, deletes = 0, plain_puts = 0, leased_puts = 0, expiries_seen = 0;
};
using registration_case_ptr = std::shared_ptr<registration_case>;

/// One slot: a registration of its key on its client, run for a while, then stopped (and after a
/// pause made again) or kept; at the end of the case the slot's last one stays or goes as drawn.
inline asio::awaitable<void> registration_slot(world& w, registration_case_ptr rc, int slot, std::uint64_t seed) {
  chooser c(seed);
  const auto& key = rc->keys[static_cast<std::size_t>(slot % 3)];
  const int client = (slot + slot / 3) % 3;  // the two slots of a key are on different clients
  reg_ptr rec;
  for (int gen = 0; !w.stopping && clock_type::now() < w.deadline;) {
    if (!rec) {
      rec = std::make_shared<reg_rec>();
      rec->id = static_cast<int>(rc->regs.size());
      rec->slot = slot;
      rec->client = client;
      rec->key = key;
      rec->value = "slot" + std::to_string(slot) + "." + std::to_string(gen++);
      registration_options o;
      o.ttl = std::chrono::seconds(c.between(2, 5));
      o.retry_max = ms(1000);
      rec->r = std::make_unique<registration>(*w.clients[static_cast<std::size_t>(client)], key, rec->value, o);
      rc->regs.push_back(rec);
      rec->op = w.h.invoke(slot, "register", key, rec->id, -1, 0, o.ttl.count());
      rec->r->async_run([&w, rec](error_code ec) {
        rec->ended = ec;
        w.h.complete(rec->op, ec.message());
      });
    }
    co_await sleep_for(ms(c.between(800, 6000)));
    if (w.stopping || clock_type::now() >= w.deadline) break;
    if (!c.chance(55)) continue;  // kept a while longer
    rec->stopped = true;
    rec->stopped_at = clock_type::now();
    w.h.note(slot, "stop", key, rec->id, -1, rec->r->lease(), "");
    rec->r.reset();
    rec.reset();
    co_await sleep_for(ms(c.between(0, 1500)));
  }
}

/// Now and then: revokes the lease a key is under, deletes the key, puts it without a lease, or
/// puts it under a lease of its own for a moment and deletes it again.
inline asio::awaitable<void> registration_interferer(world& w, registration_case_ptr rc, std::uint64_t seed) {
  chooser c(seed);
  while (!w.stopping && clock_type::now() < w.deadline - std::chrono::seconds(2)) {
    co_await sleep_for(ms(c.between(400, 2000)));
    const auto key = rc->keys[static_cast<std::size_t>(c.between(0, 2))];
    const int what = c.weighted({35, 25, 20, 20});
    if (what == 0) {
      auto reading = w.judge->async_get(key, get_options{}, asio::as_tuple(use_awaitable));
      auto [ec, r] = co_await std::move(reading);
      if (ec || r.kvs.empty() || r.kvs.front().lease == 0) continue;
      const auto lease = r.kvs.front().lease;
      ++rc->revokes;
      w.h.note(-3, "revoke", key, -1, -1, lease, "");
      auto revoking = w.judge->async_lease_revoke(lease, asio::as_tuple(use_awaitable));
      co_await std::move(revoking);
    } else if (what == 1) {
      ++rc->deletes;
      w.h.note(-3, "delete", key, -1, -1, 0, "");
      auto deleting = w.judge->async_delete(key, delete_options{}, asio::as_tuple(use_awaitable));
      co_await std::move(deleting);
    } else if (what == 2) {
      ++rc->plain_puts;
      w.h.note(-3, "put without a lease", key, -1, -1, 0, "");
      auto putting = w.judge->async_put(key, "interferer", put_options{}, asio::as_tuple(use_awaitable));
      co_await std::move(putting);
    } else {
      auto granting = w.judge->async_lease_grant(std::chrono::seconds(30), asio::as_tuple(use_awaitable));
      auto [gec, g] = co_await std::move(granting);
      if (gec) continue;
      ++rc->leased_puts;
      w.h.note(-3, "put under another lease", key, -1, -1, g.id, "");
      put_options po;
      po.lease = g.id;
      auto putting = w.judge->async_put(key, "interferer", po, asio::as_tuple(use_awaitable));
      co_await std::move(putting);
      co_await sleep_for(ms(c.between(200, 2000)));
      // Its key goes with it: the registrations standing by put theirs again.
      auto revoking = w.judge->async_lease_revoke(g.id, asio::as_tuple(use_awaitable));
      co_await std::move(revoking);
    }
  }
}

/// What is wrong with key `key` now, or "" when it has settled: with live registrations, etcd
/// holds it under the lease and with the value of the one registered, and no other live one says
/// it is; with none, it is absent or the interferer's put without a lease.
inline std::string registration_unsettled(const registration_case& rc, const std::string& key, const get_result& r) {
  std::vector<const reg_rec*> live, registered;
  for (auto& g : rc.regs)
    if (g->key == key && g->live()) {
      live.push_back(g.get());
      if (g->r->is_registered()) registered.push_back(g.get());
    }
  const key_value* kv = r.kvs.empty() ? nullptr : &r.kvs.front();
  auto in_etcd = kv ? "\"" + kv->value + "\" under lease " + hex(kv->lease) : std::string("absent");
  if (live.empty()) {
    if (kv && kv->lease != 0) return "no live registration, yet etcd has " + in_etcd;
    return "";
  }
  if (registered.size() != 1) return std::to_string(registered.size()) + " of " + std::to_string(live.size()) +
                                     " live registrations say they are registered; etcd has " + in_etcd;
  const auto& owner = *registered.front();
  if (!kv || kv->lease != owner.r->lease() || kv->value != owner.value)
    return "reg" + std::to_string(owner.id) + " (\"" + owner.value + "\") says it is registered under lease " +
           hex(owner.r->lease()) + "; etcd has " + in_etcd;
  return "";
}

/// The registration case: 6 slots over 3 keys and 3 clients, the interferer, link faults; then,
/// once the faults end, every key settles within 20 s, and every registration's async_run ended
/// only when it was stopped, with operation_aborted.
inline asio::awaitable<void> run_registration_case(world& w) {
  auto rc = std::make_shared<registration_case>();
  for (int i = 0; i < 3; ++i) rc->keys.push_back(w.data_key(w.name("reg"), std::to_string(i)));
  std::vector<std::uint64_t> seeds;
  for (int i = 0; i < 8; ++i) seeds.push_back(w.choose.next());
  w.deadline = clock_type::now() + std::chrono::milliseconds(static_cast<long>(w.seconds * 1000));
  for (int s = 0; s < 6; ++s) w.spawn(registration_slot(w, rc, s, seeds[static_cast<std::size_t>(s)]));
  w.spawn(registration_interferer(w, rc, seeds[6]));
  w.spawn(link_faults(w, seeds[7], false));
  auto draining = w.drain();
  if (!co_await std::move(draining)) co_return;
  const std::string settle = "(r1) each key settles on one live registration, in etcd with its value and lease";
  std::map<std::string, std::string> wrong;
  const auto until = clock_type::now() + std::chrono::seconds(20);
  do {
    wrong.clear();
    for (auto& key : rc->keys) {
      auto reading = w.judge->async_get(key, get_options{}, use_awaitable);
      auto r = co_await std::move(reading);
      if (auto what = registration_unsettled(*rc, key, r); !what.empty()) wrong[key] = what;
    }
    if (!wrong.empty()) co_await sleep_for(ms(200));
  } while (!wrong.empty() && clock_type::now() < until);
  for (auto& [key, what] : wrong) w.h.fail({settle, key, "20 s after the faults ended: " + what, 0, w.h.last_seq(), {}});
  std::size_t live = 0, stopped = 0;
  for (auto& g : rc->regs) {
    live += g->live();
    stopped += g->stopped;
    if (g->live() && g->ended)
      w.h.fail({"(r0) a registration runs until it is stopped", g->key,
                "reg" + std::to_string(g->id) + "'s async_run ended with " + g->ended->message(), 0, w.h.last_seq(), {}});
    if (g->stopped && g->ended && *g->ended != asio::error::operation_aborted)
      w.h.fail({"(r2) a stopped registration's async_run completes with operation_aborted", g->key,
                "reg" + std::to_string(g->id) + ": " + g->ended->message(), 0, w.h.last_seq(), {}});
    if (g->stopped && !g->ended)
      w.h.fail({"(r2) a stopped registration's async_run completes with operation_aborted", g->key,
                "reg" + std::to_string(g->id) + " never completed", 0, w.h.last_seq(), {}});
  }
  std::uint64_t puts = 0;
  for (auto& g : rc->regs)
    if (g->r) puts += g->r->puts();
  std::ostringstream s;
  s << rc->regs.size() << " registrations (" << live << " live at the end, " << stopped << " stopped), " << puts
    << " puts by the live ones, " << rc->revokes << " leases revoked, " << rc->deletes << " deletes, " << rc->plain_puts
    << " puts without a lease and " << rc->leased_puts << " under another lease by the interferer, " << wrong.size()
    << " keys unsettled";
  summary(w, s.str());
  // The registrations go (their keys with them) while the clients live, and their handlers,
  // which write to the history, run before the case ends.
  for (auto& g : rc->regs) g->r.reset();
  for (int i = 0; i < 200 && std::any_of(rc->regs.begin(), rc->regs.end(), [](auto& g) { return !g->ended; }); ++i)
    co_await sleep_for(ms(50));
}

}  // namespace coetcd::test::explore
