// coetcd::cache: list the prefix, follow it on the shared watch, list again after a compaction;
// the waiters and the one reader of changes. All state lives on the cache's executor.
#include "core/bidi_stream.hpp"
#include "core/coro.hpp"

#include <coetcd/cache.hpp>

#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <atomic>
#include <deque>
#include <set>

namespace coetcd {
namespace detail {

// One key: its key and value in one allocation beside the set's node (about 100 bytes a key
// beside the data, not two strings' worth).
struct cache_entry {
  std::unique_ptr<char[]> bytes;  // the key, then the value
  std::uint32_t key_size = 0;
  std::uint32_t value_size = 0;
  std::int64_t create_revision = 0;
  std::int64_t mod_revision = 0;
  std::int64_t version = 0;
  std::int64_t lease = 0;

  explicit cache_entry(const key_value& kv)
      : bytes(new char[kv.key.size() + kv.value.size()]),
        key_size(static_cast<std::uint32_t>(kv.key.size())),
        value_size(static_cast<std::uint32_t>(kv.value.size())),
        create_revision(kv.create_revision),
        mod_revision(kv.mod_revision),
        version(kv.version),
        lease(kv.lease) {
    std::copy(kv.key.begin(), kv.key.end(), bytes.get());
    std::copy(kv.value.begin(), kv.value.end(), bytes.get() + key_size);
  }
  std::string_view key() const { return {bytes.get(), key_size}; }
  std::string_view value() const { return {bytes.get() + key_size, value_size}; }
  key_value to_key_value() const {
    return key_value{std::string(key()), std::string(value()), create_revision, mod_revision, version, lease};
  }
};

// Ordered by key, looked up by a string_view: the entry is the whole node (no key copy beside it).
struct by_key {
  using is_transparent = void;
  static std::string_view key(const cache_entry& e) { return e.key(); }
  static std::string_view key(std::string_view k) { return k; }
  template <class A, class B>
  bool operator()(const A& a, const B& b) const {
    return key(a) < key(b);
  }
};
using cache_map = std::set<cache_entry, by_key>;

// Puts `kv` in, in place of the key's entry if there is one.
void store(cache_map& m, const key_value& kv) {
  auto it = m.find(std::string_view(kv.key));
  if (it == m.end()) {
    m.emplace(kv);
    return;
  }
  auto node = m.extract(it);
  node.value() = cache_entry(kv);
  m.insert(std::move(node));
}

struct cache_state : std::enable_shared_from_this<cache_state> {
  asio::any_io_executor ex;
  std::shared_ptr<client_impl> client;
  std::string prefix;
  cache_options options;

  cache_map entries;
  std::int64_t revision = 0;
  bool synced = false;
  bool stopped = false;
  error_code failed;  // why the cache stopped for good (empty prefix, client closed)
  std::uint64_t relists = 0;
  watcher watch;
  std::shared_ptr<asio::steady_timer> backoff;
  asio::cancellation_signal cancel;  // to follow(): stop() ends its Range, watch creation or pause

  struct revision_waiter {
    std::int64_t revision;
    std::shared_ptr<handler<>> h;  // shared with its cancellation handler
  };
  std::vector<revision_waiter> waiters;

  std::deque<watch_event> pending;  // changes the reader has not taken yet
  bool reader_reset = false;        // the reader must re-read the cache
  std::shared_ptr<handler<cache_update>> reader;
  std::shared_ptr<std::atomic<bool>> reader_cancelled;  // set by the reader's cancellation slot

  void complete(handler<> h, error_code ec) { asio::post(ex, asio::append(std::move(h), ec)); }
  void complete(handler<cache_update> h, error_code ec, cache_update u) {
    asio::post(ex, asio::append(std::move(h), ec, std::move(u)));
  }

  bool reached(std::int64_t r) const { return synced && revision >= r; }

  void wake_waiters() {
    std::erase_if(waiters, [this](revision_waiter& w) {
      if (!*w.h) return true;  // cancelled
      if (!failed && !reached(w.revision)) return false;
      asio::get_associated_cancellation_slot(*w.h).clear();
      complete(std::move(*w.h), failed);
      return true;
    });
  }

  // Hands the reader its update. What the update holds is taken when it runs, on the cache's
  // executor, in the same task as the handler when that is its executor: the reader re-reading
  // the cache on a reset sees exactly the revision the update names, and a cancel that came
  // after this was posted (the other branch of an `||` won) loses nothing.
  void feed_reader() {
    if (!reader || !*reader || (pending.empty() && !reader_reset && !failed)) return;
    auto h = std::move(*reader);
    reader.reset();
    auto cancelled = std::exchange(reader_cancelled, nullptr);
    asio::post(ex, [self = shared_from_this(), h = std::move(h), cancelled]() mutable {
      asio::get_associated_cancellation_slot(h).clear();
      if (cancelled && *cancelled) return asio::dispatch(asio::append(std::move(h), make_error_code(asio::error::operation_aborted), cache_update{}));
      cache_update u;
      u.revision = self->revision;
      error_code ec;
      if (std::exchange(self->reader_reset, false)) {
        u.reset = true;
        self->pending.clear();
      } else if (!self->pending.empty()) {
        u.events.assign(std::make_move_iterator(self->pending.begin()), std::make_move_iterator(self->pending.end()));
        self->pending.clear();
      } else {
        ec = self->failed;
      }
      asio::dispatch(asio::append(std::move(h), ec, std::move(u)));
    });
  }

