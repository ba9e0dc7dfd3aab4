// The steps shared by mutex and election: both keep one key per session under `name + "/"`,
// and whoever holds the oldest create revision owns the name.
#pragma once

#include "lock_view.hpp"
#include "session_state.hpp"

namespace coetcd::detail {

struct acquire_result {
  error_code ec;
  std::int64_t rev = 0;  // our key's create revision (0: unknown)
  bool owner = false;    // our key is the oldest under the prefix
  txn_result txn;
};

/// One txn, as Go's Mutex.Lock / Election.Campaign: create our key under the session's lease
/// unless it exists, and read the oldest key under the prefix. With a running `view` of the
/// prefix the read is left out (etcd 3.4 answers a sorted prefix Range in O(keys)): `owner`
/// stays false and wait_turn decides from the view; the txn goes through view->enqueue.
asio::awaitable<acquire_result> acquire(session_state& s, const std::string& prefix, const std::string& key,
                                        const std::string& value, lock_view* view = nullptr);

/// Waits until our key (created at `rev`) is the oldest under the prefix. Errors: session_lost
/// (session ended, or our key vanished), operation_aborted (cancelled; never reports ownership).
asio::awaitable<error_code> wait_turn(session_state& s, std::shared_ptr<lock_view>& view, const std::string& prefix,
                                      const std::string& key, std::int64_t rev);

/// Deletes our key, guarded by its create revision when known. Runs even when the calling
/// operation was cancelled.
asio::awaitable<void> delete_key(session_state& s, const std::string& key, std::int64_t rev);

std::string lease_hex(std::int64_t id);

}  // namespace coetcd::detail
