// How async_lock_status reads a name's keys once they are fetched: apart from the reads, so the
// fuzz target and the tests can feed it keys any program wrote. Not API.
#pragma once

#include <coetcd/lease.hpp>
#include <coetcd/lock_status.hpp>

#include <map>
#include <string>
#include <vector>

namespace coetcd::detail {

/// The status of lock or election `name` from every key under `name + "/"` (in any order; each
/// starts with that prefix) read at `revision`, and the TTLs of their leases (a lease missing
/// from `ttls` leaves an entry's ttl and granted_ttl 0).
lock_status queue_status(std::string name, std::int64_t revision, std::vector<key_value> kvs,
                         const std::map<std::int64_t, lease_ttl_result>& ttls);

}  // namespace coetcd::detail
