// The state of a coetcd::cache and of its readers (cache.cpp follows the prefix, cache_reader.cpp
// hands the changes out). Internal to the recipes; all of it lives on the cache's executor.
#pragma once

#include "core/coro.hpp"

#include <coetcd/cache.hpp>

#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <atomic>
#include <deque>
#include <map>
#include <set>

namespace coetcd::detail {

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

// One reader's cursor: the changes it has not taken, one by one, until it falls behind (or the
// cache lists its prefix again); from then on only, for each key changed since its last
// update, what it last saw of that key, so that its next update is the difference.
struct cache_reader_state {
  std::deque<watch_event> pending;
  bool collapsed = false;
  std::map<std::string, std::optional<key_value>, std::less<>> seen;  // when collapsed (absent: it did not know the key)
  std::shared_ptr<handler<cache_update>> waiter;
  std::shared_ptr<std::atomic<bool>> waiter_cancelled;  // set by the waiter's cancellation slot

  // One change the cache applied (prev_kv: what the cache held before it); the last reader
  // told may take `e` over.
  void note(watch_event& e, bool last, std::size_t max_pending);
  // From now on, the next update is the difference (the cache lists its prefix again).
  void collapse();
  // `key` changed; `before` is what the cache held, which is what this reader would know.
  void remember(const std::string& key, const std::optional<key_value>& before, bool gone);
};

struct cache_state : std::enable_shared_from_this<cache_state> {
  asio::any_io_executor ex;
  std::shared_ptr<client_impl> client;
  std::string prefix;
  cache_options options;

  cache_map entries;
  std::int64_t revision = 0;  // what the contents are known to be at (a progress notice or check may raise it)
  std::int64_t applied = 0;   // the last list's revision or the last change's: the contents are the prefix at it
  bool synced = false;
  bool stopped = false;
  error_code failed;  // why the cache stopped for good (a refusal, client closed)
  std::uint64_t relists = 0;
  watcher watch;
  std::shared_ptr<asio::steady_timer> backoff;
  asio::cancellation_signal cancel;  // to follow(): stop() ends its Range, watch creation or pause

  struct revision_waiter {
    std::int64_t revision;
    std::shared_ptr<handler<>> h;  // shared with its cancellation handler
  };
  std::vector<revision_waiter> waiters;
  bool checking = false;  // a look at an idle prefix is on its way (see cache.cpp)
  std::shared_ptr<asio::steady_timer> check_timer;

  // The cache's own reader (cache::async_next), made with it, and every cache_reader's.
  std::shared_ptr<cache_reader_state> own_reader = std::make_shared<cache_reader_state>();
  std::vector<std::shared_ptr<cache_reader_state>> readers{own_reader};

  void complete(handler<> h, error_code ec) { asio::post(ex, asio::append(std::move(h), ec)); }
  void complete(handler<cache_update> h, error_code ec, cache_update u) {
    asio::post(ex, asio::append(std::move(h), ec, std::move(u)));
  }

  bool reached(std::int64_t r) const { return synced && revision >= r; }
  // A waiter for a revision the cache has not reached.
  bool behind() const {
    return synced && !stopped &&
           std::any_of(waiters.begin(), waiters.end(), [this](const revision_waiter& w) { return *w.h && !reached(w.revision); });
  }
  // Completes the waiters the cache has reached; for the others, makes sure the cache looks
  // whether an idle prefix has reached their revision.
  void wake_waiters();

  // Applies one change of the watch (see cache.cpp) and tells every reader.
  void apply(watch_event& e, std::int64_t base);
  // Hands `r` its update if it waits and there is one (cache_reader.cpp).
  void feed(const std::shared_ptr<cache_reader_state>& r);
  void feed_readers() {
    for (auto& r : readers) feed(r);
  }
  // What `r` gets now: its changes, or the difference since its last update.
  cache_update take(cache_reader_state& r);

  void stop(error_code why);
};

}  // namespace coetcd::detail
