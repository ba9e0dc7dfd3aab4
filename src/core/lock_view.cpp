// One client's view of a lock or election name's queue (see lock_view.hpp), and the semaphore tally.
#include "lock_view.hpp"

#include "bidi_stream.hpp"
#include "txn_batcher.hpp"

#include <charconv>
#include <limits>

namespace coetcd::detail {

namespace {
// A lowercase hex number of 1 to 16 digits.
bool is_hex(std::string_view s) {
  return !s.empty() && s.size() <= 16 &&
         s.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}
// A decimal number of digits only that fits in 64 bits signed, or 0. Every count a semaphore
// writes fits: its permits go up to the largest int64.
std::int64_t decimal(std::string_view s) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string_view::npos) return 0;
  std::int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() ? v : 0;
}
}  // namespace

bool is_own_key(std::string_view prefix, std::string_view key) {
  if (!key.starts_with(prefix)) return false;
  key.remove_prefix(prefix.size());
  if (key.starts_with("read/")) key.remove_prefix(5);
  else if (key.starts_with("write/")) key.remove_prefix(6);
  return key.find('/') == std::string_view::npos;
}

void permit_tally::add(const key_value& kv) {
  if (!is_own_key(prefix_, kv.key)) return;  // a longer name's: no part of this queue
  // "<lease hex>_<sequence hex>" right under the prefix, holding "<n>/<permits>".
  std::string_view rest(kv.key);
  std::string_view value(kv.value);
  std::int64_t n = 0, permits = 0;
  if (rest.starts_with(prefix_)) {
    rest.remove_prefix(prefix_.size());
    const auto cut = rest.find('_');
    const auto slash = value.find('/');
    if (cut != std::string_view::npos && is_hex(rest.substr(0, cut)) && is_hex(rest.substr(cut + 1)) &&
        slash != std::string_view::npos) {
      n = decimal(value.substr(0, slash));
      permits = decimal(value.substr(slash + 1));
    }
  }
  if (n < 1 || n > permits) {
    foreign_ = true;
    return;
  }
  if (agreed_ == 0) agreed_ = permits;
  else if (permits != agreed_) mismatch_ = true;
  // Saturated: other writers' counts may add up past 64 bits, and past `permits` the sum is
  // only ever compared with it.
  used_ = n > std::numeric_limits<std::int64_t>::max() - used_ ? std::numeric_limits<std::int64_t>::max() : used_ + n;
}

error_code permit_tally::turn(std::int64_t permits, bool& holds) const {
  holds = false;
  if (foreign_) return error::foreign_key;
  if (mismatch_ || agreed_ != permits) return error::permits_mismatch;
  holds = used_ <= permits;
  return {};
}

void lock_view_core::start() {
  asio::co_spawn(client_->strand_, run(), [self = shared_from_this()](std::exception_ptr e) {
    if (e) self->fail_all(exception_to_error(e));
  });
}

void lock_view_core::stop() {
  stopped_ = true;
  watcher_.close();
}

std::uint64_t lock_view_core::add(waiter w) {
  auto id = next_id_++;
  by_rev_.emplace(w.rev, id);
  // A key the view has not seen yet may still arrive; its absence only means loss once the
  // view has caught up with the key's revision.
  unconfirmed_.emplace(w.rev, id);
  if (w.rule.permits > 0) weighted_.insert(w.rule.permits);
  else if (!w.rule.blockers.empty()) shared_.emplace(w.rev, id);
  waiters_.emplace(id, std::move(w));
  if (ready_) changed();
  return id;
}

void lock_view_core::remove(std::uint64_t id) {
  if (auto it = waiters_.find(id); it != waiters_.end()) forget(it);
}

void lock_view_core::forget(std::map<std::uint64_t, waiter>::iterator it) {
  auto [id, rev] = std::pair(it->first, it->second.rev);
  for (auto [b, e] = by_rev_.equal_range(rev); b != e; ++b) {
    if (b->second == id) {
      by_rev_.erase(b);
      break;
    }
  }
  unconfirmed_.erase({rev, id});
  shared_.erase({rev, id});
  if (auto p = it->second.rule.permits; p > 0) weighted_.erase(weighted_.find(p));
  waiters_.erase(it);
}

