// The KV service's calls with call options, for the core and the recipes (the user's calls
// are declared in <coetcd/client.hpp>).
#pragma once

#include "unary_rpc.hpp"

namespace coetcd::detail {

/// A txn or delete with call options: `idempotent` for those whose effect is the same sent twice.
void start_txn(const std::shared_ptr<client_impl>& c, txn t, handler<txn_result> h, call_options o);
void start_delete(const std::shared_ptr<client_impl>& c, std::string key, std::string end, delete_options o,
                  handler<delete_result> h, call_options co);

}  // namespace coetcd::detail
