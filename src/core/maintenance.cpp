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

/// Runs `then(channel, endpoint, h)` at once with a connection to the member at `endpoint`
/// (so the call takes its cancellation slot in the initiating function), or fails `h` with
/// error::invalid_endpoint.
template <class Result, class Then>
void on_member(const std::shared_ptr<client_impl>& c, std::string endpoint, handler<Result> h, Then then) {
  std::shared_ptr<grpc::Channel> ch;
  try {
    ch = c->member_channel(endpoint);
  } catch (const boost::system::system_error& e) {
    return fail(c, std::move(h), e.code());
  }
  then(std::move(ch), std::move(endpoint), std::move(h));
}

/// One unary call as an awaitable giving (error_code, Resp), for the operations of several steps.
/// (Arguments by reference: a coroutine names them first, as g++ 12 mishandles non-trivial
/// temporaries inside a co_await expression.)
template <class Req, class Resp>
auto call_on(const std::shared_ptr<client_impl>& c,
             const std::function<reader_ptr<Resp>(grpc::ClientContext*, const Req&, grpc::CompletionQueue*)>& prepare,
             const Req& req, const call_options& o) {
  auto init = [c, prepare, o](handler<Resp> h, Req r) mutable {
    start_user_unary<Req, Resp, Resp>(c, std::move(prepare), std::move(r), o, [](Resp& resp) { return std::move(resp); },
                                      std::move(h));
  };
  return asio::async_initiate<decltype(as_result), void(error_code, Resp)>(std::move(init), as_result, req);
}

/// A Maintenance call to the member behind `ch`: `method` is the stub's PrepareAsync member.
template <class Req, class Resp, class Result, class Convert>
void start_maintenance_call(const std::shared_ptr<client_impl>& c, std::shared_ptr<grpc::Channel> ch,
                            reader_ptr<Resp> (pb::Maintenance::Stub::*method)(grpc::ClientContext*, const Req&,
                                                                             grpc::CompletionQueue*),
                            Req req, call_options o, Convert convert, handler<Result> h) {
  std::shared_ptr<pb::Maintenance::Stub> stub = pb::Maintenance::NewStub(ch);
  o.channel = std::move(ch);
  start_user_unary<Req, Resp, Result>(
      c,
      [stub, method](grpc::ClientContext* ctx, const Req& r, grpc::CompletionQueue* q) { return (stub.get()->*method)(ctx, r, q); },
      std::move(req), o, std::move(convert), std::move(h));
}

}  // namespace