bool lock_view_core::may_have_keys_under(const std::string& sub) const {
  if (!ready_) return true;
  auto it = keys_.lower_bound(sub);
  return it != keys_.end() && it->first.starts_with(sub);
}

std::uint64_t lock_view_core::listen(std::function<void(error_code)> fn) {
  auto id = next_id_++;
  if (ready_) fn({});
  listeners_.emplace(id, std::move(fn));
  return id;
}

const key_value* lock_view_core::oldest() const {
  return order_.empty() ? nullptr : &keys_.at(order_.begin()->second);
}

asio::awaitable<void> lock_view_core::run() {
  auto self = shared_from_this();  // alive while the loop runs
  while (!stopped_) {
    ready_ = false;
    keys_.clear();
    order_.clear();
    // Watch first ("from now": synced at once), then read: the Range's revision is at or after
    // the watch's start, so no change falls between them; events up to it are skipped.
    auto [ec, w] = co_await watch_on(client_, prefix_, watch_options{.prefix = true});
    if (!ec && !stopped_) {
      watcher_ = std::move(w);
      auto [ec2, r] = co_await get_on(client_, prefix_, get_options{.prefix = true});
      ec = ec2;
      if (!ec) {
        base_rev_ = view_rev_ = r.header.revision;
        for (auto& kv : r.kvs) {
          if (!is_own_key(prefix_, kv.key)) continue;  // a longer name's
          order_.emplace(kv.create_revision, kv.key);
          keys_.emplace(kv.key, std::move(kv));
        }
        // A holder whose key went in the gap (its delete event compacted away) is no holder any
        // more: kept, it would park every later exclusive enqueue for a release that never comes.
        std::erase_if(holding_, [this](const std::string& key) { return !keys_.contains(key); });
        ready_ = true;
        changed(true);
        while (!stopped_) {
          auto [ec3, b] = co_await watcher_.async_next(as_result);
          if (ec3) {
            ec = ec3;
            break;
          }
          apply(b);
          changed();
        }
      }
    }
    if (stopped_) break;
    if (ec == error::client_closed) {
      fail_all(ec);
      co_return;
    }
    // Refused (permission denied, bad credentials): waiting on cannot help the waiters of now.
    const bool refused = is_fatal_stream_error(ec);
    if (refused) fail_all(ec);
    if (client_->wants_events())
      client_->emit({.kind = event_kind::watch_relisted, .name = prefix_.substr(0, prefix_.size() - 1),
                     .detail = refused ? "refused; trying again in 1 s" : "reading the queue anew", .error = ec});
    // A compaction past our resume point, a cancelled watch or a transport error: rebuild the
    // view from scratch; waiters keep waiting and are re-evaluated against the new view.
    asio::steady_timer pause(client_->strand_, std::chrono::milliseconds(refused ? 1000 : 100));
    co_await pause.async_wait(as_result);
  }
  watcher_ = watcher();
}

void lock_view_core::apply(const watch_batch& b) {
  for (const auto& e : b.events) {
    if (e.kv.mod_revision <= base_rev_) continue;  // already in the seeding Range
    if (!is_own_key(prefix_, e.kv.key)) continue;  // a longer name's
    if (e.type == watch_event::kind::put) {
      if (keys_.insert_or_assign(e.kv.key, e.kv).second) order_.emplace(e.kv.create_revision, e.kv.key);
    } else if (auto it = keys_.find(e.kv.key); it != keys_.end()) {
      holding_.erase(it->first);
      gone_revs_.push_back(it->second.create_revision);
      order_.erase({it->second.create_revision, it->first});
      keys_.erase(it);
    }
  }
  // A watch catching up sends at most 1000 revisions per response, each stamped with the
  // current revision: only the last event says how far the view has really seen. A response
  // without events is a progress notice, which covers everything up to its revision.
  view_rev_ = std::max(view_rev_, b.events.empty() ? b.header.revision : b.events.back().kv.mod_revision);
}

