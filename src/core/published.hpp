// What the strand writes and any thread may read through an object's accessors (held(),
// fencing_token(), header(), ...), without a lock: a seqlock for a response header.
#pragma once

#include <coetcd/kv.hpp>

#include <atomic>
#include <cstdint>

namespace coetcd::detail {

/// A response_header written by one thread at a time (the client's strand) and read by any: the
/// reader retries while a write is in progress, so it never sees half of one header and half of
/// another, and nothing is a data race (every field is an atomic).
class published_header {
 public:
  void store(const response_header& h) noexcept {
    const auto s = seq_.load(std::memory_order_relaxed);
    seq_.store(s + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    cluster_id_.store(h.cluster_id, std::memory_order_relaxed);
    member_id_.store(h.member_id, std::memory_order_relaxed);
    revision_.store(h.revision, std::memory_order_relaxed);
    raft_term_.store(h.raft_term, std::memory_order_relaxed);
    seq_.store(s + 2, std::memory_order_release);
  }
  published_header& operator=(const response_header& h) noexcept {
    store(h);
    return *this;
  }
  response_header load() const noexcept {
    response_header h;
    for (;;) {
      const auto before = seq_.load(std::memory_order_acquire);
      if (before & 1u) continue;  // a write is in progress
      h.cluster_id = cluster_id_.load(std::memory_order_relaxed);
      h.member_id = member_id_.load(std::memory_order_relaxed);
      h.revision = revision_.load(std::memory_order_relaxed);
      h.raft_term = raft_term_.load(std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_acquire);
      if (seq_.load(std::memory_order_relaxed) == before) return h;
    }
  }

 private:
  std::atomic<std::uint32_t> seq_{0};
  std::atomic<std::uint64_t> cluster_id_{0}, member_id_{0};
  std::atomic<std::int64_t> revision_{0};
  std::atomic<std::uint64_t> raft_term_{0};
};

}  // namespace coetcd::detail