void start_status(const std::shared_ptr<client_impl>& c, std::string endpoint, handler<endpoint_status> h) {
  if (!c) return fail_empty(std::move(h));  // made from a moved-from client
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

namespace {

/// etcdctl's question (3.5's): a linearizable read of "health", which needs the leader and a
/// quorum ("hasleader" makes a member without a leader refuse at once), then no alarm raised.
asio::awaitable<std::tuple<error_code, endpoint_health>> ask_health(std::shared_ptr<client_impl> c,
                                                                    std::shared_ptr<grpc::Channel> ch, std::string ep) {
  co_await asio::this_coro::reset_cancellation_state(asio::enable_total_cancellation());
  std::shared_ptr<pb::KV::Stub> kv = pb::KV::NewStub(ch);
  std::shared_ptr<pb::Maintenance::Stub> m = pb::Maintenance::NewStub(ch);
  pb::RangeRequest read;
  read.set_key("health");
  read.set_count_only(true);
  // (callables named before the co_await: g++ 12 destroys a by-value capture of a lambda
  // written inside a co_await expression twice)
  std::function<reader_ptr<pb::RangeResponse>(grpc::ClientContext*, const pb::RangeRequest&, grpc::CompletionQueue*)>
      range = [kv](grpc::ClientContext* ctx, const pb::RangeRequest& q, grpc::CompletionQueue* cq) {
        return kv->PrepareAsyncRange(ctx, q, cq);
      };
  std::function<reader_ptr<pb::AlarmResponse>(grpc::ClientContext*, const pb::AlarmRequest&, grpc::CompletionQueue*)>
      alarm_list = [m](grpc::ClientContext* ctx, const pb::AlarmRequest& q, grpc::CompletionQueue* cq) {
        return m->PrepareAsyncAlarm(ctx, q, cq);
      };
  const auto started = steady::now();
  const call_options once{.channel = ch}, again{.idempotent = true, .channel = ch};
  auto [ec, r] = co_await call_on<pb::RangeRequest, pb::RangeResponse>(c, range, read, once);
  endpoint_health h{ep, false, std::chrono::duration_cast<std::chrono::microseconds>(steady::now() - started), {}, {}};
  if (ec == error::client_closed || ec == asio::error::operation_aborted) co_return std::tuple{ec, endpoint_health{}};
  // A user who may not read "health" was still answered by a member with a quorum.
  if (ec && ec != error::permission_denied) {
    h.error = ec;
    co_return std::tuple{error_code{}, std::move(h)};
  }
  pb::AlarmRequest list;
  list.set_action(pb::AlarmRequest::GET);
  auto [aec, alarms] = co_await call_on<pb::AlarmRequest, pb::AlarmResponse>(c, alarm_list, list, again);
  if (aec == error::client_closed || aec == asio::error::operation_aborted) co_return std::tuple{aec, endpoint_health{}};
  for (const auto& a : alarms.alarms()) h.alarms.push_back({a.memberid(), static_cast<alarm_type>(a.alarm())});
  if (aec) h.error = aec;
  else if (!h.alarms.empty()) h.error = error::alarm_raised;
  h.healthy = !h.error;
  co_return std::tuple{error_code{}, std::move(h)};
}

}  // namespace

void start_health(const std::shared_ptr<client_impl>& c, std::string endpoint, handler<endpoint_health> h) {
  if (!c) return fail_empty(std::move(h));  // made from a moved-from client
  on_member(c, std::move(endpoint), std::move(h),
            [c](std::shared_ptr<grpc::Channel> ch, std::string ep, handler<endpoint_health> h) {
              spawn_result_op(c, ask_health(c, std::move(ch), std::move(ep)), std::move(h));
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
      [c](grpc::ClientContext* ctx, const pb::AlarmRequest& r, grpc::CompletionQueue* q) {
        return c->maintenance_->PrepareAsyncAlarm(ctx, r, q);
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
  co_await asio::this_coro::reset_cancellation_state(asio::enable_partial_cancellation());
  auto [ec, raised] = co_await alarm_on(c, false, 0, alarm_type::none);
  if (ec) co_return std::tuple{ec, alarm_result{}};
  alarm_result disarmed{raised.header, {}};
  error_code failed;
  for (const auto& a : raised.alarms) {
    auto [dec, r] = co_await alarm_on(c, true, a.member_id, a.type);
    if (dec) {
      failed = dec;
      break;  // (no co_return inside a loop with live locals: g++ 12)
    }
    disarmed.header = r.header;
    disarmed.alarms.insert(disarmed.alarms.end(), r.alarms.begin(), r.alarms.end());
  }
  if (failed) co_return std::tuple{failed, alarm_result{}};
  co_return std::tuple{error_code{}, std::move(disarmed)};
}

}  // namespace

void start_alarm(const std::shared_ptr<client_impl>& c, bool disarm, std::uint64_t member_id, alarm_type type,
                 handler<alarm_result> h) {
  if (!c) return fail_empty(std::move(h));  // made from a moved-from client
  const int t = static_cast<int>(type);
  if (t < 0 || t > 2) return fail(c, std::move(h), error::invalid_argument);
  if (disarm && member_id == 0 && type == alarm_type::none) return spawn_result_op(c, disarm_every_alarm(c), std::move(h));
  start_one_alarm(c, disarm, member_id, type, std::move(h));
}

void start_defragment(const std::shared_ptr<client_impl>& c, std::string endpoint, handler<response_header> h) {
  if (!c) return fail_empty(std::move(h));  // made from a moved-from client
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
  if (!c) return fail_empty(std::move(h));  // made from a moved-from client
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

namespace {

/// Only the leader moves its leadership: ask any member who leads, find the leader's client URL
/// in the member list, and send the request there. One coroutine, so a cancellation between the
/// steps stops the next one.
asio::awaitable<std::tuple<error_code, response_header>> move_leader(std::shared_ptr<client_impl> c, std::uint64_t target) {
  co_await asio::this_coro::reset_cancellation_state(asio::enable_partial_cancellation());
  // (callables named before the co_await: see ask_health)
  std::function<reader_ptr<pb::StatusResponse>(grpc::ClientContext*, const pb::StatusRequest&, grpc::CompletionQueue*)>
      status_call = [c](grpc::ClientContext* ctx, const pb::StatusRequest& r, grpc::CompletionQueue* q) {
        return c->maintenance_->PrepareAsyncStatus(ctx, r, q);
      };
  std::function<reader_ptr<pb::MemberListResponse>(grpc::ClientContext*, const pb::MemberListRequest&, grpc::CompletionQueue*)>
      list_call = [c](grpc::ClientContext* ctx, const pb::MemberListRequest& r, grpc::CompletionQueue* q) {
        return c->cluster_->PrepareAsyncMemberList(ctx, r, q);
      };
  const pb::StatusRequest status_req;
  const pb::MemberListRequest list_req;
  const call_options read_again{.idempotent = true};
  auto [sec, status] = co_await call_on<pb::StatusRequest, pb::StatusResponse>(c, status_call, status_req, read_again);
  if (sec) co_return std::tuple{sec, response_header{}};
  auto [lec, list] = co_await call_on<pb::MemberListRequest, pb::MemberListResponse>(c, list_call, list_req, read_again);
  if (lec) co_return std::tuple{lec, response_header{}};
  std::string url;
  for (const auto& m : list.members())
    if (m.id() == status.leader() && m.clienturls_size() > 0) url = m.clienturls(0);
  if (url.empty()) co_return std::tuple{make_error_code(error::cluster_no_leader), response_header{}};
  auto leader_channel = c->member_channel(url);
  std::shared_ptr<pb::Maintenance::Stub> stub = pb::Maintenance::NewStub(leader_channel);
  std::function<reader_ptr<pb::MoveLeaderResponse>(grpc::ClientContext*, const pb::MoveLeaderRequest&, grpc::CompletionQueue*)>
      move_call = [stub](grpc::ClientContext* ctx, const pb::MoveLeaderRequest& r, grpc::CompletionQueue* q) {
        return stub->PrepareAsyncMoveLeader(ctx, r, q);
      };
  pb::MoveLeaderRequest req;
  req.set_targetid(target);
  const call_options write_once{.channel = leader_channel};
  auto [mec, moved] = co_await call_on<pb::MoveLeaderRequest, pb::MoveLeaderResponse>(c, move_call, req, write_once);
  if (mec) co_return std::tuple{mec, response_header{}};
  co_return std::tuple{error_code{}, from_pb(moved.header())};
}

}  // namespace

void start_move_leader(const std::shared_ptr<client_impl>& c, std::uint64_t target, handler<response_header> h) {
  if (!c) return fail_empty(std::move(h));  // made from a moved-from client
  if (target == 0) return fail(c, std::move(h), error::invalid_argument);
  spawn_result_op(c, move_leader(c, target), std::move(h));
}

}  // namespace coetcd::detail

namespace coetcd {

maintenance::executor_type maintenance::get_executor() const noexcept { return impl_ ? impl_->io_ex_ : executor_type(); }

}  // namespace coetcd
