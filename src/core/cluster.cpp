// The Cluster service's calls: member list, add, remove, update and promote.
#include "convert.hpp"
#include "unary_rpc.hpp"

#include <coetcd/cluster.hpp>

namespace coetcd::detail {
namespace {

member from_pb(const pb::Member& m) {
  member out{m.id(), m.name(), {}, {}, m.islearner()};
  for (const auto& u : m.peerurls()) out.peer_urls.push_back(u);
  for (const auto& u : m.clienturls()) out.client_urls.push_back(u);
  return out;
}

template <class Resp>
member_list_result members_of(Resp& r) {
  member_list_result out{detail::from_pb(r.header()), {}};
  for (const auto& m : r.members()) out.members.push_back(from_pb(m));
  return out;
}

/// Peer URLs etcd accepts: at least one, each with its scheme and a host:port.
bool valid_peer_urls(const std::vector<std::string>& urls) {
  if (urls.empty()) return false;
  for (const auto& u : urls) {
    if (u.rfind("http://", 0) != 0 && u.rfind("https://", 0) != 0) return false;
    try {
      parse_endpoints({u});
    } catch (const std::exception&) {
      return false;
    }
  }
  return true;
}

/// A call of the Cluster stub: `method` is the stub's PrepareAsync member for Req.
template <class Req, class Resp, class Result, class Convert>
void start_cluster_call(const std::shared_ptr<client_impl>& c,
                        reader_ptr<Resp> (pb::Cluster::Stub::*method)(grpc::ClientContext*, const Req&, grpc::CompletionQueue*),
                        Req req, call_options o, Convert convert, handler<Result> h) {
  start_user_unary<Req, Resp, Result>(
      c,
      [c, method](grpc::ClientContext* ctx, const Req& r, grpc::CompletionQueue* q) {
        return (c->cluster_.get()->*method)(ctx, r, q);
      },
      std::move(req), o, std::move(convert), std::move(h));
}

}  // namespace

void start_member_list(const std::shared_ptr<client_impl>& c, handler<member_list_result> h) {
  if (!c) return fail_empty(std::move(h));  // made from a moved-from client
  start_cluster_call<pb::MemberListRequest, pb::MemberListResponse, member_list_result>(
      c, &pb::Cluster::Stub::PrepareAsyncMemberList, pb::MemberListRequest{}, call_options{.idempotent = true},
      [](pb::MemberListResponse& r) { return members_of(r); }, std::move(h));
}

void start_member_add(const std::shared_ptr<client_impl>& c, std::vector<std::string> urls, bool learner,
                      handler<member_add_result> h) {
  if (!c) return fail_empty(std::move(h));  // made from a moved-from client
  if (!valid_peer_urls(urls)) return fail(c, std::move(h), error::invalid_argument);
  pb::MemberAddRequest req;
  for (auto& u : urls) req.add_peerurls(std::move(u));
  req.set_islearner(learner);
  start_cluster_call<pb::MemberAddRequest, pb::MemberAddResponse, member_add_result>(
      c, &pb::Cluster::Stub::PrepareAsyncMemberAdd, std::move(req), call_options{},
      [](pb::MemberAddResponse& r) {
        auto all = members_of(r);
        return member_add_result{all.header, from_pb(r.member()), std::move(all.members)};
      },
      std::move(h));
}

void start_member_remove(const std::shared_ptr<client_impl>& c, std::uint64_t id, handler<member_list_result> h) {
  if (!c) return fail_empty(std::move(h));  // made from a moved-from client
  if (id == 0) return fail(c, std::move(h), error::invalid_argument);
  pb::MemberRemoveRequest req;
  req.set_id(id);
  start_cluster_call<pb::MemberRemoveRequest, pb::MemberRemoveResponse, member_list_result>(
      c, &pb::Cluster::Stub::PrepareAsyncMemberRemove, std::move(req), call_options{},
      [](pb::MemberRemoveResponse& r) { return members_of(r); }, std::move(h));
}

void start_member_update(const std::shared_ptr<client_impl>& c, std::uint64_t id, std::vector<std::string> urls,
                         handler<member_list_result> h) {
  if (!c) return fail_empty(std::move(h));  // made from a moved-from client
  if (id == 0 || !valid_peer_urls(urls)) return fail(c, std::move(h), error::invalid_argument);
  pb::MemberUpdateRequest req;
  req.set_id(id);
  for (auto& u : urls) req.add_peerurls(std::move(u));
  // The same URLs set twice are the same change: safe to send again.
  start_cluster_call<pb::MemberUpdateRequest, pb::MemberUpdateResponse, member_list_result>(
      c, &pb::Cluster::Stub::PrepareAsyncMemberUpdate, std::move(req), call_options{.idempotent = true},
      [](pb::MemberUpdateResponse& r) { return members_of(r); }, std::move(h));
}

void start_member_promote(const std::shared_ptr<client_impl>& c, std::uint64_t id, handler<member_list_result> h) {
  if (!c) return fail_empty(std::move(h));  // made from a moved-from client
  if (id == 0) return fail(c, std::move(h), error::invalid_argument);
  pb::MemberPromoteRequest req;
  req.set_id(id);
  start_cluster_call<pb::MemberPromoteRequest, pb::MemberPromoteResponse, member_list_result>(
      c, &pb::Cluster::Stub::PrepareAsyncMemberPromote, std::move(req), call_options{},
      [](pb::MemberPromoteResponse& r) { return members_of(r); }, std::move(h));
}

}  // namespace coetcd::detail

namespace coetcd {

cluster::executor_type cluster::get_executor() const noexcept { return impl_ ? impl_->io_ex_ : executor_type(); }

}  // namespace coetcd
