// The readers of a coetcd::cache's changes: each one's cursor, the difference it gets when it
// could not keep every change, and cache_reader. All state lives on the cache's executor.
#include "cache_state.hpp"

namespace coetcd {
namespace detail {

void cache_reader_state::note(watch_event& e, bool last, std::size_t max_pending) {
  if (!collapsed && pending.size() >= std::max<std::size_t>(max_pending, 1)) collapse();
  if (collapsed) return remember(e.kv.key, e.prev_kv, e.type == watch_event::kind::del);
  if (last) pending.push_back(std::move(e));
  else pending.push_back(e);
}

void cache_reader_state::collapse() {
  if (collapsed) return;
  collapsed = true;
  for (auto& e : pending) remember(e.kv.key, e.prev_kv, e.type == watch_event::kind::del);
  pending.clear();
}

void cache_reader_state::remember(const std::string& key, const std::optional<key_value>& before, bool gone) {
  auto it = seen.find(key);
  if (it == seen.end()) {
    // Its first change since the reader's last update: the reader knows what the cache held.
    if (before || !gone) seen.emplace(key, before);
    return;
  }
  // A key the reader never knew, gone again: nothing to tell, and nothing kept (a stream of
  // short-lived keys costs a slow reader no memory).
  if (!it->second && gone) seen.erase(it);
}

cache_update cache_state::take(cache_reader_state& r) {
  cache_update u;
  u.revision = revision;
  if (!r.collapsed) {
    u.events.assign(std::make_move_iterator(r.pending.begin()), std::make_move_iterator(r.pending.end()));
    r.pending.clear();
    return u;
  }
  u.reset = true;
  for (auto& [key, before] : r.seen) {
    auto it = entries.find(std::string_view(key));
    if (it != entries.end()) {
      if (before && before->mod_revision == it->mod_revision) continue;  // the same put: unchanged
      u.events.push_back(watch_event{watch_event::kind::put, it->to_key_value(), std::move(before)});
    } else if (before) {
      watch_event gone;
      gone.type = watch_event::kind::del;
      gone.kv.key = key;
      gone.kv.mod_revision = revision;  // when it went is not known: it is gone at this revision
      gone.prev_kv = std::move(before);
      u.events.push_back(std::move(gone));
    }
  }
  r.seen.clear();
  r.collapsed = false;
  return u;
}

// Hands `r` its update. What the update holds is taken when it runs, on the cache's executor,
// in the same task as the handler when that is its executor: the reader re-reading the cache
// sees exactly the revision the update names, and a cancel that came after this was posted
// (the other branch of an `||` won) loses nothing.
void cache_state::feed(const std::shared_ptr<cache_reader_state>& r) {
  if (!r->waiter || !*r->waiter || (r->pending.empty() && !r->collapsed && !failed)) return;
  auto h = std::move(*r->waiter);
  r->waiter.reset();
  auto cancelled = std::exchange(r->waiter_cancelled, nullptr);
  asio::post(ex, [self = shared_from_this(), r, h = std::move(h), cancelled]() mutable {
    asio::get_associated_cancellation_slot(h).clear();
    if (cancelled && *cancelled)
      return asio::dispatch(asio::append(std::move(h), make_error_code(asio::error::operation_aborted), cache_update{}));
    error_code ec;
    cache_update u;
    if (r->collapsed || !r->pending.empty()) {
      u = self->take(*r);
    } else {
      u.revision = self->revision;
      ec = self->failed;
    }
    asio::dispatch(asio::append(std::move(h), ec, std::move(u)));
  });
}

void start_cache_next(const std::shared_ptr<cache_state>& s, const std::shared_ptr<cache_reader_state>& reader,
                      handler<cache_update> h) {
  if (!s) return fail_empty(std::move(h));
  auto r = reader ? reader : s->own_reader;
  auto slot = asio::get_associated_cancellation_slot(h);
  auto shared = std::make_shared<handler<cache_update>>(std::move(h));
  auto cancelled = std::make_shared<std::atomic<bool>>(false);
  if (slot.is_connected())
    slot.assign([s, r, w = std::weak_ptr<handler<cache_update>>(shared), cancelled](asio::cancellation_type) {
      *cancelled = true;  // an update already on its way is not delivered (see feed)
      asio::dispatch(s->ex, [s, r, w] {
        auto h = w.lock();
        if (!h || !*h) return;
        if (r->waiter == h) r->waiter.reset();
        asio::get_associated_cancellation_slot(*h).clear();
        s->complete(std::move(*h), asio::error::operation_aborted, {});
      });
    });
  asio::dispatch(s->ex, [s, r, shared, cancelled] {
    if (!*shared) return;
    if (r->waiter && *r->waiter) {
      asio::get_associated_cancellation_slot(*shared).clear();
      return s->complete(std::move(*shared), asio::error::already_started, {});
    }
    r->waiter = shared;
    r->waiter_cancelled = cancelled;
    s->feed(r);
  });
}

}  // namespace detail

cache_reader::cache_reader(const cache& c) : cache_(c.state_) {
  if (!cache_) return;
  reader_ = std::make_shared<detail::cache_reader_state>();
  cache_->readers.push_back(reader_);
}

cache_reader& cache_reader::operator=(cache_reader&& other) noexcept {
  if (this != &other) {
    stop();
    cache_ = std::move(other.cache_);
    reader_ = std::move(other.reader_);
  }
  return *this;
}

cache_reader::~cache_reader() { stop(); }

void cache_reader::stop() noexcept {
  if (!reader_) return;
  auto ex = cache_->ex;  // named first: the lambda below takes cache_
  asio::dispatch(ex, [s = std::move(cache_), r = std::move(reader_)] {
    std::erase(s->readers, r);
    if (!r->waiter || !*r->waiter) return;
    auto h = std::move(*r->waiter);
    r->waiter.reset();
    asio::get_associated_cancellation_slot(h).clear();
    s->complete(std::move(h), asio::error::operation_aborted, {});
  });
}

cache_reader::executor_type cache_reader::get_executor() const noexcept {
  return cache_ ? cache_->ex : executor_type();
}

}  // namespace coetcd
