// The Maintenance service's unary calls (status, alarms, defragment, hash, leader moves) and
// endpoint health. The snapshot stream is in snapshot.cpp.
#include "convert.hpp"
#include "coro.hpp"
#include "unary_rpc.hpp"

#include <coetcd/cluster.hpp>
#include <coetcd/maintenance.hpp>

namespace coetcd::detail {
namespace {

using steady = std::chrono::steady_clock;

/// Runs `then(channel)` on the strand with a connection to the member at `endpoint`, or fails
/// `h` with error::invalid_endpoint (or client_closed).
template <class Result, class Then>
void on_member(const std::shared_ptr<client_impl>& c, std::string endpoint, handler<Result> h, Then then) {
  asio::dispatch(c->strand_, [c, endpoint = std::move(endpoint), h = std::move(h), then = std::move(then)]() mutable {
    if (c->closed()) return fail(c, std::move(h), error::client_closed);
    std::shared_ptr<grpc::Channel> ch;
    try {
      ch = c->member_channel(endpoint);
    } catch (const boost::system::system_error& e) {
      return fail(c, std::move(h), e.code());
    }
    then(std::move(ch), std::move(endpoint), std::move(h));
  });
}

/// A Maintenance call to the member behind `ch`: `method` is the stub's PrepareAsync member.
template <class Req, class Resp, class Result, class Convert>
void start_maintenance_call(const std::shared_ptr<client_impl>& c, std::shared_ptr<grpc::Channel> ch,
                            reader_ptr<Resp> (pb::Maintenance::Stub::*method)(grpc::ClientContext*, const Req&,
                                                                             grpc::CompletionQueue*),
                            Req req, call_options o, Convert convert, handler<Result> h) {
  std::shared_ptr<pb::Maintenance::Stub> stub = pb::Maintenance::NewStub(ch);
  start_user_unary<Req, Resp, Result>(
      c,
      [stub, method](grpc::ClientContext* ctx, const Req& r, grpc::CompletionQueue* q) { return (stub.get()->*method)(ctx, r, q); },
      std::move(req), o, std::move(convert), std::move(h));
}

}  // namespace

void start_status(const std::shared_ptr<client_impl>& c, std::string endpoint, handler<endpoint_status> h) {
  on_member(c, std::move(endpoint), std::move(h),
            [c](std::shared_ptr<grpc::Channel> ch, std::string ep, handler<endpoint_status> h) {
              start_maintenance_call<pb::StatusRequest, pb::StatusResponse, endpoint_status>(
                  c, std::move(ch), &pb::Maintenance::Stub::PrepareAsyncStatus, pb::StatusRequest{},
                  call_options{.idempotent = true, .resend_when_silent = true},
                  [ep](pb::StatusResponse& r) {
                    endpoint_status s{ep, from_pb(r.header()), r.version(), r.dbsize(), r.dbsizeinuse(), r.leader(),
                                      r.raftindex(), r.raftterm(), r.raftappliedindex(), r.islearner(), {}};
                    for (const auto& e : r.errors()) s.errors.push_back(e);
                    return s;
                  },
                  std::move(h));
            });
}

void start_health(const std::shared_ptr<client_impl>& c, std::string endpoint, handler<endpoint_health> h) {
  on_member(c, std::move(endpoint), std::move(h),
            [c](std::shared_ptr<grpc::Channel> ch, std::string ep, handler<endpoint_health> h) {
              // etcdctl's question: a linearizable read of "health" (it needs the leader and a
              // quorum; "hasleader" makes a member without a leader refuse at once).
              pb::RangeRequest req;
              req.set_key("health");
              req.set_count_only(true);
              std::shared_ptr<pb::KV::Stub> stub = pb::KV::NewStub(ch);
              auto slot = asio::get_associated_cancellation_slot(h);
              auto done = [c, ep, started = steady::now(), h = std::move(h)](error_code ec, pb::RangeResponse&) mutable {
                const auto took = std::chrono::duration_cast<std::chrono::microseconds>(steady::now() - started);
                if (ec == error::client_closed || ec == asio::error::operation_aborted)
                  return c->complete(std::move(h), ec, endpoint_health{});
                // A user who may not read "health" was still answered by a member with a quorum.
                const bool healthy = !ec || ec == error::permission_denied;
                c->complete(std::move(h), error_code{}, endpoint_health{ep, healthy, took, healthy ? error_code{} : ec});
              };
              start_unary<pb::RangeRequest, pb::RangeResponse>(
                  c,
                  [stub](grpc::ClientContext* ctx, const pb::RangeRequest& r, grpc::CompletionQueue* q) {
                    return stub->PrepareAsyncRange(ctx, r, q);
                  },
                  std::move(req), call_options{}, std::move(done), slot);
            });
}

namespace {

void start_one_alarm(const std::shared_ptr<client_impl>& c, bool disarm, std::uint64_t member_id, alarm_type type,
                     handler<alarm_result> h) {
  const int t = static_cast<int>(type);
  pb::AlarmRequest req;
  req.set_action(disarm ? pb::AlarmRequest::DEACTIVATE : pb::AlarmRequest::GET);
  req.set_memberid(member_id);
  req.set_alarm(static_cast<pb::AlarmType>(t));
  // A disarm sent twice disarms the same alarms: safe to send again, as a list is.
  start_user_unary<pb::AlarmRequest, pb::AlarmResponse, alarm_result>(
      c,
      [stub = c->maintenance_.get()](grpc::ClientContext* ctx, const pb::AlarmRequest& r, grpc::CompletionQueue* q) {
        return stub->PrepareAsyncAlarm(ctx, r, q);
      },
      std::move(req), call_options{.idempotent = true},
      [](pb::AlarmResponse& r) {
        alarm_result out{from_pb(r.header()), {}};
        for (const auto& a : r.alarms()) out.alarms.push_back({a.memberid(), static_cast<alarm_type>(a.alarm())});
        return out;
      },
      std::move(h));
}

auto alarm_on(const std::shared_ptr<client_impl>& c, bool disarm, std::uint64_t member_id, alarm_type type) {
  auto init = [c](handler<alarm_result> h, bool d, std::uint64_t m, alarm_type t) {
    start_one_alarm(c, d, m, t, std::move(h));
  };
  return asio::async_initiate<decltype(as_result), void(error_code, alarm_result)>(init, as_result, disarm, member_id,
                                                                                    type);
}

/// Go's client disarms "every alarm" (member 0, NONE) one by one: etcd deactivates only the
/// alarm named, and none is named NONE.
asio::awaitable<std::tuple<error_code, alarm_result>> disarm_every_alarm(std::shared_ptr<client_impl> c) {
  auto [ec, raised] = co_await alarm_on(c, false, 0, alarm_type::none);
  if (ec) co_return std::tuple{ec, alarm_result{}};
  alarm_result disarmed{raised.header, {}};
  for (const auto& a : raised.alarms) {
    auto [dec, r] = co_await alarm_on(c, true, a.member_id, a.type);
    if (dec) co_return std::tuple{dec, alarm_result{}};
    disarmed.header = r.header;
    disarmed.alarms.insert(disarmed.alarms.end(), r.alarms.begin(), r.alarms.end());
  }
  co_return std::tuple{error_code{}, std::move(disarmed)};
}

}  // namespace

void start_alarm(const std::shared_ptr<client_impl>& c, bool disarm, std::uint64_t member_id, alarm_type type,
                 handler<alarm_result> h) {
  const int t = static_cast<int>(type);
  if (t < 0 || t > 2) return fail(c, std::move(h), error::invalid_argument);
  if (disarm && member_id == 0 && type == alarm_type::none) return spawn_result_op(c, disarm_every_alarm(c), std::move(h));
  start_one_alarm(c, disarm, member_id, type, std::move(h));
}

void start_defragment(const std::shared_ptr<client_impl>& c, std::string endpoint, handler<response_header> h) {
  on_member(c, std::move(endpoint), std::move(h),
            [c](std::shared_ptr<grpc::Channel> ch, std::string, handler<response_header> h) {
              start_maintenance_call<pb::DefragmentRequest, pb::DefragmentResponse, response_header>(
                  c, std::move(ch), &pb::Maintenance::Stub::PrepareAsyncDefragment, pb::DefragmentRequest{},
                  call_options{.idempotent = true}, [](pb::DefragmentResponse& r) { return from_pb(r.header()); },
                  std::move(h));
            });
}

void start_hash_kv(const std::shared_ptr<client_impl>& c, std::string endpoint, std::int64_t revision,
                   handler<hash_kv_result> h) {
  if (revision < 0) return fail(c, std::move(h), error::invalid_argument);
  on_member(c, std::move(endpoint), std::move(h),
            [c, revision](std::shared_ptr<grpc::Channel> ch, std::string, handler<hash_kv_result> h) {
              pb::HashKVRequest req;
              req.set_revision(revision);
              start_maintenance_call<pb::HashKVRequest, pb::HashKVResponse, hash_kv_result>(
                  c, std::move(ch), &pb::Maintenance::Stub::PrepareAsyncHashKV, std::move(req),
                  call_options{.idempotent = true},
                  [](pb::HashKVResponse& r) { return hash_kv_result{from_pb(r.header()), r.hash(), r.compact_revision()}; },
                  std::move(h));
            });
}

void start_move_leader(const std::shared_ptr<client_impl>& c, std::uint64_t target, handler<response_header> h) {
  if (target == 0) return fail(c, std::move(h), error::invalid_argument);
  // Only the leader moves its leadership: ask any member who leads, find the leader's client
  // URL in the member list, and send the request there.
  auto slot = asio::get_associated_cancellation_slot(h);
  auto with_members = [c, target, slot](pb::StatusResponse& status, handler<response_header> h) mutable {
    const auto leader = status.leader();
    auto found = [c, target, leader, slot](error_code ec, pb::MemberListResponse& list,
                                           handler<response_header> h) mutable {
      if (ec) return c->complete(std::move(h), ec, response_header{});
      std::string url;
      for (const auto& m : list.members())
        if (m.id() == leader && m.clienturls_size() > 0) url = m.clienturls(0);
      if (url.empty()) return c->complete(std::move(h), make_error_code(error::cluster_no_leader), response_header{});
      std::shared_ptr<grpc::Channel> ch;
      try {
        ch = c->member_channel(url);
      } catch (const boost::system::system_error& e) {
        return c->complete(std::move(h), e.code(), response_header{});
      }
      pb::MoveLeaderRequest req;
      req.set_targetid(target);
      std::shared_ptr<pb::Maintenance::Stub> stub = pb::Maintenance::NewStub(ch);
      start_unary<pb::MoveLeaderRequest, pb::MoveLeaderResponse>(
          c,
          [stub](grpc::ClientContext* ctx, const pb::MoveLeaderRequest& r, grpc::CompletionQueue* q) {
            return stub->PrepareAsyncMoveLeader(ctx, r, q);
          },
          std::move(req), call_options{},
          [c, h = std::move(h)](error_code ec, pb::MoveLeaderResponse& r) mutable {
            c->complete(std::move(h), ec, ec ? response_header{} : from_pb(r.header()));
          },
          slot);
    };
    start_unary<pb::MemberListRequest, pb::MemberListResponse>(
        c,
        [stub = c->cluster_.get()](grpc::ClientContext* ctx, const pb::MemberListRequest& r, grpc::CompletionQueue* q) {
          return stub->PrepareAsyncMemberList(ctx, r, q);
        },
        pb::MemberListRequest{}, call_options{.idempotent = true},
        [found = std::move(found), h = std::move(h)](error_code ec, pb::MemberListResponse& r) mutable {
          found(ec, r, std::move(h));
        },
        slot);
  };
  start_unary<pb::StatusRequest, pb::StatusResponse>(
      c,
      [stub = c->maintenance_.get()](grpc::ClientContext* ctx, const pb::StatusRequest& r, grpc::CompletionQueue* q) {
        return stub->PrepareAsyncStatus(ctx, r, q);
      },
      pb::StatusRequest{}, call_options{.idempotent = true},
      [c, with_members = std::move(with_members), h = std::move(h)](error_code ec, pb::StatusResponse& r) mutable {
        if (ec) return c->complete(std::move(h), ec, response_header{});
        if (r.leader() == 0) return c->complete(std::move(h), make_error_code(error::cluster_no_leader), response_header{});
        with_members(r, std::move(h));
      },
      slot);
}

}  // namespace coetcd::detail
