// async_lock_status: who holds a lock or election name and who waits, as etcd has it now.
#pragma once

#include <coetcd/client.hpp>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace coetcd {

/// One key in the queue of a lock or election name.
struct lock_entry {
  std::string key;              ///< the key
  std::string value;            ///< an election's proposal (empty for locks)
  std::int64_t lease = 0;       ///< 0: the key has no lease (made by hand)
  std::chrono::seconds ttl{0};          ///< the time the lease has left; -1 s: the lease is gone
  std::chrono::seconds granted_ttl{0};  ///< the TTL the lease was granted with
  std::int64_t create_revision = 0;  ///< the holder's is its fencing token
  /// Set when the key belongs to a longer name under this one (`a/b/<lease>` seen from `a`). It
  /// is listed among the waiters in queue order and never holds: coetcd's locks of `a` do not
  /// wait for it, while Go's and `etcdctl lock`'s queue behind it (their prefix covers it).
  std::string other_name;
};

/// Who holds a lock (or leads an election) and who waits, as the server sees it now. Works for
/// every client that lays out keys like etcd's Go concurrency package (Go, etcdctl, coetcd).
struct lock_status {
  std::string name;                   ///< the name asked about
  std::int64_t revision = 0;          ///< the store revision the answer was read at
  std::optional<lock_entry> holder;   ///< the oldest of the name's own keys (not a longer name's); empty when none
  /// A read-write lock (every own key under `name/read/` or `name/write/`, as rw_mutex and Go's
  /// recipe.RWMutex lay them out): readers hold together, so the readers queued right behind a
  /// reading `holder`, before the first writer, hold too; they are listed in also_holding.
  bool read_write = false;
  /// A semaphore's permits when every own key is an acquisition as coetcd::semaphore lays them out
  /// (`name/<lease>_<seq>` holding "<n>/<permits>", all counting the same permits); else 0. The
  /// acquisitions whose permits fit, in queue order, hold together: those after `holder` are
  /// listed in also_holding, and `permits_in_use` adds up all of theirs. A queue whose keys
  /// disagree on the permits, or mix in other keys (which the semaphore refuses to wait behind:
  /// error::permits_mismatch, error::foreign_key), is listed in plain queue order.
  std::int64_t permits = 0;
  std::int64_t permits_in_use = 0;    ///< permits of the holding acquisitions (with `permits`)
  /// The holders besides `holder`: readers (read_write) or acquisitions (permits).
  std::vector<lock_entry> also_holding;
  std::vector<lock_entry> waiters;    ///< the rest, in queue order (create revision)
  /// Longer names whose keys sit under this one (see lock_entry::other_name).
  std::vector<std::string> nested_names;
};

namespace detail {
void start_lock_status(const std::shared_ptr<client_impl>&, std::string name, handler<lock_status>);
}

/// Reads the queue of lock or election `name`: one Range of the prefix `name/` and one
/// LeaseTimeToLive per lease.
///
/// @par Handler signature
/// `void(error_code, lock_status)`
/// @par Errors
/// error::empty_key, the @ref request_errors "request errors".
/// @par Cancellation
/// Terminal, partial, total (reads only: cancelled, they changed nothing): the request in flight
/// is cancelled and the handler gets asio::error::operation_aborted.
/// @par Executor
/// The handler's associated executor (default: the client's); never inside this call. The
/// reads run on the client's strand.
/// @par Lifetimes
/// `name` is copied and `c` used only before this returns. A client closed or destroyed
/// meanwhile gives error::client_closed.
template <class CompletionToken = detail::default_token>
auto async_lock_status(client& c, std::string_view name, CompletionToken&& token = {}) {
  return detail::initiate<void(error_code, lock_status)>(
      std::forward<CompletionToken>(token), [i = detail::access::impl(c)](detail::handler<lock_status> h, std::string n) {
        detail::start_lock_status(i, std::move(n), std::move(h));
      }, std::string(name));
}

}  // namespace coetcd