  // A change from the watch, in order; one at a revision the cache held before this batch is
  // skipped (a txn's changes share one revision, and etcd never splits a revision across
  // responses, so `base` is the revision before the batch).
  void apply(watch_event& e, std::int64_t base) {
    if (e.kv.mod_revision <= base) return;
    // The value the cache held goes with the change: the reader has it without asking etcd for
    // prev_kv (which would send every changed value twice).
    auto it = entries.find(std::string_view(e.kv.key));
    if (it != entries.end()) e.prev_kv = it->to_key_value();
    else e.prev_kv.reset();
    if (e.type == watch_event::kind::put) store(entries, e.kv);
    else if (it != entries.end()) entries.erase(it);
    revision = e.kv.mod_revision;
    if (reader_reset) return;  // the reader re-reads everything anyway
    if (pending.size() >= std::max<std::size_t>(options.max_pending_events, 1)) {
      pending.clear();
      reader_reset = true;  // a slow reader costs no memory: it reads the cache again instead
      return;
    }
    pending.push_back(std::move(e));
  }

  void stop(error_code why) {
    if (stopped) return;
    stopped = true;
    failed = why;
    watch.cancel();
    if (backoff) backoff->cancel();
    cancel.emit(asio::cancellation_type::terminal);
    wake_waiters();
    feed_reader();
  }
};

namespace {

asio::awaitable<void> pause(cache_state& s, std::chrono::milliseconds d) {
  s.backoff = std::make_shared<asio::steady_timer>(s.ex, d);
  auto timer = s.backoff;  // named: see docs/how-it-works.md (g++ 12 and co_await)
  co_await timer->async_wait(as_result);
}

// The prefix listed into the cache (the answer freed once copied). An error: nothing changed.
asio::awaitable<error_code> list(std::shared_ptr<cache_state> s) {
  std::string key = s->prefix;
  auto [ec, listed] = co_await get_on(s->client, std::move(key), get_options{.prefix = true});
  if (ec || s->stopped) co_return ec;
  s->entries.clear();
  for (auto& kv : listed.kvs) store(s->entries, kv);
  s->revision = listed.header.revision;
  if (s->synced) {
    ++s->relists;
    s->pending.clear();
    s->reader_reset = true;  // the reader cannot bridge the gap either
  }
  s->synced = true;
  s->wake_waiters();
  s->feed_reader();
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
            // A progress notification: nothing of the prefix changed up to the header's revision.
            s->revision = std::max(s->revision, batch.header.revision);
          }
          const auto base = s->revision;
          for (auto& e : batch.events) s->apply(e, base);
          s->wake_waiters();
          s->feed_reader();
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

void start_cache_next(const std::shared_ptr<cache_state>& s, handler<cache_update> h) {
  if (!s) return fail_empty(std::move(h));
  auto slot = asio::get_associated_cancellation_slot(h);
  auto shared = std::make_shared<handler<cache_update>>(std::move(h));
  auto cancelled = std::make_shared<std::atomic<bool>>(false);
  if (slot.is_connected())
    slot.assign([s, w = std::weak_ptr<handler<cache_update>>(shared), cancelled](asio::cancellation_type) {
      *cancelled = true;  // an update already on its way is not delivered (see feed_reader)
      asio::dispatch(s->ex, [s, w] {
        auto h = w.lock();
        if (!h || !*h) return;
        if (s->reader == h) s->reader.reset();
        asio::get_associated_cancellation_slot(*h).clear();
        s->complete(std::move(*h), asio::error::operation_aborted, {});
      });
    });
  asio::dispatch(s->ex, [s, shared, cancelled] {
    if (!*shared) return;
    if (s->reader && *s->reader) {
      asio::get_associated_cancellation_slot(*shared).clear();
      return s->complete(std::move(*shared), asio::error::already_started, {});
    }
    s->reader = shared;
    s->reader_cancelled = cancelled;
    s->feed_reader();
  });
}

}  // namespace detail

cache::cache(client& c, std::string prefix, cache_options options)
    : cache(c.impl() ? c.get_executor() : asio::any_io_executor(asio::system_executor()), c, std::move(prefix), options) {}

cache::cache(asio::any_io_executor ex, client& c, std::string prefix, cache_options options)
    : state_(std::make_shared<detail::cache_state>()) {
  state_->ex = std::move(ex);
  state_->client = c.impl();
  state_->prefix = std::move(prefix);
  state_->options = options;
  if (state_->prefix.empty() || !state_->client) {
    auto why = state_->prefix.empty() ? make_error_code(error::empty_key) : make_error_code(error::client_closed);
    asio::dispatch(state_->ex, [s = state_, why] { s->stop(why); });
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
