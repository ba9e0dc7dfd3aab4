#include "lock_view.hpp"

namespace coetcd::detail {

void lock_view_core::start() {
  asio::co_spawn(client_.impl()->strand_, run(), [self = shared_from_this()](std::exception_ptr e) {
    if (e) self->fail_all(exception_to_error(e));
  });
}

void lock_view_core::stop() {
  stopped_ = true;
  watcher_.cancel();
}

std::uint64_t lock_view_core::add(waiter w) {
  auto id = next_id_++;
  waiters_.emplace(id, std::move(w));
  if (ready_) changed();
  return id;
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
    auto [ec, w] = co_await client_.async_watch(prefix_, watch_options{.prefix = true}, as_result);
    if (!ec && !stopped_) {
      watcher_ = std::move(w);
      auto [ec2, r] = co_await client_.async_get(prefix_, get_options{.prefix = true}, as_result);
      ec = ec2;
      if (!ec) {
        base_rev_ = view_rev_ = r.header.revision;
        for (auto& kv : r.kvs) {
          order_.emplace(kv.create_revision, kv.key);
          keys_.emplace(kv.key, std::move(kv));
        }
        ready_ = true;
        changed();
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
    // A compaction past our resume point, a cancelled watch or a transport error: rebuild the
    // view from scratch; waiters keep waiting and are re-evaluated against the new view.
    asio::steady_timer pause(client_.impl()->strand_, std::chrono::milliseconds(100));
    co_await pause.async_wait(as_result);
  }
  watcher_ = watcher();
}

void lock_view_core::apply(const watch_batch& b) {
  for (const auto& e : b.events) {
    if (e.kv.mod_revision <= base_rev_) continue;  // already in the seeding Range
    if (e.type == watch_event::kind::put) {
      if (keys_.insert_or_assign(e.kv.key, e.kv).second) order_.emplace(e.kv.create_revision, e.kv.key);
    } else if (auto it = keys_.find(e.kv.key); it != keys_.end()) {
      order_.erase({it->second.create_revision, it->first});
      keys_.erase(it);
    }
  }
  view_rev_ = std::max(view_rev_, b.header.revision);
}

void lock_view_core::changed() {
  std::int64_t oldest = order_.empty() ? 0 : order_.begin()->first;
  std::vector<std::pair<std::function<void(error_code)>, error_code>> ready;
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    auto& w = it->second;
    auto k = keys_.find(w.key);
    bool present = k != keys_.end() && k->second.create_revision == w.rev;
    if (present && oldest == w.rev) {
      ready.emplace_back(std::move(w.done), error_code{});
    } else if (!present && view_rev_ >= w.rev) {
      ready.emplace_back(std::move(w.done), error::session_lost);  // our key is gone
    } else {
      ++it;
      continue;
    }
    it = waiters_.erase(it);
  }
  for (auto& [fn, ec] : ready) fn(ec);
  for (auto& [id, fn] : std::map(listeners_)) fn({});
}

void lock_view_core::fail_all(error_code ec) {
  for (auto& [id, w] : std::exchange(waiters_, {})) w.done(ec);
  for (auto& [id, fn] : std::exchange(listeners_, {})) fn(ec);
}

std::shared_ptr<lock_view> lock_view_for(client& c, const std::string& prefix) {
  auto& views = c.impl()->lock_views_;
  if (auto v = views[prefix].lock()) return v;
  auto core = std::make_shared<lock_view_core>(c, prefix);
  auto v = std::make_shared<lock_view>(core);
  views[prefix] = v;
  core->start();
  return v;
}

}  // namespace coetcd::detail
