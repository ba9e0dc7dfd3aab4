// coetcd::cache_reader: one more reader of a coetcd::cache's changes, with a cursor of its own.
#pragma once

#include <coetcd/client.hpp>

#include <cstdint>
#include <memory>
#include <vector>

namespace coetcd {

class cache;

/// What a reader of a cache gets (cache::async_next, cache_reader::async_next).
///
/// Mostly the changes applied since the reader's last update, one by one in revision order.
/// When they could not be kept one by one (the cache listed its prefix again after a compaction
/// its watch could not bridge, or this reader fell more than cache_options::max_pending_events
/// changes behind), the update is a **reset**: `events` is then the difference between what the
/// reader had seen and the cache now, one event per key that differs, in key order.
///
/// Every update and delete carries in `prev_kv` the value the reader had before it (the cache
/// keeps it; etcd is not asked for prev_kv); a key created has none. Applying the events of
/// every update, in order, to a copy made from the cache when the reader started keeps that
/// copy equal to the cache at `revision`.
struct cache_update {
  /// The events are the difference since the reader's last update, not each change: in key
  /// order, each key once; a key deleted then has `kv.mod_revision` = `revision` (when it was
  /// deleted is not known) and `prev_kv` the last value the reader saw. A key that came and
  /// went in between is not named.
  bool reset = false;
  std::vector<watch_event> events;  ///< in revision order (a reset: in key order), each once
  std::int64_t revision = 0;        ///< the cache's revision once these are applied
};

namespace detail {
struct cache_state;
struct cache_reader_state;
/// A null reader: the cache's own (cache::async_next).
void start_cache_next(const std::shared_ptr<cache_state>&, const std::shared_ptr<cache_reader_state>&,
                      handler<cache_update>);
}  // namespace detail

/// One reader of a cache's changes, beside the cache's own (cache::async_next) and any other:
/// each has its own cursor, gets every change once and in order, and falls behind alone (its
/// own cache_options::max_pending_events, then a reset with the difference). It reads the
/// changes after what the cache held when the reader was made: make it, then read the cache
/// with get()/range() in the same handler, and no change is missed or seen twice.
///
/// Make it where the cache's accessors are called (the cache's executor), as get() and range()
/// are. Destroying it stops it; its pending async_next completes with operation_aborted.
/// Destroying the cache completes its readers' async_next with operation_aborted once their
/// changes are taken.
class cache_reader {
 public:
  /// The type of get_executor().
  using executor_type = asio::any_io_executor;

  /// An empty reader: its async_next fails with asio::error::bad_descriptor.
  cache_reader() noexcept = default;
  /// Starts reading `c`'s changes after the contents it holds now (after its first list, when
  /// it has not synced yet). On the cache's executor. A moved-from cache: an empty reader.
  explicit cache_reader(const cache& c);
  /// Takes `other`'s cursor over; `other` is left empty.
  cache_reader(cache_reader&& other) noexcept = default;
  /// Stops this reader (as the destructor), then takes `other`'s cursor over.
  cache_reader& operator=(cache_reader&& other) noexcept;
  /// Stops reading: a pending async_next completes with operation_aborted.
  ~cache_reader();

  /// The next update for this reader: the changes since its last, or a reset (see
  /// cache_update). The update is taken when its handler runs: a handler on the cache's
  /// executor reads the cache at exactly the update's revision.
  ///
  /// @par Handler signature
  /// `void(error_code, cache_update)`
  /// @par Errors
  /// As cache::async_wait_synced; asio::error::already_started when another async_next of this
  /// reader is pending; operation_aborted (the reader or the cache destroyed);
  /// asio::error::bad_descriptor (an empty reader).
  /// @par Cancellation
  /// Terminal, partial, total: operation_aborted; the changes stay for the next async_next.
  /// @par Executor
  /// The handler's associated executor (default: the cache's); never inside this call.
  template <class CompletionToken = detail::default_token>
  auto async_next(CompletionToken&& token = {}) {
    return detail::initiate<void(error_code, cache_update)>(
        std::forward<CompletionToken>(token), [c = cache_, r = reader_](detail::handler<cache_update> h) {
          detail::start_cache_next(c, r, std::move(h));
        });
  }

  /// The cache's executor (empty for an empty reader).
  executor_type get_executor() const noexcept;

 private:
  void stop() noexcept;

  std::shared_ptr<detail::cache_state> cache_;
  std::shared_ptr<detail::cache_reader_state> reader_;
};

}  // namespace coetcd
