// Conversions between coetcd's plain types and etcd's protobuf messages (see convert.hpp).
#include "convert.hpp"

namespace coetcd {

std::string prefix_range_end(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    auto& c = reinterpret_cast<unsigned char&>(end.back());
    if (c < 0xff) {
      ++c;
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every byte was 0xff: the range runs to the end of the keyspace
}


namespace detail {
namespace pb = etcdserverpb;

response_header from_pb(const pb::ResponseHeader& h) {
  return {h.cluster_id(), h.member_id(), h.revision(), h.raft_term()};
}

key_value from_pb(const mvccpb::KeyValue& kv) {
  return {kv.key(), kv.value(), kv.create_revision(), kv.mod_revision(), kv.version(), kv.lease()};
}

get_result from_pb(const pb::RangeResponse& r) {
  get_result out;
  out.header = from_pb(r.header());
  out.kvs.reserve(r.kvs_size());
  for (const auto& kv : r.kvs()) out.kvs.push_back(from_pb(kv));
  out.more = r.more();
  out.count = r.count();
  return out;
}

put_result from_pb(const pb::PutResponse& r) {
  put_result out;
  out.header = from_pb(r.header());
  if (r.has_prev_kv()) out.prev_kv = from_pb(r.prev_kv());
  return out;
}

delete_result from_pb(const pb::DeleteRangeResponse& r) {
  delete_result out;
  out.header = from_pb(r.header());
  out.deleted = r.deleted();
  for (const auto& kv : r.prev_kvs()) out.prev_kvs.push_back(from_pb(kv));
  return out;
}

txn_result from_pb(const pb::TxnResponse& r) {
  txn_result out;
  out.header = from_pb(r.header());
  out.succeeded = r.succeeded();
  out.responses.reserve(r.responses_size());
  for (const auto& op : r.responses()) {
    switch (op.response_case()) {
      case pb::ResponseOp::kResponseRange: out.responses.push_back({from_pb(op.response_range())}); break;
      case pb::ResponseOp::kResponsePut: out.responses.push_back({from_pb(op.response_put())}); break;
      case pb::ResponseOp::kResponseDeleteRange:
        out.responses.push_back({from_pb(op.response_delete_range())});
        break;
      case pb::ResponseOp::kResponseTxn: out.responses.push_back({from_pb(op.response_txn())}); break;
      default: break;
    }
  }
  return out;
}

watch_event from_pb(const mvccpb::Event& e) {
  watch_event out;
  out.type = e.type() == mvccpb::Event::DELETE ? watch_event::kind::del : watch_event::kind::put;
  out.kv = from_pb(e.kv());
  if (e.has_prev_kv()) out.prev_kv = from_pb(e.prev_kv());
  return out;
}

namespace {

/// The key a request starts at: "\0" for every key (asks_every_key), else `key`.
template <class Options>
std::string start_of(const std::string& key, const Options& o) {
  return asks_every_key(key, o) ? std::string(1, '\0') : key;
}

/// `prefix` wins over `from_key`, which wins over an explicit range end.
template <class Options>
std::string range_end_of(const std::string& key, const Options& o, const std::string& range_end) {
  if (o.prefix) return prefix_range_end(key);
  if (o.from_key) return std::string(1, '\0');
  return range_end;
}

pb::RangeRequest_SortOrder sort_order_pb(sort_order o) {
  switch (o) {
    case sort_order::ascend: return pb::RangeRequest::ASCEND;
    case sort_order::descend: return pb::RangeRequest::DESCEND;
    default: return pb::RangeRequest::NONE;
  }
}

pb::RangeRequest_SortTarget sort_target_pb(sort_target t) {
  switch (t) {
    case sort_target::version: return pb::RangeRequest::VERSION;
    case sort_target::create_revision: return pb::RangeRequest::CREATE;
    case sort_target::mod_revision: return pb::RangeRequest::MOD;
    case sort_target::value: return pb::RangeRequest::VALUE;
    default: return pb::RangeRequest::KEY;
  }
}

pb::Compare compare_to_pb(const compare& c) {
  pb::Compare out;
  out.set_key(c.key());
  if (!c.range_end().empty()) out.set_range_end(c.range_end());
  switch (c.op()) {
    case compare_op::equal: out.set_result(pb::Compare::EQUAL); break;
    case compare_op::greater: out.set_result(pb::Compare::GREATER); break;
    case compare_op::less: out.set_result(pb::Compare::LESS); break;
    case compare_op::not_equal: out.set_result(pb::Compare::NOT_EQUAL); break;
  }
  const auto* num = std::get_if<std::int64_t>(&c.operand());
  const auto* str = std::get_if<std::string>(&c.operand());
  switch (c.what()) {
    case compare::target::version:
      out.set_target(pb::Compare::VERSION);
      out.set_version(num ? *num : 0);
      break;
    case compare::target::create_revision:
      out.set_target(pb::Compare::CREATE);
      out.set_create_revision(num ? *num : 0);
      break;
    case compare::target::mod_revision:
      out.set_target(pb::Compare::MOD);
      out.set_mod_revision(num ? *num : 0);
      break;
    case compare::target::lease:
      out.set_target(pb::Compare::LEASE);
      out.set_lease(num ? *num : 0);
      break;
    case compare::target::value:
      out.set_target(pb::Compare::VALUE);
      out.set_value(str ? *str : std::to_string(num ? *num : 0));
      break;
  }
  return out;
}

void add_ops(const std::vector<txn_op>& ops, google::protobuf::RepeatedPtrField<pb::RequestOp>* out) {
  for (const auto& op : ops) {
    auto* r = out->Add();
    std::visit(
        [&](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, txn_op::get_op>) *r->mutable_request_range() = to_pb(v.key, v.range_end, v.options);
          else if constexpr (std::is_same_v<T, txn_op::put_op>)
            *r->mutable_request_put() = to_pb(v.key, v.value, v.options);
          else if constexpr (std::is_same_v<T, txn_op::delete_op>)
            *r->mutable_request_delete_range() = to_pb(v.key, v.range_end, v.options);
          else
            *r->mutable_request_txn() = to_pb(*v);
        },
        op.value());
  }
}

bool ops_have_empty_key(const std::vector<txn_op>& ops) {
  for (const auto& op : ops) {
    bool empty = std::visit(
        [](const auto& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, std::shared_ptr<const txn>>) return has_empty_key(*v);
          else return v.key.empty();
        },
        op.value());
    if (empty) return true;
  }
  return false;
}

}  // namespace

pb::RangeRequest to_pb(const std::string& key, const std::string& range_end, const get_options& o) {
  pb::RangeRequest r;
  r.set_key(start_of(key, o));
  r.set_range_end(range_end_of(key, o, range_end));
  r.set_limit(o.limit);
  r.set_revision(o.revision);
  r.set_sort_order(sort_order_pb(o.order));
  r.set_sort_target(sort_target_pb(o.target));
  r.set_serializable(o.serializable);
  r.set_keys_only(o.keys_only);
  r.set_count_only(o.count_only);
  r.set_min_mod_revision(o.min_mod_revision);
  r.set_max_mod_revision(o.max_mod_revision);
  r.set_min_create_revision(o.min_create_revision);
  r.set_max_create_revision(o.max_create_revision);
  return r;
}

pb::PutRequest to_pb(const std::string& key, const std::string& value, const put_options& o) {
  pb::PutRequest r;
  r.set_key(key);
  r.set_value(value);
  r.set_lease(o.lease);
  r.set_prev_kv(o.prev_kv);
  r.set_ignore_value(o.ignore_value);
  r.set_ignore_lease(o.ignore_lease);
  return r;
}

pb::DeleteRangeRequest to_pb(const std::string& key, const std::string& range_end, const delete_options& o) {
  pb::DeleteRangeRequest r;
  r.set_key(start_of(key, o));
  r.set_range_end(range_end_of(key, o, range_end));
  r.set_prev_kv(o.prev_kv);
  return r;
}

pb::TxnRequest to_pb(const txn& t) {
  pb::TxnRequest r;
  for (const auto& c : t.compares()) *r.add_compare() = compare_to_pb(c);
  add_ops(t.success(), r.mutable_success());
  add_ops(t.failure(), r.mutable_failure());
  return r;
}

pb::WatchCreateRequest to_pb(const std::string& key, const std::string& range_end, const watch_options& o) {
  pb::WatchCreateRequest r;
  r.set_key(start_of(key, o));
  r.set_range_end(range_end_of(key, o, range_end));
  r.set_start_revision(o.start_revision);
  r.set_prev_kv(o.prev_kv);
  r.set_progress_notify(o.progress_notify);
  r.set_fragment(true);
  if (o.no_put) r.add_filters(pb::WatchCreateRequest::NOPUT);
  if (o.no_delete) r.add_filters(pb::WatchCreateRequest::NODELETE);
  return r;
}

bool has_empty_key(const txn& t) {
  for (const auto& c : t.compares())
    if (c.key().empty()) return true;
  return ops_have_empty_key(t.success()) || ops_have_empty_key(t.failure());
}

}  // namespace detail
}  // namespace coetcd
