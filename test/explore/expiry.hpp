// The explorer's lease ends (test_explore_cluster): sessions of a 2-3 s TTL whose lease the case
// ends on purpose under a holder (revoked by the judge, or left to expire while its client's
// every link is held), the ends etcd's record shows otherwise (a close's revoke, a lease lost to a
// fault), and the checks that judge them: once a lease's end is known, no fenced write of it
// passes, no caller of it is told it holds, and its sessions and the holds its actors keep say
// they lost it.
#pragma once

#include "check.hpp"

namespace coetcd::test::explore {

/// When the case knew a lease was gone (its keys deleted), and until when a caller of it may
/// still be told it holds (0: not judged; only its fences are).
struct lease_end {
  long seq = 0;          // the history entry that made it known
  double ms = 0;         // its time in the case
  double told_until = 0; // ms
  std::string how;
};

/// The lease ends of a case and what the expiry task did.
struct expiry_state {
  std::vector<tcp_proxy*> links;  // every link of client 0 (one per member): held, it renews nothing
  int first_kind = 0;             // 0: the first end on purpose is by a held link, 1: by a revoke
  std::map<std::int64_t, lease_end> ends;
  int by_link = 0, by_revoke = 0;  // ends on purpose whose end became known, by kind
  int under_holder = 0;            // of them: a caller held when the case set out to end it
  int survived = 0;                // held links the lease outlived (a new leader renewed it, say)
  int fence_probes = 0;            // fences built while held, tried once the lease was gone
  int told_checks = 0;             // sessions looked at once their lease's end and grace were past
};

inline bool is_acquire(const std::string& what) {
  return what == "lock" || what == "try_lock" || what == "acquire" || what == "try_acquire" || what == "campaign";
}

/// Records that `lease` is gone, now (the first time only).
inline void known_end(world& w, expiry_state& x, std::int64_t lease, const std::string& how, double grace_ms) {
  if (x.ends.count(lease)) return;
  const auto seq = w.h.note(-1, "lease.ended", "", -1, -1, lease, how);
  const double at = w.h.events().back().ms;
  x.ends.emplace(lease, lease_end{seq, at, grace_ms > 0 ? at + grace_ms : 0, how});
}

/// Whether etcd no longer has `lease`: a put under it is refused with lease_not_found. A put is
/// applied through raft, so the answer is the cluster's; TimeToLive is not (a leader cut off from
/// the others answers it from its own state, which lacks a lease granted since), and an expired
/// lease whose revoke is not applied yet, keys and all, shows there with a negative TTL. The key,
/// when the lease is there, goes with it.
inline asio::awaitable<bool> lease_gone(world& w, std::int64_t lease) {
  auto probing = w.judge->async_put("explore-data/lease-probe/" + hex(lease), "", put_options{.lease = lease},
                                    asio::as_tuple(use_awaitable));
  auto [ec, r] = co_await std::move(probing);
  co_return ec == error::lease_not_found;
}

/// Leases lost without anyone here ending them (w.expired: a fault outlasted the TTL): their end
/// becomes known when the judge finds them gone; their fences are judged from then on.
inline asio::awaitable<void> lease_tracker(world& w, expiry_state& x) {
  while (!w.stopping) {
    co_await sleep_for(ms(500));
    const std::vector<std::int64_t> lost(w.expired.begin(), w.expired.end());
    for (auto lease : lost) {
      if (w.stopping) break;
      if (x.ends.count(lease)) continue;
      auto asking = lease_gone(w, lease);
      if (co_await std::move(asking)) known_end(w, x, lease, "lost to a fault, then gone", 0);
    }
  }
}

/// (h) After the end of `lease` and its grace: every session on it says it is lost, and no hold
/// of theirs that an actor still keeps says it holds.
inline void check_told(world& w, expiry_state& x, std::int64_t lease) {
  const auto& end = x.ends.at(lease);
  std::string bad, seen;
  for (auto& s : w.sessions) {
    if (s->lease != lease || s->closed || s->orphaned) continue;
    ++x.told_checks;
    seen += " s" + std::to_string(s->id);
    if (!s->s.lost()) bad += " s" + std::to_string(s->id) + " is not lost;";
    for (auto& [id, kept] : w.holding) {
      auto held = kept.lock();
      const auto* rec = w.h.find_hold(id);
      if (!held || !rec || rec->session != s->id) continue;
      if (*held) bad += " hold " + std::to_string(id) + " (through obj" + std::to_string(rec->object) + ") says it holds;";
    }
  }
  const auto seq = w.h.note(-1, "check.lease", "", -1, -1, lease, "sessions" + (seen.empty() ? " none" : seen) +
                                                                     (bad.empty() ? ": all lost" : ":" + bad));
  if (bad.empty()) return;
  std::vector<long> holds;  // the lease's last few, so that the report shows its history
  for (auto& h : w.h.holds())
    if (h.lease == lease) holds.push_back(h.id);
  if (holds.size() > 4) holds.erase(holds.begin(), holds.end() - 4);
  w.h.fail({"no caller told it holds after its key is gone", "",
            "lease " + hex(lease) + " (" + end.how + ") ended at #" + std::to_string(end.seq) + "; " +
                std::to_string(static_cast<long>(end.told_until - end.ms)) + " ms later:" + bad,
            end.seq, seq, holds});
}

/// One lease ended on purpose: a short-TTL session made (on client 0 for a held link; a session
/// of its lease adopted by another client meanwhile is orphaned), used by the actors for 1-2 s,
/// then ended as soon as an actor holds under it (or after 2 s anyway):
/// its holds end there (the key goes at a moment only etcd knows); a fence is built from a
/// mutex or election hold an actor keeps. Then either the judge revokes it (its end known at the answer;
/// the holder's client learns at its next renewal, or at its deadline: grace TTL + 2.5 s, which
/// also covers a deposed leader answering renewals for a moment), or client 0's links are held
/// until the judge finds the lease gone (grace 1 s: a session counts as lost from its deadline,
/// which is before etcd's expiry) and released after the check. Then the fence is tried.
inline asio::awaitable<void> end_one_lease(world& w, expiry_state& x, chooser& c, bool by_link) {
  const auto ttl = std::chrono::seconds(c.between(2, 3));
  const auto use_for = ms(c.between(1000, 2000));
  const int where = by_link ? 0 : c.between(0, static_cast<int>(w.clients.size()) - 1);
  auto making = w.new_session(where, 0, -1, ttl);
  auto* s = co_await std::move(making);
  if (!s) co_return;
  const auto lease = s->lease;
  co_await sleep_for(use_for);
  // An actor's hold under the lease (looked at, not taken: the actor keeps it), and its record.
  std::shared_ptr<actor_hold> holder;
  const hold* holder_rec = nullptr;
  for (auto until = clock_type::now() + std::chrono::seconds(2); !holder && !w.stopping && clock_type::now() < until;) {
    for (auto& [id, kept] : w.holding) {
      auto held = kept.lock();
      const auto* rec = w.h.find_hold(id);
      if (held && *held && rec && rec->end == never && rec->lease == lease) {
        holder = std::move(held);
        holder_rec = rec;
      }
    }
    if (!holder) co_await sleep_for(ms(2));
  }
  if (w.stopping || !s->usable()) co_return;  // closed, orphaned or lost meanwhile: nothing to end
  // A session of the lease on another client (adopted meanwhile) would renew it whatever client
  // 0's links do: orphaned, it renews nothing.
  if (by_link)
    for (auto& o : w.sessions)
      if (o->lease == lease && o->client != 0 && !o->closed && !o->orphaned) w.orphan_session(*o);
  std::optional<compare> fence;
  std::string name;
  const int holder_obj = holder_rec ? holder_rec->object : -1;
  if (holder && *holder && (holder->kind == recipe::mutex || holder->kind == recipe::election)) fence = holder->fence();
  if (holder_rec) name = holder_rec->name;
  holder.reset();  // the actor's again alone: it may release or drop it whenever it likes
  const auto doom = w.h.note(-1, by_link ? "expiry.hold_links" : "expiry.revoke", name, holder_obj, s->id, lease,
                             holder_rec ? "under a holder" + std::string(fence ? ", fence kept" : "") : "no holder");
  w.revoked.insert(lease);
  for (auto& o : w.sessions) o->doomed = o->doomed || o->lease == lease;  // not adopted again, say
  w.h.end_holds_if([&](const hold& h) { return h.lease == lease; }, doom);
  x.under_holder += holder_rec != nullptr;
  const auto grace = by_link ? ms(1000) : ms(ttl) + ms(2500);
  if (by_link) {
    for (auto* p : x.links) p->hold();
    for (auto until = clock_type::now() + ttl + std::chrono::seconds(6); clock_type::now() < until;) {
      auto asking = lease_gone(w, lease);
      if (co_await std::move(asking)) {
        known_end(w, x, lease, "expired under held links", static_cast<double>(grace.count()));
        break;
      }
      co_await sleep_for(ms(100));
    }
  } else {
    auto op = w.h.invoke(-1, "lease.revoke", "", -1, s->id, lease);
    auto revoking = w.judge->async_lease_revoke(lease, asio::as_tuple(use_awaitable));
    auto [ec, hdr] = co_await std::move(revoking);
    w.h.complete(op, ec ? ec.message() : "ok at revision " + std::to_string(hdr.revision));
    if (!ec) known_end(w, x, lease, "revoked by the judge", static_cast<double>(grace.count()));
    for (auto until = clock_type::now() + std::chrono::seconds(15); ec && !w.stopping && clock_type::now() < until;) {
      auto asking = lease_gone(w, lease);  // an answer lost under a fault: find out
      if (co_await std::move(asking)) {
        known_end(w, x, lease, "revoked by the judge (its answer lost)", static_cast<double>(grace.count()));
        break;
      }
      co_await sleep_for(ms(200));
    }
  }
  const auto known_at = clock_type::now();
  const auto it = x.ends.find(lease);
  if (it == x.ends.end()) {
    ++x.survived;
    w.h.note(-1, "expiry.survived", "", -1, s->id, lease, "still there: adopted elsewhere, or renewed by a new leader");
  } else {
    ++(by_link ? x.by_link : x.by_revoke);
    if (fence) {
      ++x.fence_probes;
      auto t = txn().when(*fence).then(txn_op::put(w.data_key(name, "expired/" + hex(lease)), ""));
      auto op = w.h.invoke(-1, "expiry.fence_probe", name, holder_obj, s->id, lease);
      auto probing = w.judge->async_txn(t, asio::as_tuple(use_awaitable));
      auto [ec, r] = co_await std::move(probing);
      w.h.complete(op, ec ? "outcome unknown: " + ec.message() : r.succeeded ? "passed" : "rejected");
      if (!ec && r.succeeded)
        w.h.fail({"(g) no fenced write passes once its lease is gone", name,
                  "a fence of a hold through obj" + std::to_string(holder_obj) + " built while it held passed after lease " + hex(lease) +
                      " ended (#" + std::to_string(it->second.seq) + ")",
                  doom, w.h.last_seq(), {}});
    }
    const auto rest = known_at + grace - clock_type::now();
    if (rest > clock_type::duration::zero()) co_await sleep_for(rest);
    check_told(w, x, lease);
  }
  if (by_link)
    for (auto* p : x.links) p->restore();
}

/// Ends leases on purpose until the deadline (none starts unless it can be over 4 s before it),
/// alternating the kind from x.first_kind.
inline asio::awaitable<void> lease_expiry(world& w, expiry_state& x, std::uint64_t seed) {
  chooser c(seed);
  co_await sleep_for(ms(c.between(300, 1500)));
  for (int i = 0; !w.stopping && clock_type::now() + std::chrono::seconds(10) < w.deadline; ++i) {
    auto ending = end_one_lease(w, x, c, (x.first_kind + i) % 2 == 0);
    co_await std::move(ending);
    co_await sleep_for(ms(c.between(200, 1000)));
  }
}

/// Lease ends the history shows: each session close answered (its revoke applied, or the lease
/// was gone already), fences judged only.
inline void add_closes(const history& h, std::map<std::int64_t, lease_end>& ends) {
  for (auto& e : h.events())
    if (e.phase == entry::complete && e.what == "session.close" && e.result == "ok") {
      auto [it, fresh] = ends.try_emplace(e.lease, lease_end{e.seq, e.ms, 0, "closed"});
      if (!fresh && e.seq < it->second.seq) {
        it->second.seq = e.seq;
        it->second.ms = e.ms;
      }
    }
}

/// Over the whole history, for each known end: (g) no fenced write invoked after it applied;
/// (h) no acquisition of its lease told it holds past its grace.
inline void check_lease_ends(history& h, const std::map<std::int64_t, lease_end>& ends) {
  std::map<long, long> invoked;  // op -> seq of its invocation
  for (auto& e : h.events()) {
    if (e.phase == entry::invoke) invoked[e.op] = e.seq;
    if (e.phase != entry::complete) continue;
    auto it = ends.find(e.lease);
    if (it == ends.end()) continue;
    const auto& end = it->second;
    if (e.what == "fenced_write" && e.result == "applied" && invoked[e.op] > end.seq)
      h.fail({"(g) no fenced write passes once its lease is gone", e.name,
              "a fenced write of lease " + hex(e.lease) + " called at #" + std::to_string(invoked[e.op]) +
                  " applied, after the lease ended (" + end.how + ") at #" + std::to_string(end.seq),
              end.seq, e.seq, e.hold ? std::vector<long>{e.hold} : std::vector<long>{}});
    if (is_acquire(e.what) && e.result == "ok" && end.told_until > 0 && e.ms > end.told_until)
      h.fail({"no caller told it holds after its key is gone", e.name,
              "told it holds through obj" + std::to_string(e.object) + " at " + std::to_string(static_cast<long>(e.ms)) +
                  " ms, lease " + hex(e.lease) + " ended (" + end.how + ") at #" + std::to_string(end.seq) + ", " +
                  std::to_string(static_cast<long>(e.ms - end.ms)) + " ms before",
              end.seq, e.seq, e.hold ? std::vector<long>{e.hold} : std::vector<long>{}});
  }
}

}  // namespace coetcd::test::explore