void lock_view_core::changed(bool check_all) {
  std::vector<std::pair<std::function<void(error_code)>, error_code>> ready;
  auto present = [&](const waiter& w) {
    auto k = keys_.find(w.key);
    return k != keys_.end() && k->second.create_revision == w.rev;
  };
  auto settle = [&](std::map<std::uint64_t, waiter>::iterator it, error_code ec) {
    if (!ec && it->second.releases_here) holding_.insert(it->second.key);
    ready.emplace_back(std::move(it->second.done), ec);
    forget(it);
  };
  // Waiters whose key is gone: our key was deleted (lease expired, revoked, deleted by hand).
  std::vector<std::uint64_t> lost;
  if (check_all) {
    for (auto& [id, w] : waiters_)
      if (view_rev_ >= w.rev && !present(w)) lost.push_back(id);
  } else {
    // Keys of one txn share a create revision (read keys, semaphore keys): a waiter is lost only
    // when its own key went.
    for (auto rev : gone_revs_)
      for (auto [b, e] = by_rev_.equal_range(rev); b != e; ++b)
        if (!present(waiters_.at(b->second))) lost.push_back(b->second);
    for (auto it = unconfirmed_.begin(); it != unconfirmed_.end() && it->first <= view_rev_;) {
      auto w = waiters_.find(it->second);
      it = unconfirmed_.erase(it);
      if (w != waiters_.end() && !present(w->second)) lost.push_back(w->first);
    }
  }
  gone_revs_.clear();
  for (auto id : lost)
    if (auto it = waiters_.find(id); it != waiters_.end()) settle(it, error::session_lost);
  // Semaphores first: the owners' rule below would grant the oldest key whatever it counts.
  if (!weighted_.empty()) {
    std::vector<std::pair<std::uint64_t, error_code>> turns;
    weigh(turns);
    for (auto& [id, ec] : turns)
      if (auto it = waiters_.find(id); it != waiters_.end()) settle(it, ec);
  }
  // The owner: the waiters (one session may wait more than once) holding the oldest key.
  if (!order_.empty()) {
    auto oldest = order_.begin()->first;
    std::vector<std::uint64_t> owners;
    for (auto [b, e] = by_rev_.equal_range(oldest); b != e; ++b) owners.push_back(b->second);
    for (auto id : owners)
      if (auto it = waiters_.find(id); it != waiters_.end() && it->second.rule.permits == 0 && present(it->second))
        settle(it, {});
  }
  // Waiters that only wait for older keys under their `blockers`: everyone older than the oldest
  // such key. The scan stops at the first blocker, so it costs the keys ahead of it (the readers
  // holding now), not the whole queue.
  if (!shared_.empty()) {
    std::map<std::string, std::int64_t> first_blocker;  // per blockers prefix; one in practice
    auto limit = [&](const std::string& sub) {
      auto [it, fresh] = first_blocker.try_emplace(sub, std::numeric_limits<std::int64_t>::max());
      if (fresh)
        for (const auto& [rev, key] : order_)
          if (key.starts_with(sub)) {
            it->second = rev;
            break;
          }
      return it->second;
    };
    std::vector<std::uint64_t> ready_ids;
    for (auto [rev, id] : shared_) {
      auto it = waiters_.find(id);
      if (it == waiters_.end()) continue;
      if (rev >= limit(it->second.rule.blockers)) {
        if (first_blocker.size() == 1) break;  // the rest are younger still
        continue;
      }
      // A key the view has not caught up with yet cannot be judged: its blockers may not show.
      if (view_rev_ >= rev && present(it->second)) ready_ids.push_back(id);
    }
    for (auto id : ready_ids)
      if (auto it = waiters_.find(id); it != waiters_.end()) settle(it, {});
  }
  for (auto& [fn, ec] : ready) fn(ec);
  if (!listeners_.empty())
    for (auto& [id, fn] : std::map(listeners_)) fn({});
}

void lock_view_core::weigh(std::vector<std::pair<std::uint64_t, error_code>>& out) const {
  // Admission is a prefix of the queue, so the walk stops once the oldest keys fill the largest
  // count any waiter has: it costs about `permits` keys, not the whole queue. A waiter further
  // back behind a malformed key hears of it when the keys before it leave.
  permit_tally tally(prefix_);
  const auto most = *weighted_.rbegin();
  auto left = weighted_.size();
  for (const auto& [rev, key] : order_) {
    const auto& kv = keys_.at(key);
    tally.add(kv);
    for (auto [b, e] = by_rev_.equal_range(rev); b != e; ++b) {
      const auto& w = waiters_.at(b->second);
      if (w.rule.permits == 0 || w.key != key) continue;
      --left;
      // A key the view has not caught up with yet cannot be judged: older keys may not show.
      if (view_rev_ < rev) continue;
      bool holds = false;
      auto ec = tally.turn(w.rule.permits, holds);
      if (ec || holds) out.emplace_back(b->second, ec);
    }
    if (left == 0 || tally.used() > most) break;
  }
}

