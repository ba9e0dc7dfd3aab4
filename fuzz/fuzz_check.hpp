// What every fuzz target shares: FUZZ_CHECK for its invariants and the libFuzzer entry point.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

// A broken invariant aborts the fuzzer, which saves the input as a crash; in the regression suite
// (COETCD_FUZZ_NO_MAIN) it throws, so the suite names the input and goes on with the next one.
#ifdef COETCD_FUZZ_NO_MAIN
#define FUZZ_CHECK(cond)                                                                      \
  do {                                                                                        \
    if (!(cond)) throw std::logic_error(std::string(__FILE__) + ":" + std::to_string(__LINE__) + \
                                        ": invariant failed: " #cond);                        \
  } while (0)
#define COETCD_FUZZ_ENTRY(fn)
#else
#define FUZZ_CHECK(cond)                                                                          \
  do {                                                                                            \
    if (!(cond)) {                                                                                \
      std::fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond);           \
      std::abort();                                                                               \
    }                                                                                             \
  } while (0)
// The libFuzzer entry point of the target whose body is coetcd_fuzz::fn.
#define COETCD_FUZZ_ENTRY(fn)                                                          \
  extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) { \
    coetcd_fuzz::fn(std::string_view(reinterpret_cast<const char*>(data), size));      \
    return 0;                                                                          \
  }
#endif

namespace coetcd_fuzz {

// The input cut at each `sep` (the last piece may be empty).
inline std::vector<std::string_view> split(std::string_view in, char sep) {
  std::vector<std::string_view> out;
  for (;;) {
    auto at = in.find(sep);
    out.push_back(in.substr(0, at));
    if (at == std::string_view::npos) return out;
    in.remove_prefix(at + 1);
  }
}

}  // namespace coetcd_fuzz
