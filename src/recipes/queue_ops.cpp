// The steps mutex and election share (see queue_ops.hpp): the acquiring txn, waiting a turn, releasing a key.
#include "queue_ops.hpp"

#include <algorithm>
#include <cstdio>
#include <random>
#include <tuple>

namespace coetcd::detail {
namespace {

asio::awaitable<void> sweep_late_put(std::shared_ptr<session_state> s, std::string key, std::int64_t deleted_at);

/// An acquisition that went more than once: a copy may be applied after the key's release and
/// put it again, under the live lease, blocking the name for everyone until the session ends
/// (the session's own next lock would adopt it). So the sweep looks for it, as after a failed
/// acquisition; a key newer than ours that the session does not use is such a copy. `sent`: the
/// txn's own outcome (a semaphore's a.ec may be its queue's, with our put applied).
void sweep_if_resent(session_state& s, const std::string& key, const acquire_result& a, error_code sent) {
  if (a.resent && !sent && a.rev != 0)
    asio::co_spawn(s.impl->strand_, sweep_late_put(s.shared_from_this(), key, a.rev), asio::detached);
}

/// Go's WithFirstCreate: the oldest key under the prefix.
constexpr get_options first_create{.prefix = true, .limit = 1, .order = sort_order::ascend,
                                   .target = sort_target::create_revision};

// `read`: the prefix to read the oldest keys of (none when empty); `limit` of them.
txn acquire_txn(const session_state& s, const std::string& key, const std::string& value, const std::string& read,
                std::int64_t limit = 1) {
  auto t = txn().when(compare::create_revision(key) == 0).then(txn_op::put(key, value, put_options{.lease = s.lease}));
  auto oldest = first_create;
  oldest.limit = limit;
  if (!read.empty()) t.then(txn_op::get(read, oldest));
  t.otherwise(txn_op::get(key));
  if (!read.empty()) t.otherwise(txn_op::get(read, oldest));
  return t;
}

// `shared`: the oldest key read is the oldest blocker (a writer), which never is our own key.
// `rule.permits`: the keys read are a semaphore's oldest, walked by its rule.
acquire_result acquired(error_code ec, txn_result r, bool read_oldest, bool shared = false,
                        const std::string& key = {}, const std::string& prefix = {}, const turn_rule& rule = {}) {
  acquire_result out;
  // A revoked lease refuses the put: for a lock or a campaign that is the session being lost.
  out.ec = ec == error::lease_not_found ? make_error_code(error::session_lost) : ec;
  if (ec) return out;
  // Then-branch: our put made the key at this revision. Else-branch: the key was already there
  // (another lock or campaign of this session); its create revision is ours.
  out.rev = out.mod_rev = r.header.revision;
  if (!r.succeeded) {
    const auto& mine = r.responses.at(0).get().kvs;
    out.rev = mine.empty() ? 0 : mine.front().create_revision;
    out.mod_rev = mine.empty() ? 0 : mine.front().mod_revision;
  }
  if (read_oldest && rule.permits > 0 && out.rev != 0) {
    // Each key takes a permit at least, so the keys up to one that fits are among the `permits`
    // oldest; the txn reads one more. etcd returns keys of one create revision (puts of one txn)
    // in any order, and the rule orders them by key: when the limit cut the group of our own
    // revision, keys before ours may be missing and the answer is open. A malformed key before
    // ours is certain either way. Keys of our group put after our op (later in the batch) are
    // not in the read; the batcher sends a queue's shared writes in key order (order_ties), so
    // those all go after ours.
    const auto& kvs = r.responses.at(1).get().kvs;
    std::vector<const key_value*> queue;
    for (const auto& kv : kvs) queue.push_back(&kv);
    std::sort(queue.begin(), queue.end(), [](const key_value* a, const key_value* b) {
      return std::tie(a->create_revision, a->key) < std::tie(b->create_revision, b->key);
    });
    const bool cut = static_cast<std::int64_t>(kvs.size()) > rule.permits && queue.back()->create_revision == out.rev;
    // Keys of longer names (is_own_key) take no permit but a place in the read: with one before
    // ours, ours may fit yet not be in the read.
    permit_tally tally(prefix);
    bool seen = false, other_names = false;
    for (const auto* kv : queue) {
      tally.add(*kv);
      other_names = other_names || !is_own_key(prefix, kv->key);
      if (kv->key == key) {
        seen = true;
        break;
      }
    }
    bool holds = false;
    out.ec = tally.turn(rule.permits, holds);
    out.undecided = !out.ec && (cut || (!seen && other_names));
    out.owner = !out.ec && seen && holds && !cut;
  } else if (read_oldest) {
    const auto& oldest = r.responses.at(1).get().kvs;
    out.owner = out.rev != 0 && (oldest.empty() || (shared ? oldest.front().create_revision > out.rev
                                                             : oldest.front().create_revision == out.rev));
    // The oldest key read is a longer name's (is_own_key): whether one of ours is older than
    // ours the read cannot tell.
    out.undecided = out.rev != 0 && !out.owner && !is_own_key(prefix, oldest.front().key);
  }
  out.txn = std::move(r);
  return out;
}

asio::awaitable<acquire_result> acquire_queued(session_state& s, const std::string& key, lock_view_core& view, txn t,
                                              bool shared) {
  auto [ec, r, resent] = co_await view.enqueue(std::move(t), shared);
  auto a = acquired(ec, std::move(r), false);
  a.resent = resent;
  sweep_if_resent(s, key, a, ec);
  co_return a;
}

}  // namespace

asio::awaitable<acquire_result> acquire(session_state& s, const std::string& prefix, const std::string& key,
                                        const std::string& value, lock_view* view, const turn_rule& rule) {
  // Read keys of one name may share a create revision (they hold together), and so may a
  // semaphore's (each counts its own permits); a write key never may.
  const bool shared = !rule.blockers.empty() || rule.permits > 0;
  if (view) return acquire_queued(s, key, view->core(), acquire_txn(s, key, value, {}), shared);
  // Not a coroutine: the caller waits on the batcher directly. A thousand sessions locking at
  // once each had four frames here while their txns queued, most of the client's peak heap. The
  // txn is built when the caller awaits, so the one frame left holds references only.
  // The batcher's queue is always the prefix.
  auto initiation = [&s, &prefix, &key, &value, &rule, shared](auto h) {
    const bool reader = !rule.blockers.empty();
    const auto limit = rule.permits > 0 ? rule.permits + 1 : 1;
    s.impl->batcher().submit_txn(acquire_txn(s, key, value, reader ? rule.blockers : prefix, limit),
                                 write_queue(prefix, shared),
                                 [h = std::move(h), reader, &s, &key, &prefix, &rule](error_code ec, txn_result r,
                                                                                    bool resent) mutable {
                                   auto a = acquired(ec, std::move(r), true, reader, key, prefix, rule);
                                   a.resent = resent;
                                   sweep_if_resent(s, key, a, ec);
                                   std::move(h)(std::move(a));
                                 });
  };
  return asio::async_initiate<const asio::use_awaitable_t<>, void(acquire_result)>(initiation, asio::use_awaitable);
}

asio::awaitable<error_code> decide_by_read(session_state& s, const std::string& prefix, const std::string& read,
                                           const std::string& key, bool shared, acquire_result& a) {
  // Up to our revision only: a later key never goes first. Keys only: O(keys ahead) bytes.
  auto [ec, r] = co_await get_on(s.impl, read, get_options{.prefix = true, .keys_only = true, .max_create_revision = a.rev});
  if (ec) co_return ec;
  bool mine = shared, older = false;  // a reader's own key is not under its blockers
  for (const auto& kv : r.kvs) {
    if (kv.key == key) mine = true;
    else if (is_own_key(prefix, kv.key) && (shared || kv.create_revision < a.rev)) older = true;
  }
  a.owner = mine && !older;
  a.txn.header = std::move(r.header);
  co_return error_code{};
}

namespace {

struct pending_acquire {
  asio::steady_timer wake;
  std::optional<acquire_result> result;
  bool abandoned = false;
};

asio::awaitable<void> run_acquire(std::shared_ptr<pending_acquire> p, std::shared_ptr<session_state> s,
                                  std::string prefix, std::string key, std::string value,
                                  std::shared_ptr<lock_view> view, turn_rule rule) {
  auto r = co_await acquire(*s, prefix, key, value, view.get(), rule);
  if (p->abandoned) {
    co_await release_key(*s, key, r.ec ? 0 : r.rev);
    co_return;
  }
  p->result = std::move(r);
  p->wake.cancel();
}

asio::awaitable<acquire_result> acquire_abandonable(std::shared_ptr<session_state> s, const std::string& prefix,
                                                    const std::string& key, const std::string& value,
                                                    std::shared_ptr<lock_view> view, bool cancellable,
                                                    const turn_rule& rule) {
  acquire_result out;
  co_await s->wait_deleted(key);
  if (co_await cancellation_requested()) {
    out.ec = asio::error::operation_aborted;
    co_return out;
  }
  if (!cancellable) co_return co_await acquire(*s, prefix, key, value, view.get(), rule);
  auto p = std::make_shared<pending_acquire>(pending_acquire{asio::steady_timer(s->impl->strand_), {}, false});
  p->wake.expires_at(asio::steady_timer::time_point::max());
  asio::co_spawn(s->impl->strand_, run_acquire(p, s, prefix, key, value, view, rule), asio::detached);
  co_await p->wake.async_wait(as_result);
  if (p->result) {
    out = std::move(*p->result);
  } else {
    p->abandoned = true;
    out.ec = asio::error::operation_aborted;
    out.abandoned = true;
  }
  co_return out;
}

}  // namespace

asio::awaitable<acquire_result> acquire_or_abandon(const std::shared_ptr<session_state>& s,
                                                   const std::string& prefix, const std::string& key,
                                                   const std::string& value, const std::shared_ptr<lock_view>& view,
                                                   bool cancellable, const turn_rule& rule) {
  // Nobody can cancel the caller (its handler has no cancellation slot) and no delete of our key
  // is on the wire: await the txn with no frame or side task of ours in between.
  if (!cancellable && !s->deleting.contains(key)) return acquire(*s, prefix, key, value, view.get(), rule);
  return acquire_abandonable(s, prefix, key, value, view, cancellable, rule);
}

namespace {

/// After the clean-up of a txn whose outcome is unknown (it timed out, or the connection broke):
/// that txn may still be in etcd's raft pipeline and put our key after the delete, under our
/// live lease, blocking the name until the session ends. So look again a few times and delete a
/// key made after our delete, unless the session uses the key again by then (a late put then
/// merges with that lock's key: its put-if-absent adopts it).
asio::awaitable<void> sweep_late_put(std::shared_ptr<session_state> s, std::string key, std::int64_t deleted_at) {
  // The session's end (closed, lost, or its client closed) ends the sweep at once, so it never
  // keeps io_context::run() from returning.
  if (s->lost) co_return;
  auto pause = std::make_shared<asio::steady_timer>(s->impl->strand_);
  auto ended = s->listen([pause] { pause->cancel(); });
  for (auto after : {std::chrono::seconds(1), std::chrono::seconds(3), std::chrono::seconds(10)}) {
    pause->expires_after(after);
    co_await pause->async_wait(as_result);
    if (s->lost || s->impl->closed()) break;
    // In use again, or being deleted: a late put landing now finds the key there and does
    // nothing; one landing after that use ends is for the next look.
    if (s->key_users.contains(key) || s->deleting.contains(key)) continue;
    delete_in_flight deleting(*s, key);
    // Unused by us and made after our delete: a late put. Deleted by its own revision (as every
    // delete is: see delete_key), never by "newer than".
    // A look that cannot read (the member it asked is slow or gone) is tried again soon, not
    // skipped: with the next look 3 or 10 s away, two lost looks left a late put for the session.
    std::optional<key_value> there;
    for (int attempt = 0; attempt < 4; ++attempt) {
      auto [gec, got] = co_await get_on(s->impl, key, {});
      if (!gec) {
        if (!got.kvs.empty()) there = std::move(got.kvs.front());
        break;
      }
      if (!may_pass(gec) || s->lost || s->impl->closed()) break;
      pause->expires_after(retry_pause(attempt));
      co_await pause->async_wait(as_result);
      if (s->lost || s->impl->closed()) break;
    }
    if (!there || there->create_revision <= deleted_at) continue;
    co_await delete_key(*s, key, there->create_revision);
  }
  s->unlisten(ended);
}

}  // namespace

namespace {

/// Runs a clean-up as a coroutine of its own, with no cancellation slot, and waits for its end.
/// A clean-up awaited inside a cancellable operation shares that operation's cancellation state,
/// and reset_cancellation_state keeps it connected to the caller's slot: a caller's timeout
/// firing mid-way used to cancel the clean-up's read or delete, which then returned with our key
/// still under the live lease. Nothing a caller does may cut a clean-up short.
template <class T>
asio::awaitable<T> run_to_end(session_state& s, asio::awaitable<T> body) {
  co_return co_await asio::co_spawn(s.impl->strand_, std::move(body),
                                    asio::bind_cancellation_slot(asio::cancellation_slot(), use_awaitable));
}

asio::awaitable<std::int64_t> delete_now(std::shared_ptr<session_state> sp, std::string key, std::int64_t rev);

// `deleting` is made by the caller, so the key counts as being deleted from the moment its last
// user gives it up, whenever this coroutine starts.
asio::awaitable<void> release_now(std::shared_ptr<session_state> s, std::string key, std::int64_t rev,
                                  std::unique_ptr<delete_in_flight> deleting) {
  const auto deleted_at = co_await delete_now(s, key, rev);
  deleting.reset();
  if (rev == 0 && deleted_at != 0)
    asio::co_spawn(s->impl->strand_, sweep_late_put(s, key, deleted_at), asio::detached);
}

}  // namespace

asio::awaitable<void> release_key(session_state& s, const std::string& key, std::int64_t rev) {
  auto& users = s.key_users[key];
  if (--users > 0) co_return;
  s.key_users.erase(key);
  auto deleting = std::make_unique<delete_in_flight>(s, key);
  co_await run_to_end(s, release_now(s.shared_from_this(), key, rev, std::move(deleting)));
}

namespace {

asio::awaitable<void> release_then(std::shared_ptr<session_state> s, std::string key, std::int64_t rev,
                                   std::unique_ptr<delete_in_flight> deleting, std::function<void(bool)> done) {
  co_await release_now(s, key, rev, std::move(deleting));
  if (done) done(true);
}

}  // namespace

void release_key_later(session_state& s, const std::string& key, std::int64_t rev, std::function<void(bool)> done) {
  auto& users = s.key_users[key];
  if (--users > 0) {
    if (done) done(false);
    return;
  }
  s.key_users.erase(key);
  // Marked now, not when the coroutine starts: a lock of the session in between waits for it.
  auto deleting = std::make_unique<delete_in_flight>(s, key);
  asio::co_spawn(s.impl->strand_, release_then(s.shared_from_this(), key, rev, std::move(deleting), std::move(done)),
                 asio::detached);
}

asio::awaitable<error_code> wait_turn(session_state& s, std::shared_ptr<lock_view>& view, const std::string& prefix,
                                      const std::string& key, std::int64_t rev, turn_rule rule, bool releases_here) {
  if (!view) view = lock_view_for(s.impl, prefix);
  struct outcome {
    asio::steady_timer wake;
    bool done = false;
    error_code ec;
  };
  // Lost while our txn was on the wire: the loss was told before we could listen for it.
  if (s.lost) co_return error::session_lost;
  auto o = std::make_shared<outcome>(outcome{asio::steady_timer(s.impl->strand_), false, {}});
  auto finish = [o](error_code ec) {
    if (o->done) return;
    o->done = true;
    o->ec = ec;
    o->wake.cancel();
  };
  // Arm the timer before registering: add() may decide at once, and a cancel() that comes
  // before the wait starts would be lost.
  o->wake.expires_at(asio::steady_timer::time_point::max());
  auto id = view->core().add({key, rev, finish, rule, releases_here});
  auto lid = s.listen([finish] { finish(error::session_lost); });
  if (!o->done) co_await o->wake.async_wait(as_result);
  view->core().remove(id);
  s.unlisten(lid);
  // The view says it is our turn, but the lease may be past its deadline with the keepalive's
  // timer still queued behind this (a busy loop): etcd may have expired it and given the turn on.
  if (o->done && !o->ec && s.lost_by_now()) co_return error::session_lost;
  // A cancelled wait never reports ownership: the canceller (a timeout, say) has moved on and
  // would never release it.
  if (co_await cancellation_requested()) co_return asio::error::operation_aborted;
  co_return o->done ? o->ec : make_error_code(asio::error::operation_aborted);
}

bool may_pass(const error_code& ec) {
  const int status = grpc_status(ec);
  return ec == error::endpoints_unreachable || ec == error::request_timeout || ec == error::cluster_no_leader ||
         ec == error::invalid_auth_token || status == grpc::StatusCode::UNAVAILABLE ||
         status == grpc::StatusCode::DEADLINE_EXCEEDED;
}

asio::awaitable<std::int64_t> delete_key(session_state& s, const std::string& key, std::int64_t rev) {
  co_return co_await run_to_end(s, delete_now(s.shared_from_this(), key, rev));
}

namespace {

asio::awaitable<std::int64_t> delete_now(std::shared_ptr<session_state> sp, std::string key, std::int64_t rev) {
  auto& s = *sp;
  // Every delete is guarded by the revision it removes: a copy may still be on its way after a
  // resend (held in a partition), and a plain one arriving after a later lock of ours made the
  // key again would remove that lock's key while it is held. Without a revision (the outcome of
  // our put is unknown), read what is there first: nothing of ours uses the key now (its users
  // gave it up, and new locks wait for this delete), so a key there is the one to remove.
  write_queue guarded;
  guarded.late_copy_safe = true;
  auto guarded_delete_of = [&key](std::int64_t r) {
    return txn().when(compare::create_revision(key) == r).then(txn_op::del(key));
  };
  // A key left under a live lease blocks the name for everyone: keep trying through an outage
  // while the session lives (once it ends, the lease takes the key with it).
  for (int attempt = 0;; ++attempt) {
    error_code ec;
    std::int64_t at = 0;
    if (rev != 0) {
      auto [dec, r] = co_await batched_txn(s.impl, guarded_delete_of(rev), guarded);
      ec = dec;
      at = r.header.revision;
    } else {
      auto [gec, got] = co_await get_on(s.impl, key, {});
      ec = gec;
      if (!ec && got.kvs.empty()) co_return got.header.revision;  // nothing there as of this read
      if (!ec) {
        auto [dec, r] = co_await batched_txn(s.impl, guarded_delete_of(got.kvs.front().create_revision), guarded);
        ec = dec;
        if (!ec && !r.succeeded) continue;  // made again since the read (a late put of ours): read again
        at = r.header.revision;
      }
    }
    if (!ec) co_return at;
    if (!may_pass(ec) || s.lost || s.impl->closed()) co_return 0;
    asio::steady_timer pause(s.impl->strand_, retry_pause(attempt));
    co_await pause.async_wait(as_result);
  }
}

}  // namespace

std::chrono::milliseconds retry_pause(int attempt) {
  thread_local std::minstd_rand spread(std::random_device{}());
  const int base = attempt < 4 ? 250 << attempt : 4000;
  return std::chrono::milliseconds(std::uniform_int_distribution<int>(base / 2, base + base / 2)(spread));
}

std::string lease_hex(std::int64_t id) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%llx", static_cast<unsigned long long>(id));
  return buf;
}

}  // namespace coetcd::detail
