// Fuzz target: the lock family's reading of keys and values others wrote (is_own_key, permit_tally).
#include "fuzz_check.hpp"

#include "core/lock_view.hpp"

#include <charconv>

namespace coetcd_fuzz {
namespace {

using coetcd::detail::is_own_key;
using coetcd::detail::permit_tally;

std::string hex(std::uint64_t n) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%llx", static_cast<unsigned long long>(n));
  return buf;
}

// The semaphore's key and value for `n` of `permits` permits, as semaphore.cpp writes them.
coetcd::key_value acquisition(const std::string& prefix, std::uint64_t lease, std::uint64_t seq, std::int64_t n,
                              std::int64_t permits) {
  coetcd::key_value kv;
  kv.key = prefix + hex(lease) + "_" + hex(seq);
  kv.value = std::to_string(n) + "/" + std::to_string(permits);
  return kv;
}

}  // namespace

// Lines: a name, the permits a waiter counts, then a key under the name and its value, in turn.
void lock_keys(std::string_view in) {
  const auto lines = split(in, '\n');
  const std::string prefix = std::string(lines[0].empty() ? "n" : lines[0]) + "/";
  std::int64_t permits = 3;
  if (lines.size() > 1) {
    std::int64_t p = 0;
    auto [end, ec] = std::from_chars(lines[1].data(), lines[1].data() + lines[1].size(), p);
    if (ec == std::errc() && p >= 1) permits = p;
  }

  // Every layout of the recipes is the name's own; one level deeper is a longer name's.
  const std::string seg = hex(in.size() + 1);
  for (const auto& own : {prefix + seg, prefix + "read/" + seg, prefix + "write/" + seg, prefix + seg + "_" + seg}) {
    FUZZ_CHECK(is_own_key(prefix, own));
    FUZZ_CHECK(!is_own_key(prefix, own + "/" + seg));
  }

  permit_tally tally(prefix);
  std::int64_t used = 0, agreed = 0;
  for (std::size_t i = 2; i < lines.size(); i += 2) {
    coetcd::key_value kv;
    kv.key = prefix + std::string(lines[i]);
    if (i + 1 < lines.size()) kv.value = std::string(lines[i + 1]);
    const bool own = is_own_key(prefix, kv.key);
    // A key's own suffix decides: no '/' beyond a leading "read/" or "write/".
    if (own) FUZZ_CHECK(!is_own_key(prefix, kv.key + "/x") || lines[i] == "read" || lines[i] == "write");
    FUZZ_CHECK(!is_own_key(prefix + "x", kv.key) || kv.key.starts_with(prefix + "x"));
    FUZZ_CHECK(!is_own_key(kv.key + "/", prefix) || prefix.starts_with(kv.key + "/"));
    tally.add(kv);
    // Keys of longer names take no permits; the count only grows and agrees once set.
    if (!own) FUZZ_CHECK(tally.used() == used);
    FUZZ_CHECK(tally.used() >= used);
    FUZZ_CHECK(agreed == 0 || tally.permits() == agreed);
    used = tally.used();
    agreed = tally.permits();
    bool holds = true;
    const auto ec = tally.turn(permits, holds);
    FUZZ_CHECK(!ec || ec == coetcd::error::foreign_key || ec == coetcd::error::permits_mismatch);
    FUZZ_CHECK(!ec || !holds);
    if (!ec) FUZZ_CHECK(tally.permits() == permits && holds == (tally.used() <= permits));
  }

  // What the semaphore writes, it reads back: n of `permits` counts n, whatever `permits` is.
  const std::uint64_t lease = 0x694d7a1b0c3e5f17ull ^ in.size(), seq = ~std::uint64_t(in.size());
  permit_tally mine(prefix);
  mine.add(acquisition(prefix, lease, seq, permits, permits));
  bool holds = false;
  FUZZ_CHECK(!mine.turn(permits, holds) && holds && mine.used() == permits);
  mine.add(acquisition(prefix, lease, seq + 1, 1, permits));
  FUZZ_CHECK(!mine.turn(permits, holds) && !holds && mine.used() > permits);
}

}  // namespace coetcd_fuzz

COETCD_FUZZ_ENTRY(lock_keys)
