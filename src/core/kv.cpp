#include "kv.hpp"
#include "convert.hpp"

namespace coetcd::detail {

void start_get(const std::shared_ptr<client_impl>& c, std::string key, std::string end, get_options o,
               handler<get_result> h) {
  if (key.empty()) return fail(c, std::move(h), error::empty_key);
  start_user_unary<pb::RangeRequest, pb::RangeResponse, get_result>(
      c,
      [stub = c->kv_.get()](grpc::ClientContext* ctx, const pb::RangeRequest& r, grpc::CompletionQueue* q) {
        return stub->PrepareAsyncRange(ctx, r, q);
      },
      to_pb(key, end, o), call_options{.idempotent = true, .resend_when_silent = true},
      [](pb::RangeResponse& r) { return from_pb(r); }, std::move(h));
}

void start_put(const std::shared_ptr<client_impl>& c, std::string key, std::string value, put_options o,
               handler<put_result> h) {
  if (key.empty()) return fail(c, std::move(h), error::empty_key);
  start_user_unary<pb::PutRequest, pb::PutResponse, put_result>(
      c,
      [stub = c->kv_.get()](grpc::ClientContext* ctx, const pb::PutRequest& r, grpc::CompletionQueue* q) {
        return stub->PrepareAsyncPut(ctx, r, q);
      },
      to_pb(key, value, o), call_options{}, [](pb::PutResponse& r) { return from_pb(r); }, std::move(h));
}

void start_delete(const std::shared_ptr<client_impl>& c, std::string key, std::string end, delete_options o,
                  handler<delete_result> h) {
  start_delete(c, std::move(key), std::move(end), o, std::move(h), call_options{});
}

void start_delete(const std::shared_ptr<client_impl>& c, std::string key, std::string end, delete_options o,
                  handler<delete_result> h, call_options co) {
  if (key.empty()) return fail(c, std::move(h), error::empty_key);
  start_user_unary<pb::DeleteRangeRequest, pb::DeleteRangeResponse, delete_result>(
      c,
      [stub = c->kv_.get()](grpc::ClientContext* ctx, const pb::DeleteRangeRequest& r, grpc::CompletionQueue* q) {
        return stub->PrepareAsyncDeleteRange(ctx, r, q);
      },
      to_pb(key, end, o), std::move(co), [](pb::DeleteRangeResponse& r) { return from_pb(r); }, std::move(h));
}

void start_txn(const std::shared_ptr<client_impl>& c, txn t, handler<txn_result> h) {
  start_txn(c, std::move(t), std::move(h), call_options{});
}

void start_txn(const std::shared_ptr<client_impl>& c, txn t, handler<txn_result> h, call_options o) {
  if (has_empty_key(t)) return fail(c, std::move(h), error::empty_key);
  start_user_unary<pb::TxnRequest, pb::TxnResponse, txn_result>(
      c,
      [stub = c->kv_.get()](grpc::ClientContext* ctx, const pb::TxnRequest& r, grpc::CompletionQueue* q) {
        return stub->PrepareAsyncTxn(ctx, r, q);
      },
      to_pb(t), o, [](pb::TxnResponse& r) { return from_pb(r); }, std::move(h));
}

void start_compact(const std::shared_ptr<client_impl>& c, std::int64_t revision, bool physical,
                   handler<response_header> h) {
  if (revision <= 0) return fail(c, std::move(h), error::invalid_argument);
  pb::CompactionRequest req;
  req.set_revision(revision);
  req.set_physical(physical);
  start_user_unary<pb::CompactionRequest, pb::CompactionResponse, response_header>(
      c,
      [stub = c->kv_.get()](grpc::ClientContext* ctx, const pb::CompactionRequest& r, grpc::CompletionQueue* q) {
        return stub->PrepareAsyncCompact(ctx, r, q);
      },
      std::move(req), call_options{}, [](pb::CompactionResponse& r) { return from_pb(r.header()); }, std::move(h));
}

}  // namespace coetcd::detail
