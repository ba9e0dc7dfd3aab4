// Plain value types for etcd's lease API.
#pragma once

#include <coetcd/kv.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace coetcd {

struct lease_grant_result {
  response_header header;
  std::int64_t id = 0;
  std::int64_t ttl = 0;  ///< seconds granted (the server raises TTLs below its minimum, 2 s on 3.4)
};

struct lease_ttl_result {
  response_header header;
  std::int64_t id = 0;
  std::int64_t ttl = -1;          ///< remaining seconds; -1 when the lease does not exist
  std::int64_t granted_ttl = 0;   ///< TTL the lease was granted with
  std::vector<std::string> keys;  ///< attached keys, when asked for
};

struct lease_list_result {
  response_header header;
  std::vector<std::int64_t> ids;
};

}  // namespace coetcd
