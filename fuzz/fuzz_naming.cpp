// Fuzz target: naming::decode of endpoint values any program wrote, and encode/decode round trips.
#include "fuzz_check.hpp"

#include <coetcd/error.hpp>
#include <coetcd/naming.hpp>

#include <boost/system/system_error.hpp>

namespace coetcd_fuzz {

// The input is a value read from etcd; when it holds a NUL, it is also an endpoint to register:
// the address before the first NUL, the metadata after it.
void naming(std::string_view in) {
  using namespace coetcd::naming;
  // What decodes re-encodes (its metadata is JSON Go read) to a value that decodes the same.
  if (auto e = decode(in)) {
    const auto value = encode(*e);
    const auto again = decode(value);
    FUZZ_CHECK(again && *again == *e);
    FUZZ_CHECK(encode(*again) == value);
  }
  const auto nul = in.find('\0');
  if (nul == std::string_view::npos) return;
  const endpoint e{std::string(in.substr(0, nul)), std::string(in.substr(nul + 1))};
  std::string value;
  try {
    value = encode(e);
  } catch (const boost::system::system_error& refused) {
    FUZZ_CHECK(refused.code() == coetcd::error::invalid_argument);
    return;
  }
  // What encode writes decodes to the same address, and encodes back to itself.
  const auto back = decode(value);
  FUZZ_CHECK(back && back->addr == e.addr);
  FUZZ_CHECK(encode(*back) == value);
}

}  // namespace coetcd_fuzz

COETCD_FUZZ_ENTRY(naming)
