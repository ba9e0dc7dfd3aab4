// Plain value types for etcd's lease API.
#pragma once

#include <coetcd/kv.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace coetcd {

/// The answer to client::async_lease_grant.
struct lease_grant_result {
  response_header header;  ///< the response's header
  std::int64_t id = 0;     ///< the lease's ID
  std::chrono::seconds ttl{0};  ///< the TTL granted (the server raises TTLs below its minimum, 2 s on 3.4)
};

/// The answer to client::async_lease_time_to_live.
struct lease_ttl_result {
  response_header header;         ///< the response's header
  std::int64_t id = 0;            ///< the lease asked about
  std::chrono::seconds ttl{-1};         ///< the time left; -1 s when the lease does not exist
  std::chrono::seconds granted_ttl{0};  ///< the TTL the lease was granted with
  std::vector<std::string> keys;  ///< attached keys, when asked for
};

/// The answer to client::async_lease_leases.
struct lease_list_result {
  response_header header;         ///< the response's header
  std::vector<std::int64_t> ids;  ///< every lease's ID
};

}  // namespace coetcd
