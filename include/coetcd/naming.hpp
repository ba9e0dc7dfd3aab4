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
  std::string addr;                ///< the address clients dial ("host:port"); empty if the value had none
  std::string metadata = "null";   ///< any JSON value, as text (Go's `interface{}`)
  /// Equal address and metadata text.
  friend bool operator==(const endpoint&, const endpoint&) = default;
};

/// The key of endpoint `id` of service `target`: `target + "/" + id`.
std::string key(std::string_view target, std::string_view id);

/// The value Go writes for an added endpoint. Throws boost::system::system_error with
/// error::invalid_argument when `e.metadata` is not one JSON value as Go's encoding/json reads
/// it (so never text Go would skip, such as `01`, `-` or `1.`), an empty one meaning `null`.
std::string encode(const endpoint& e);

/// The endpoint a value holds, read as Go's endpoints Manager reads it (json.Unmarshal into
/// `{Op uint8; Addr string; Metadata interface{}}`): member names match ignoring ASCII case
/// (`"addr"` is Addr), the last of a repeated member wins, a missing or null Addr is an empty
/// address, `Op` is not looked at beyond being null or an integer 0 to 255 (the Manager takes
/// every put as an add), other members are ignored, and the value `null` is an empty endpoint.
/// Nothing for a value Go skips: not JSON (or nested deeper than 10000), not an object, an Addr
/// that is not a string, an Op that is not a uint8.
std::optional<endpoint> decode(std::string_view value);

/// Every endpoint in a cache of `target + "/"`, by key; values that do not decode are left out.
/// Call it where the cache's accessors may be called (its executor).
std::map<std::string, endpoint> endpoints(const cache& c);

}  // namespace coetcd::naming
