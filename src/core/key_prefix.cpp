// A client's key namespace: the prefix on every key of a request, off every key of a response.
#include "key_prefix.hpp"

#include <coetcd/kv.hpp>

#include <string>

namespace coetcd::detail {
namespace pb = etcdserverpb;
namespace {

std::string with(std::string_view ns, const std::string& key) {
  std::string out;
  out.reserve(ns.size() + key.size());
  out.append(ns).append(key);
  return out;
}

/// Go's prefixInterval: no end stays none; "\0" (to the end of the keyspace) becomes the end of
/// the namespace; any other end is prefixed as the key is.
template <class Msg>
void prefix_range(Msg& r, std::string_view ns) {
  r.set_key(with(ns, r.key()));
  if (r.range_end() == std::string(1, '\0')) r.set_range_end(prefix_range_end(ns));
  else if (!r.range_end().empty()) r.set_range_end(with(ns, r.range_end()));
}

void strip(mvccpb::KeyValue& kv, std::string_view ns) {
  if (kv.key().size() >= ns.size() && kv.key().compare(0, ns.size(), ns.data(), ns.size()) == 0)
    kv.mutable_key()->erase(0, ns.size());
}

void add_prefix_ops(google::protobuf::RepeatedPtrField<pb::RequestOp>& ops, std::string_view ns) {
  for (auto& op : ops) {
    switch (op.request_case()) {
      case pb::RequestOp::kRequestRange: prefix_range(*op.mutable_request_range(), ns); break;
      case pb::RequestOp::kRequestPut: op.mutable_request_put()->set_key(with(ns, op.request_put().key())); break;
      case pb::RequestOp::kRequestDeleteRange: prefix_range(*op.mutable_request_delete_range(), ns); break;
      case pb::RequestOp::kRequestTxn: add_prefix(*op.mutable_request_txn(), ns); break;
      default: break;
    }
  }
}

}  // namespace

void add_prefix(pb::RangeRequest& r, std::string_view ns) {
  if (!ns.empty()) prefix_range(r, ns);
}
void add_prefix(pb::PutRequest& r, std::string_view ns) {
  if (!ns.empty()) r.set_key(with(ns, r.key()));
}
void add_prefix(pb::DeleteRangeRequest& r, std::string_view ns) {
  if (!ns.empty()) prefix_range(r, ns);
}
void add_prefix(pb::WatchCreateRequest& r, std::string_view ns) {
  if (!ns.empty()) prefix_range(r, ns);
}
void add_prefix(pb::TxnRequest& r, std::string_view ns) {
  if (ns.empty()) return;
  for (auto& c : *r.mutable_compare()) prefix_range(c, ns);
  add_prefix_ops(*r.mutable_success(), ns);
  add_prefix_ops(*r.mutable_failure(), ns);
}

void strip_prefix(pb::RangeResponse& r, std::string_view ns) {
  if (ns.empty()) return;
  for (auto& kv : *r.mutable_kvs()) strip(kv, ns);
}
void strip_prefix(pb::PutResponse& r, std::string_view ns) {
  if (!ns.empty() && r.has_prev_kv()) strip(*r.mutable_prev_kv(), ns);
}
void strip_prefix(pb::DeleteRangeResponse& r, std::string_view ns) {
  if (ns.empty()) return;
  for (auto& kv : *r.mutable_prev_kvs()) strip(kv, ns);
}
void strip_prefix(pb::TxnResponse& r, std::string_view ns) {
  if (ns.empty()) return;
  for (auto& op : *r.mutable_responses()) {
    switch (op.response_case()) {
      case pb::ResponseOp::kResponseRange: strip_prefix(*op.mutable_response_range(), ns); break;
      case pb::ResponseOp::kResponsePut: strip_prefix(*op.mutable_response_put(), ns); break;
      case pb::ResponseOp::kResponseDeleteRange: strip_prefix(*op.mutable_response_delete_range(), ns); break;
      case pb::ResponseOp::kResponseTxn: strip_prefix(*op.mutable_response_txn(), ns); break;
      default: break;
    }
  }
}
void strip_prefix(mvccpb::Event& e, std::string_view ns) {
  if (ns.empty()) return;
  strip(*e.mutable_kv(), ns);
  if (e.has_prev_kv()) strip(*e.mutable_prev_kv(), ns);
}
void strip_prefix(pb::LeaseTimeToLiveResponse& r, std::string_view ns) {
  if (ns.empty()) return;
  // A lease's keys outside the namespace are dropped, as Go's namespace.NewLease drops them:
  // kept as they are, "other/secret" would read as this namespace's own "other/secret".
  auto& keys = *r.mutable_keys();
  int kept = 0;
  for (int i = 0; i < keys.size(); ++i) {
    auto& k = *keys.Mutable(i);
    if (k.size() < ns.size() || k.compare(0, ns.size(), ns.data(), ns.size()) != 0) continue;
    k.erase(0, ns.size());
    if (kept != i) keys.Mutable(kept)->swap(k);
    ++kept;
  }
  keys.DeleteSubrange(kept, keys.size() - kept);
}

}  // namespace coetcd::detail
