// Fuzz target: priority_queue's reading of the last item key of a priority (next_sequence).
#include "fuzz_check.hpp"

#include "recipes/item_queue.hpp"

#include <cstring>
#include <limits>

namespace coetcd_fuzz {

// The input is the last key under "jobs/00003", any program's; its first 8 bytes are also a
// sequence number a Go or coetcd producer wrote ("%016d").
void queue_key(std::string_view in) {
  using coetcd::detail::next_sequence;
  constexpr auto max = std::numeric_limits<std::int64_t>::max();
  const std::string prefix = "jobs/00003";
  if (auto next = next_sequence(prefix + std::string(in))) {
    // The number read is the one the last segment starts with; the key we put after it is read
    // as that key's number.
    FUZZ_CHECK(*next > std::numeric_limits<std::int64_t>::min());
    FUZZ_CHECK(next_sequence(prefix + "/" + std::to_string(*next - 1)) == next);
    char key[40];
    std::snprintf(key, sizeof key, "%0*lld", 16, static_cast<long long>(*next));
    FUZZ_CHECK(*next == max || next_sequence(prefix + "/" + key) == *next + 1);
  }
  std::int64_t written = 0;
  std::memcpy(&written, in.data(), std::min(in.size(), sizeof written));
  if (written < 0) written = -(written + 1);
  char key[40];
  std::snprintf(key, sizeof key, "%0*lld", 16, static_cast<long long>(written));
  const auto after = next_sequence(prefix + "/" + key);
  FUZZ_CHECK(written == max ? !after : after == written + 1);
}

}  // namespace coetcd_fuzz

COETCD_FUZZ_ENTRY(queue_key)
