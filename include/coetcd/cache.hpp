// coetcd::cache: a local copy of a prefix, kept by one Range and then the client's shared watch.
#pragma once

#include <coetcd/cache_reader.hpp>
#include <coetcd/client.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace coetcd {

/// Options of a cache.
struct cache_options {
  /// Changes kept for each reader (the cache's own and each cache_reader) that does not keep
  /// up (at least 1). Past it the reader keeps, instead of each change, only what it last saw
  /// of each key changed since its last update, and that update is a reset with the difference
  /// (see cache_update): a slow reader costs at most one saved value per key, never a queue.
  std::size_t max_pending_events = 10000;
};

namespace detail {
void start_cache_wait(const std::shared_ptr<cache_state>&, std::int64_t revision, handler<>);
}  // namespace detail

/// A local copy of every key under a prefix, answered without a request. It reads the prefix
/// once (one Range at a revision), then follows it on the client's shared watch from the next
/// revision; after a compaction the watch cannot bridge (a long disconnect) it lists the prefix
/// again and tells its readers the difference (a reset). It never applies a change twice or out
/// of order. Its own reader (async_next) sees every change from the first list on; a
/// cache_reader adds one more reader, with a cursor of its own.
///
/// Its state lives on the executor it is made with, which the caller names, as an Asio object's:
/// the cache applies changes there, and get(), range() and the other accessors must be called
/// from there too. On an io_context that one thread runs, its executor (the client's) will do,
/// and any coroutine of it may read; on a pool, give the cache a strand and read from it. (No
/// default: the client's plain executor on a pool would let the cache's own work race with
/// itself and with every read.) Destroying the cache stops it; pending operations complete with
/// operation_aborted.
class cache {
 public:
  /// The type of get_executor().
  using executor_type = asio::any_io_executor;

  /// Starts following `prefix` of `c`'s cluster, its state on `ex`: `c.get_executor()` for an
  /// io_context run by one thread, a strand (asio::make_strand(ioc)) when several run it. An
  /// empty prefix follows every key of the client's namespace (client_options::key_prefix), or
  /// of the whole cluster for a client without one. A moved-from client: the cache stops at
  /// once, its waits completing with error::client_closed.
  cache(asio::any_io_executor ex, client& c, std::string prefix, cache_options options = {});
  /// Takes `other`'s cache over; `other` is left empty (its operations: bad_descriptor).
  cache(cache&& other) noexcept;
  /// Stops this cache (as the destructor), then takes `other`'s over.
  cache& operator=(cache&& other) noexcept;
  /// Stops the cache: what waits on it completes with operation_aborted.
  ~cache();

  /// Completes once the cache holds the whole prefix at some revision (at once if it does).
  ///
  /// @par Handler signature
  /// `void(error_code)`
  /// @par Errors
  /// error::client_closed, error::permission_denied and the
  /// auth errors (the prefix may not be read or watched: the cache stops), operation_aborted
  /// (cache destroyed), asio::error::bad_descriptor (a moved-from cache).
  /// @par Cancellation
  /// Terminal, partial, total: operation_aborted.
  /// @par Executor
  /// The handler's associated executor (default: the cache's); never inside this call.
  template <class CompletionToken = detail::default_token>
  auto async_wait_synced(CompletionToken&& token = {}) {
    return async_wait_for(0, std::forward<CompletionToken>(token));
  }

  /// Completes once the cache has applied every change of its prefix up to `revision` (as
  /// async_wait_synced for 0): after a write to the prefix at revision R, async_wait_for(R)
  /// then get() reads that write. When no change of the prefix brings the cache to `revision`
  /// (a write elsewhere, an idle prefix), the cache looks after 50 ms with one read of the
  /// prefix's key count and latest put, and is at that read's revision when nothing of the
  /// prefix changed since its last change (then again, up to once a second, while it is not).
  ///
  /// @par Handler signature, Errors, Cancellation, Executor
  /// As async_wait_synced.
  template <class CompletionToken = detail::default_token>
  auto async_wait_for(std::int64_t revision, CompletionToken&& token = {}) {
    return detail::initiate<void(error_code)>(
        std::forward<CompletionToken>(token),
        [s = state_](detail::handler<> h, std::int64_t r) { detail::start_cache_wait(s, r, std::move(h)); }, revision);
  }

  /// The next update for this cache's own reader, made with the cache: the changes since the
  /// last update, or a reset with the difference (see cache_update); each update and delete
  /// with the value it replaced. Other readers (cache_reader) have cursors of their own. The
  /// first update after the initial list is the first change (the initial contents are read
  /// with get()/range() once synced). The update is taken when its handler runs: a handler on
  /// the cache's executor reads the cache at exactly the update's revision.
  ///
  /// @par Handler signature
  /// `void(error_code, cache_update)`
  /// @par Errors
  /// As async_wait_synced; asio::error::already_started when another async_next of the
  /// cache's own reader is pending.
  /// @par Cancellation
  /// Terminal, partial, total: operation_aborted; the changes stay for the next async_next.
  /// @par Executor
  /// As async_wait_synced.
  template <class CompletionToken = detail::default_token>
  auto async_next(CompletionToken&& token = {}) {
    return detail::initiate<void(error_code, cache_update)>(
        std::forward<CompletionToken>(token),
        [s = state_](detail::handler<cache_update> h) { detail::start_cache_next(s, nullptr, std::move(h)); });
  }

  /// The key as the cache holds it; empty when absent (or not synced yet). On the executor.
  std::optional<key_value> get(std::string_view key) const;
  /// The keys in [from, to) (to empty: to the end of the prefix), in key order. On the executor.
  std::vector<key_value> range(std::string_view from = {}, std::string_view to = {}) const;
  /// Keys held. On the executor, as the rest.
  std::size_t size() const noexcept;
  /// The revision the contents are at (0 before the first list): the last change's, or past it
  /// when the server said nothing of the prefix changed since. On the executor.
  std::int64_t revision() const noexcept;
  /// Whether the first list is done.
  bool synced() const noexcept;
  /// Times the cache listed its prefix again (compactions it could not bridge, lost watches).
  std::uint64_t relists() const noexcept;
  /// The prefix.
  const std::string& prefix() const noexcept;
  /// The cache's executor.
  executor_type get_executor() const noexcept;

 private:
  friend class cache_reader;
  std::shared_ptr<detail::cache_state> state_;
};

}  // namespace coetcd
