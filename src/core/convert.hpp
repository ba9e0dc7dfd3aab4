// Conversions between coetcd's plain types and etcd's protobuf messages.
#pragma once

#include "etcd/etcdserver/etcdserverpb/rpc.pb.h"

#include <coetcd/kv.hpp>
#include <coetcd/txn.hpp>
#include <coetcd/watch.hpp>

namespace coetcd::detail {

response_header from_pb(const etcdserverpb::ResponseHeader& h);
key_value from_pb(const mvccpb::KeyValue& kv);
get_result from_pb(const etcdserverpb::RangeResponse& r);
put_result from_pb(const etcdserverpb::PutResponse& r);
delete_result from_pb(const etcdserverpb::DeleteRangeResponse& r);
txn_result from_pb(const etcdserverpb::TxnResponse& r);
watch_event from_pb(const mvccpb::Event& e);

etcdserverpb::RangeRequest to_pb(const std::string& key, const std::string& range_end, const get_options& o);
etcdserverpb::PutRequest to_pb(const std::string& key, const std::string& value, const put_options& o);
etcdserverpb::DeleteRangeRequest to_pb(const std::string& key, const std::string& range_end,
                                        const delete_options& o);
etcdserverpb::TxnRequest to_pb(const txn& t);
etcdserverpb::WatchCreateRequest to_pb(const std::string& key, const std::string& range_end,
                                        const watch_options& o);

/// Empty keys anywhere in a txn (etcd rejects them); true if one is found.
bool has_empty_key(const txn& t);

/// An empty key with `prefix` or `from_key` (get, delete, watch): every key of the client's
/// namespace, or with none every key, as Go's clientv3 and namespace read it. to_pb sends its
/// key as "\0" (etcd refuses an empty key), which a namespace then puts under its prefix.
template <class Options>
bool asks_every_key(std::string_view key, const Options& o) {
  return key.empty() && (o.prefix || o.from_key);
}

}  // namespace coetcd::detail
