// coetcd::naming: service endpoints laid out as Go's clientv3/naming/endpoints, and read from a cache.
#pragma once

#include <coetcd/cache.hpp>

#include <map>
#include <optional>
#include <string>
#include <string_view>

/// Service discovery records that Go's `naming/endpoints` Manager (and gRPC-Go's etcd resolver)
/// read and write: the key `target + "/" + id`, the value Go's JSON
/// `{"Op":0,"Addr":"host:port","Metadata":null}`. Keep one in etcd with a coetcd::registration;
/// read them all with a coetcd::cache of `target + "/"` and naming::endpoints.
namespace coetcd::naming {

/// One endpoint of a service.
struct endpoint {
  std::string addr;                ///< the address clients dial ("host:port")
  std::string metadata = "null";   ///< any JSON value, as text (Go's `interface{}`)
  /// Equal address and metadata text.
  friend bool operator==(const endpoint&, const endpoint&) = default;
};

/// The key of endpoint `id` of service `target`: `target + "/" + id`.
std::string key(std::string_view target, std::string_view id);

/// The value Go writes for an added endpoint. Throws boost::system::system_error with
/// error::invalid_argument when `e.metadata` is not one JSON value.
std::string encode(const endpoint& e);

/// The endpoint a value holds; nothing for a value Go would skip too (not a JSON object, no
/// string "Addr", or an "Op" other than 0).
std::optional<endpoint> decode(std::string_view value);

/// Every endpoint in a cache of `target + "/"`, by key; values that do not decode are left out.
/// Call it where the cache's accessors may be called (its executor).
std::map<std::string, endpoint> endpoints(const cache& c);

}  // namespace coetcd::naming
