// SHA-256 (FIPS 180-4), to check the hash etcd appends to a snapshot without a crypto library.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace coetcd::detail {

class sha256 {
 public:
  sha256();
  void update(std::string_view data);
  /// The digest of everything updated so far; the object is spent afterwards.
  std::array<unsigned char, 32> finish();

 private:
  void block(const unsigned char* p);
  std::array<std::uint32_t, 8> h_;
  std::array<unsigned char, 64> buf_{};
  std::size_t buffered_ = 0;
  std::uint64_t length_ = 0;  // bytes
};

}  // namespace coetcd::detail
