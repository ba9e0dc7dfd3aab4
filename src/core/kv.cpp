// The KV service's calls: get, put, delete, txn and compact, under the client's key prefix.
#include "kv.hpp"
#include "convert.hpp"
#include "key_prefix.hpp"

namespace coetcd::detail {

void start_get(const std::shared_ptr<client_impl>& c, std::string key, std::string end, get_options o,
               handler<get_result> h) {
  if (!c) return fail_empty(std::move(h));  // a moved-from client
  if (key.empty() && !asks_every_key(key, o)) return fail(c, std::move(h), error::empty_key);
  start_user_unary<pb::RangeRequest, pb::RangeResponse, get_result>(
      c,
      [c](grpc::ClientContext* ctx, const pb::RangeRequest& r, grpc::CompletionQueue* q) {
        return c->kv_->PrepareAsyncRange(ctx, r, q);
      },
      prefixed(to_pb(key, end, o), c->key_prefix()), call_options{.idempotent = true, .resend_when_silent = true},
      [c](pb::RangeResponse& r) { return from_pb(stripped(r, c->key_prefix())); }, std::move(h));
}

void start_put(const std::shared_ptr<client_impl>& c, std::string key, std::string value, put_options o,
               handler<put_result> h) {
  if (!c) return fail_empty(std::move(h));  // a moved-from client
  if (key.empty()) return fail(c, std::move(h), error::empty_key);
  start_user_unary<pb::PutRequest, pb::PutResponse, put_result>(
      c,
      [c](grpc::ClientContext* ctx, const pb::PutRequest& r, grpc::CompletionQueue* q) {
        return c->kv_->PrepareAsyncPut(ctx, r, q);
      },
      prefixed(to_pb(key, value, o), c->key_prefix()), call_options{},
      [c](pb::PutResponse& r) { return from_pb(stripped(r, c->key_prefix())); }, std::move(h));
}

void start_delete(const std::shared_ptr<client_impl>& c, std::string key, std::string end, delete_options o,
                  handler<delete_result> h) {
  start_delete(c, std::move(key), std::move(end), o, std::move(h), call_options{});
}

void start_delete(const std::shared_ptr<client_impl>& c, std::string key, std::string end, delete_options o,
                  handler<delete_result> h, call_options co) {
  if (!c) return fail_empty(std::move(h));  // a moved-from client
  // Every key of a namespace, yes; of the whole cluster, no: one empty variable would wipe it
  // (from_key on "\0" says so on purpose).
  if (key.empty() && !(asks_every_key(key, o) && !c->key_prefix().empty()))
    return fail(c, std::move(h), error::empty_key);
  start_user_unary<pb::DeleteRangeRequest, pb::DeleteRangeResponse, delete_result>(
      c,
      [c](grpc::ClientContext* ctx, const pb::DeleteRangeRequest& r, grpc::CompletionQueue* q) {
        return c->kv_->PrepareAsyncDeleteRange(ctx, r, q);
      },
      prefixed(to_pb(key, end, o), c->key_prefix()), std::move(co),
      [c](pb::DeleteRangeResponse& r) { return from_pb(stripped(r, c->key_prefix())); }, std::move(h));
}

void start_txn(const std::shared_ptr<client_impl>& c, txn t, handler<txn_result> h) {
  start_txn(c, std::move(t), std::move(h), call_options{});
}

void start_txn(const std::shared_ptr<client_impl>& c, txn t, handler<txn_result> h, call_options o) {
  if (!c) return fail_empty(std::move(h));  // a moved-from client
  if (has_empty_key(t)) return fail(c, std::move(h), error::empty_key);
  auto req = prefixed(to_pb(t), c->key_prefix());
  // etcd serves a txn with no operations as a serializable read (isTxnSerializable is true for
  // empty branches, 3.4 and 3.5): from the member's applied state, which may not hold a write
  // already acknowledged to this client, so `txn().when(hold.fence())` alone could fail just
  // after the hold began. A linearizable count of the first compared key makes it a
  // linearizable read; its answer is dropped.
  const bool padded = req.success_size() == 0 && req.failure_size() == 0 && req.compare_size() > 0;
  if (padded) {
    auto* count = req.add_success()->mutable_request_range();
    count->set_key(req.compare(0).key());
    count->set_count_only(true);
  }
  start_user_unary<pb::TxnRequest, pb::TxnResponse, txn_result>(
      c,
      [c](grpc::ClientContext* ctx, const pb::TxnRequest& r, grpc::CompletionQueue* q) {
        return c->kv_->PrepareAsyncTxn(ctx, r, q);
      },
      std::move(req), o,
      [c, padded](pb::TxnResponse& r) {
        if (padded) r.clear_responses();
        return from_pb(stripped(r, c->key_prefix()));
      },
      std::move(h));
}

void start_compact(const std::shared_ptr<client_impl>& c, std::int64_t revision, bool physical,
                   handler<response_header> h) {
  if (!c) return fail_empty(std::move(h));  // a moved-from client
  if (revision <= 0) return fail(c, std::move(h), error::invalid_argument);
  pb::CompactionRequest req;
  req.set_revision(revision);
  req.set_physical(physical);
  start_user_unary<pb::CompactionRequest, pb::CompactionResponse, response_header>(
      c,
      [c](grpc::ClientContext* ctx, const pb::CompactionRequest& r, grpc::CompletionQueue* q) {
        return c->kv_->PrepareAsyncCompact(ctx, r, q);
      },
      std::move(req), call_options{}, [](pb::CompactionResponse& r) { return from_pb(r.header()); }, std::move(h));
}

}  // namespace coetcd::detail
