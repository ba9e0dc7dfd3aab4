// What a client counts and tells (client::stats(), client_options::on_event). Counters are
// relaxed atomics, bumped on the strand and read by stats() from any thread; the map of lock
// names is behind a mutex taken when a name's first mutex appears or its last goes, and by
// stats() — never per lock or per call.
#pragma once

#include <coetcd/client_options.hpp>
#include <coetcd/client_stats.hpp>
#include <coetcd/detail/config.hpp>
#include <coetcd/event.hpp>

#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>

namespace coetcd::detail {

enum class rpc_kind : unsigned {
  range, put, delete_range, txn, compact, lease_grant, lease_revoke, lease_ttl, lease_leases, authenticate,
  member_list, member_add, member_remove, member_update, member_promote,
  alarm, status, defragment, hash_kv, move_leader, snapshot, count_
};
const char* rpc_name(rpc_kind k) noexcept;

enum class stream_kind : unsigned { watch, keepalive, count_ };
const char* stream_name(stream_kind k) noexcept;

inline void bump(std::atomic<std::uint64_t>& c, std::uint64_t n = 1) noexcept { c.fetch_add(n, std::memory_order_relaxed); }
inline void bump(std::atomic<std::int64_t>& c, std::int64_t n = 1) noexcept { c.fetch_add(n, std::memory_order_relaxed); }

struct lock_counters {
  explicit lock_counters(std::string n) : name(std::move(n)) {}
  const std::string name;
  std::atomic<std::int64_t> held{0}, waiting{0}, cleaning{0};
  std::atomic<std::uint64_t> acquired{0}, handoffs{0}, fenced_handoffs{0}, lost{0};
  std::array<std::atomic<std::uint64_t>, wait_histogram::bounds.size() + 1> wait_buckets{};
  std::atomic<std::uint64_t> wait_micros{0};
  void record_wait(std::chrono::steady_clock::duration d) noexcept;
};

class telemetry {
 public:
  explicit telemetry(event_hook hook)
      : hook_(hook ? std::make_shared<const event_hook>(std::move(hook)) : nullptr) {}

  struct rpc_counters {
    std::atomic<std::uint64_t> sent{0}, failed{0}, retried{0}, resent_unanswered{0};
  };
  struct stream_counters {
    std::atomic<std::uint64_t> opened{0}, reopened{0};
  };
  rpc_counters& rpc(rpc_kind k) noexcept { return rpcs_[static_cast<unsigned>(k)]; }
  stream_counters& stream(stream_kind k) noexcept { return streams_[static_cast<unsigned>(k)]; }
  std::atomic<std::int64_t> in_flight{0}, watchers{0}, leases{0};
  std::atomic<std::uint64_t> sessions_lost{0}, replies_polled{0};

  /// The counters of lock name `name`, shared by every local mutex of the name while one exists.
  std::shared_ptr<lock_counters> lock(const std::string& name);
  client_stats snapshot() const;

  bool wants_events() const noexcept { return hook_ != nullptr; }
  /// Posts the event to the hook on `strand` (after the state change that made it is complete).
  template <class Strand>
  void emit(const Strand& strand, event e) const {
    if (!hook_) return;
    asio::post(strand, [hook = hook_, e = std::move(e)] {
      try {
        (*hook)(e);
      } catch (...) {  // a hook that throws must not take the client down
      }
    });
  }

 private:
  std::shared_ptr<const event_hook> hook_;
  std::array<rpc_counters, static_cast<unsigned>(rpc_kind::count_)> rpcs_{};
  std::array<stream_counters, static_cast<unsigned>(stream_kind::count_)> streams_{};
  mutable std::mutex locks_mutex_;
  std::map<std::string, std::weak_ptr<lock_counters>> locks_;
};

}  // namespace coetcd::detail
