// The Lease service's unary calls: grant, revoke, time to live (its keys without the key prefix), list.
#include "key_prefix.hpp"
#include "unary_rpc.hpp"
#include "convert.hpp"

namespace coetcd::detail {

void start_lease_grant(const std::shared_ptr<client_impl>& c, std::int64_t ttl, std::int64_t id,
                       handler<lease_grant_result> h) {
  if (!c) return fail_empty(std::move(h));  // a moved-from client
  if (ttl <= 0 || id < 0) return fail(c, std::move(h), error::invalid_argument);
  pb::LeaseGrantRequest req;
  req.set_ttl(ttl);
  req.set_id(id);
  start_user_unary<pb::LeaseGrantRequest, pb::LeaseGrantResponse, lease_grant_result>(
      c,
      [c](grpc::ClientContext* ctx, const pb::LeaseGrantRequest& r, grpc::CompletionQueue* q) {
        return c->lease_->PrepareAsyncLeaseGrant(ctx, r, q);
      },
      std::move(req), call_options{},
      [](pb::LeaseGrantResponse& r) { return lease_grant_result{from_pb(r.header()), r.id(), std::chrono::seconds(r.ttl())}; },
      std::move(h));
}

void start_lease_revoke(const std::shared_ptr<client_impl>& c, std::int64_t id, handler<response_header> h) {
  if (!c) return fail_empty(std::move(h));  // a moved-from client
  pb::LeaseRevokeRequest req;
  req.set_id(id);
  start_user_unary<pb::LeaseRevokeRequest, pb::LeaseRevokeResponse, response_header>(
      c,
      [c](grpc::ClientContext* ctx, const pb::LeaseRevokeRequest& r, grpc::CompletionQueue* q) {
        return c->lease_->PrepareAsyncLeaseRevoke(ctx, r, q);
      },
      std::move(req), call_options{}, [](pb::LeaseRevokeResponse& r) { return from_pb(r.header()); },
      std::move(h));
}

void start_lease_ttl(const std::shared_ptr<client_impl>& c, std::int64_t id, bool keys,
                     handler<lease_ttl_result> h) {
  if (!c) return fail_empty(std::move(h));  // a moved-from client
  pb::LeaseTimeToLiveRequest req;
  req.set_id(id);
  req.set_keys(keys);
  start_user_unary<pb::LeaseTimeToLiveRequest, pb::LeaseTimeToLiveResponse, lease_ttl_result>(
      c,
      [c](grpc::ClientContext* ctx, const pb::LeaseTimeToLiveRequest& r,
                               grpc::CompletionQueue* q) { return c->lease_->PrepareAsyncLeaseTimeToLive(ctx, r, q); },
      std::move(req), call_options{true},
      [c](pb::LeaseTimeToLiveResponse& r) {
        strip_prefix(r, c->key_prefix());
        lease_ttl_result out{from_pb(r.header()), r.id(), std::chrono::seconds(r.ttl()), std::chrono::seconds(r.grantedttl()), {}};
        for (const auto& k : r.keys()) out.keys.push_back(k);
        return out;
      },
      std::move(h));
}

void start_lease_list(const std::shared_ptr<client_impl>& c, handler<lease_list_result> h) {
  if (!c) return fail_empty(std::move(h));  // a moved-from client
  start_user_unary<pb::LeaseLeasesRequest, pb::LeaseLeasesResponse, lease_list_result>(
      c,
      [c](grpc::ClientContext* ctx, const pb::LeaseLeasesRequest& r, grpc::CompletionQueue* q) {
        return c->lease_->PrepareAsyncLeaseLeases(ctx, r, q);
      },
      pb::LeaseLeasesRequest{}, call_options{true},
      [](pb::LeaseLeasesResponse& r) {
        lease_list_result out{from_pb(r.header()), {}};
        for (const auto& l : r.leases()) out.ids.push_back(l.id());
        return out;
      },
      std::move(h));
}

}  // namespace coetcd::detail
