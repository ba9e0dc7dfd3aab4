// A client's key namespace (client_options::key_prefix, Go's namespace package): the prefix put
// on every key a request names and taken off every key a response carries.
#pragma once

#include "etcd/etcdserver/etcdserverpb/rpc.pb.h"

#include <string_view>

namespace coetcd::detail {

// Requests: keys get the prefix; a range end too, except "\0" (every key from the start key on),
// which becomes the end of the namespace, so no range reaches past it. No-ops for an empty prefix.
void add_prefix(etcdserverpb::RangeRequest& r, std::string_view ns);
void add_prefix(etcdserverpb::PutRequest& r, std::string_view ns);
void add_prefix(etcdserverpb::DeleteRangeRequest& r, std::string_view ns);
void add_prefix(etcdserverpb::TxnRequest& r, std::string_view ns);
void add_prefix(etcdserverpb::WatchCreateRequest& r, std::string_view ns);

// Responses: every key loses the prefix; a lease's keys outside the namespace are dropped.
void strip_prefix(etcdserverpb::RangeResponse& r, std::string_view ns);
void strip_prefix(etcdserverpb::PutResponse& r, std::string_view ns);
void strip_prefix(etcdserverpb::DeleteRangeResponse& r, std::string_view ns);
void strip_prefix(etcdserverpb::TxnResponse& r, std::string_view ns);
void strip_prefix(mvccpb::Event& e, std::string_view ns);
void strip_prefix(etcdserverpb::LeaseTimeToLiveResponse& r, std::string_view ns);

/// `m` with the prefix added, for a request built in one expression.
template <class Msg>
Msg prefixed(Msg m, std::string_view ns) {
  add_prefix(m, ns);
  return m;
}

/// `m` with the prefix taken off, for a response converted in one expression.
template <class Msg>
Msg& stripped(Msg& m, std::string_view ns) {
  strip_prefix(m, ns);
  return m;
}

}  // namespace coetcd::detail