void lock_view_core::fail_all(error_code ec) {
  weighted_.clear();
  by_rev_.clear();
  unconfirmed_.clear();
  shared_.clear();
  for (auto& [id, w] : std::exchange(waiters_, {})) w.done(ec);
  for (auto& [id, fn] : std::exchange(listeners_, {})) fn(ec);
}

auto lock_view_core::enqueue(txn t, bool shared) -> asio::awaitable<txn_outcome> {
  auto self = shared_from_this();
  if (!shared && !stopped_ && (!waiters_.empty() || !holding_.empty())) {
    auto p = std::make_shared<parked_txn>(
        parked_txn{std::move(t), asio::steady_timer(client_->strand_, park_limit), false, false, {}, {}});
    parked_.push_back(p);
    co_await p->wake.async_wait(as_result);
    while (p->taken && !p->done) {  // in flight with a release: its outcome is ours
      p->wake.expires_at(asio::steady_timer::time_point::max());
      co_await p->wake.async_wait(as_result);
    }
    if (p->done) co_return txn_outcome{p->ec, std::move(p->result), p->resent};
    std::erase(parked_, p);
    if (co_await cancellation_requested()) co_return txn_outcome{asio::error::operation_aborted, {}, false};
    t = std::move(p->t);
  }
  auto resent = std::make_shared<bool>(false);
  std::tuple<error_code, txn_result> sent = co_await batched_txn(client_, std::move(t), write_queue(prefix_, shared), resent);
  co_return txn_outcome{std::get<0>(sent), std::move(std::get<1>(sent)), *resent};
}

auto lock_view_core::release(const std::string& key, std::int64_t rev, std::shared_ptr<bool> resent)
    -> asio::awaitable<std::tuple<error_code, bool>> {
  auto self = shared_from_this();
  holding_.erase(key);
  if (parked_.empty()) co_return co_await guarded_delete(client_, key, rev, std::move(resent));
  // One rider only: keys put by one txn share its revision, and two keys with the same create
  // revision would both count as the oldest (here and in Go's recipe).
  auto rider = parked_.front();
  parked_.erase(parked_.begin());
  rider->taken = true;
  // One write: each op succeeds or fails by itself (the rider's nested txn keeps its compare).
  std::vector<txn_op> ops{delete_op_of(key, rev), txn_op::nested(std::move(rider->t))};
  auto sent = co_await batched_write(client_, std::move(ops), prefix_, resent);
  if (sent.ec == error::lease_not_found) {
    // Only the rider's put names a lease: its session is gone. That must not keep our key.
    rider->ec = sent.ec;
    rider->done = true;
    rider->wake.cancel();
    co_return co_await guarded_delete(client_, key, rev, std::move(resent));
  }
  rider->ec = sent.ec;
  rider->resent = sent.resent;
  if (!sent.ec) rider->result = std::get<txn_result>(std::move(sent.results.at(1).value));
  rider->done = true;
  rider->wake.cancel();
  co_return std::tuple(sent.ec, !sent.ec && deleted_by(sent.results.at(0)));
}

lock_view::~lock_view() {
  // The last mutex, election or observer holding the view may go on any thread.
  asio::dispatch(core_->strand(), [core = core_] { core->stop(); });
}

std::shared_ptr<lock_view> existing_lock_view(const std::shared_ptr<client_impl>& c, const std::string& prefix) {
  auto& views = c->lock_views_;
  auto it = views.find(prefix);
  return it == views.end() ? nullptr : it->second.lock();
}

std::shared_ptr<lock_view> lock_view_for(const std::shared_ptr<client_impl>& c, const std::string& prefix) {
  auto& views = c->lock_views_;
  if (auto v = views[prefix].lock()) return v;
  auto core = std::make_shared<lock_view_core>(c, prefix);
  auto v = std::make_shared<lock_view>(core);
  views[prefix] = v;
  core->start();
  return v;
}

}  // namespace coetcd::detail
