// coetcd::cache: list the prefix, follow it on the shared watch, list again after a compaction
// (telling the readers the difference); the waiters. All state lives on the cache's executor.
#include "cache_state.hpp"
#include "core/bidi_stream.hpp"

#include <algorithm>

namespace coetcd {
namespace detail {

namespace {

// A waiter for a revision past the cache's, and no change of the prefix comes to bring the cache
// there: the prefix may be idle, or its change may be on the way. One read tells: the number of
// the prefix's keys now and the latest put among them. None put after the last change the cache
// applied, and as many keys as it holds: the prefix at the read's revision is what the cache
// holds (a key deleted shows in the number, a key put in the latest put), so the cache is at
// that revision. The read costs the server a pass over the prefix, and one key comes back.
//
// Not a progress request on the watch stream: etcd 3.4.23 answers one at once with the store's
// revision, ahead of events still queued for this watch or of a watch not caught up yet (etcd
// issue 15220), so the answer alone could let a waiter read the cache before a change at or
// below its revision is in it; 3.5 answers only once every watch of the client's shared stream
// is caught up.
asio::awaitable<void> look_at_idle_prefix(std::shared_ptr<cache_state> s) {
  std::chrono::milliseconds wait{50};  // a change that is on its way usually comes by then
  while (s->behind()) {
    auto timer = std::make_shared<asio::steady_timer>(s->ex, wait);
    s->check_timer = timer;
    co_await timer->async_wait(as_result);
    if (!s->behind()) break;
    std::string key = s->prefix;
    get_options latest_put{.prefix = true, .limit = 1, .order = sort_order::descend, .target = sort_target::mod_revision,
                           .keys_only = true};
    auto [ec, now] = co_await get_on(s->client, std::move(key), latest_put);
    if (s->stopped) break;
    // Compared with the cache as it is now: changes applied meanwhile are in both.
    const bool none_put = now.kvs.empty() || now.kvs.front().mod_revision <= s->applied;
    if (!ec && none_put && now.count == static_cast<std::int64_t>(s->entries.size())) {
      s->revision = std::max(s->revision, now.header.revision);
      s->wake_waiters();
    }
    wait = std::min(wait * 2, std::chrono::milliseconds(1000));  // changes on their way, or the read failed
  }
  s->checking = false;
}

}  // namespace

void cache_state::wake_waiters() {
  std::erase_if(waiters, [this](revision_waiter& w) {
    if (!*w.h) return true;  // cancelled
    if (!failed && !reached(w.revision)) return false;
    asio::get_associated_cancellation_slot(*w.h).clear();
    complete(std::move(*w.h), failed);
    return true;
  });
  if (!checking && behind()) {
    checking = true;
    asio::co_spawn(ex, look_at_idle_prefix(shared_from_this()), asio::detached);
  }
}

// A change from the watch, in order; one at or below the last change applied before this batch
// is skipped (a txn's changes share one revision, and etcd never splits a revision across
// responses, so `base` is that change's revision). Not `revision`: a look at an idle prefix may
// have raised it past changes still on their way (a key put and deleted again meanwhile).
void cache_state::apply(watch_event& e, std::int64_t base) {
  if (e.kv.mod_revision <= base) return;
  // The value the cache held goes with the change: its readers have it without asking etcd
  // for prev_kv (which would send every changed value twice).
  auto it = entries.find(std::string_view(e.kv.key));
  if (it != entries.end()) e.prev_kv = it->to_key_value();
  else e.prev_kv.reset();
  if (e.type == watch_event::kind::del) {
    if (it != entries.end()) entries.erase(it);
  } else if (it == entries.end()) {
    entries.emplace(e.kv);
  } else {
    auto node = entries.extract(it);
    node.value() = cache_entry(e.kv);
    entries.insert(std::move(node));
  }
  applied = e.kv.mod_revision;
  revision = std::max(revision, applied);  // a look at the prefix may have put it past this change already
  for (std::size_t i = 0; i < readers.size(); ++i)
    readers[i]->note(e, i + 1 == readers.size(), options.max_pending_events);
}

void cache_state::stop(error_code why) {
  if (stopped) return;
  stopped = true;
  failed = why;
  watch.close();
  if (backoff) backoff->cancel();
  if (check_timer) check_timer->cancel();
  cancel.emit(asio::cancellation_type::terminal);
  wake_waiters();
  feed_readers();
}

namespace {

asio::awaitable<void> pause(cache_state& s, std::chrono::milliseconds d) {
  s.backoff = std::make_shared<asio::steady_timer>(s.ex, d);
  auto timer = s.backoff;  // named: see docs/how-it-works.md (g++ 12 and co_await)
  co_await timer->async_wait(as_result);
}

// What differs between the cache's contents and a new list of the prefix, told to every reader:
// each one's next update is a reset with the difference from what it had seen.
void tell_relist(cache_state& s, std::vector<key_value>& listed) {
  auto by_name = [](const key_value& a, const key_value& b) { return a.key < b.key; };
  if (!std::is_sorted(listed.begin(), listed.end(), by_name)) std::sort(listed.begin(), listed.end(), by_name);
  for (auto& r : s.readers) r->collapse();
  auto tell = [&s](const std::string& key, const std::optional<key_value>& before, bool gone) {
    for (auto& r : s.readers) r->remember(key, before, gone);
  };
  auto held = s.entries.begin();
  auto now = listed.begin();
  while (held != s.entries.end() || now != listed.end()) {
    if (now == listed.end() || (held != s.entries.end() && held->key() < std::string_view(now->key))) {
      tell(std::string(held->key()), held->to_key_value(), true);
      ++held;
    } else if (held == s.entries.end() || std::string_view(now->key) < held->key()) {
      tell(now->key, std::nullopt, false);
      ++now;
    } else {
      if (held->mod_revision != now->mod_revision) tell(now->key, held->to_key_value(), false);
      ++held;
      ++now;
    }
  }
}

// The prefix listed into the cache (the answer freed once copied). An error: nothing changed.
asio::awaitable<error_code> list(std::shared_ptr<cache_state> s) {
  std::string key = s->prefix;
  auto [ec, listed] = co_await get_on(s->client, std::move(key), get_options{.prefix = true});
  if (ec || s->stopped) co_return ec;
  if (s->synced) {
    ++s->relists;
    tell_relist(*s, listed.kvs);  // the readers cannot bridge the gap either
  }
  s->entries.clear();
  for (auto& kv : listed.kvs) s->entries.emplace_hint(s->entries.end(), kv);
  s->revision = s->applied = listed.header.revision;
  s->synced = true;
  s->wake_waiters();
  s->feed_readers();
  co_return error_code{};
}

// List the prefix and follow it; again after a compaction or a lost watch, until stopped. A
// refusal (permission, auth) or a closed client stops the cache with that error.
asio::awaitable<void> follow(std::shared_ptr<cache_state> s) {
  std::chrono::milliseconds wait{50};
  while (!s->stopped) {
    auto ec = co_await list(s);
    if (!ec && !s->stopped) {
      std::string wkey = s->prefix;
      watch_options wo{.prefix = true, .start_revision = s->revision + 1, .progress_notify = true};
      auto [wec, w] = co_await watch_on(s->client, std::move(wkey), wo);
      ec = wec;
      if (!ec && !s->stopped) {
        s->watch = std::move(w);
        for (;;) {
          auto [nec, batch] = co_await s->watch.async_next(as_result);
          if (nec || s->stopped) {
            ec = nec;
            break;
          }
          wait = std::chrono::milliseconds(50);  // the watch works: a later loss starts the backoff afresh
          if (batch.events.empty()) {
            // A progress notification (the server's, sent behind this watch's events): nothing
            // of the prefix changed up to the header's revision.
            s->revision = std::max(s->revision, batch.header.revision);
          }
          const auto base = s->applied;
          for (auto& e : batch.events) s->apply(e, base);
          s->wake_waiters();
          s->feed_readers();
        }
      }
    }
    if (s->stopped) break;
    if (is_fatal_stream_error(ec)) {
      s->stop(ec);
      break;
    }
    if (ec == error::compacted) continue;  // list again at once: the gap is known
    co_await pause(*s, wait);  // anything else: again, later and later
    wait = std::min(wait * 2, std::chrono::milliseconds(2000));
  }
}

}  // namespace

void start_cache_wait(const std::shared_ptr<cache_state>& s, std::int64_t revision, handler<> h) {
  if (!s) return fail_empty(std::move(h));
  auto slot = asio::get_associated_cancellation_slot(h);
  auto shared = std::make_shared<handler<>>(std::move(h));
  if (slot.is_connected())
    slot.assign([s, w = std::weak_ptr<handler<>>(shared)](asio::cancellation_type) {
      asio::dispatch(s->ex, [s, w] {
        auto h = w.lock();
        if (!h || !*h) return;
        asio::get_associated_cancellation_slot(*h).clear();
        s->complete(std::move(*h), asio::error::operation_aborted);
      });
    });
  asio::dispatch(s->ex, [s, revision, shared] {
    if (!*shared) return;  // cancelled before it got here
    s->waiters.push_back({revision, shared});
    s->wake_waiters();
  });
}

}  // namespace detail

cache::cache(asio::any_io_executor ex, client& c, std::string prefix, cache_options options)
    : state_(std::make_shared<detail::cache_state>()) {
  state_->ex = std::move(ex);
  state_->client = detail::access::impl(c);
  state_->prefix = std::move(prefix);
  state_->options = options;
  if (!state_->client) {
    asio::dispatch(state_->ex, [s = state_] { s->stop(error::client_closed); });
    return;
  }
  asio::co_spawn(state_->ex, detail::follow(state_), asio::bind_cancellation_slot(state_->cancel.slot(), asio::detached));
}

cache::cache(cache&&) noexcept = default;

cache& cache::operator=(cache&& other) noexcept {
  if (this != &other) {
    if (state_) asio::dispatch(state_->ex, [s = state_] { s->stop(asio::error::operation_aborted); });
    state_ = std::move(other.state_);
  }
  return *this;
}

cache::~cache() {
  if (!state_) return;
  auto ex = state_->ex;  // named first: the lambda below takes state_
  asio::dispatch(ex, [s = std::move(state_)] { s->stop(asio::error::operation_aborted); });
}

std::optional<key_value> cache::get(std::string_view key) const {
  if (!state_) return std::nullopt;
  auto it = state_->entries.find(key);
  if (it == state_->entries.end()) return std::nullopt;
  return it->to_key_value();
}

std::vector<key_value> cache::range(std::string_view from, std::string_view to) const {
  std::vector<key_value> out;
  if (!state_) return out;
  auto& m = state_->entries;
  auto it = from.empty() ? m.begin() : m.lower_bound(from);
  for (; it != m.end() && (to.empty() || it->key() < to); ++it) out.push_back(it->to_key_value());
  return out;
}

std::size_t cache::size() const noexcept { return state_ ? state_->entries.size() : 0; }
std::int64_t cache::revision() const noexcept { return state_ ? state_->revision : 0; }
bool cache::synced() const noexcept { return state_ && state_->synced; }
std::uint64_t cache::relists() const noexcept { return state_ ? state_->relists : 0; }
const std::string& cache::prefix() const noexcept { return state_ ? state_->prefix : detail::empty_string(); }
cache::executor_type cache::get_executor() const noexcept { return state_ ? state_->ex : executor_type(); }

}  // namespace coetcd
