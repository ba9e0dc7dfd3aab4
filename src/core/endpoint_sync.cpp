// Endpoints that follow the cluster: the member list read on demand or every
// client_options::auto_sync_interval, and the client moved to the voting members' client URLs.
#include "client_impl.hpp"
#include "unary_rpc.hpp"

#include <algorithm>

namespace coetcd {
namespace detail {
namespace {

/// What makes two endpoint lists the same connection targets: scheme, host and port, in order.
std::vector<std::string> normalized(const std::vector<endpoint>& eps) {
  std::vector<std::string> out;
  for (const auto& e : eps) out.push_back((e.tls ? "https://" : "http://") + e.host + ":" + std::to_string(e.port));
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

void client_impl::sync_endpoints(std::function<void(error_code)> done, asio::cancellation_slot slot) {
  start_unary<pb::MemberListRequest, pb::MemberListResponse>(
      shared_from_this(),
      [this](grpc::ClientContext* ctx, const pb::MemberListRequest& r, grpc::CompletionQueue* q) {
        return cluster_->PrepareAsyncMemberList(ctx, r, q);
      },
      pb::MemberListRequest{}, call_options{.idempotent = true, .needs_leader = true},
      [self = shared_from_this(), done = std::move(done)](error_code ec, pb::MemberListResponse& r) {
        if (ec || self->closed_) return done(ec ? ec : make_error_code(error::client_closed));
        // Go's client takes the started voting members: a learner refuses most requests, and a
        // member added but not yet started has no client URL.
        std::vector<std::string> urls;
        for (const auto& m : r.members())
          if (!m.name().empty() && !m.islearner()) urls.insert(urls.end(), m.clienturls().begin(), m.clienturls().end());
        std::vector<endpoint> eps;
        try {
          if (!urls.empty()) eps = parse_endpoints(urls);
        } catch (const boost::system::system_error&) {
          eps.clear();  // a URL we cannot dial (unix://...): keep what works
        }
        if (eps.empty() || normalized(eps) == normalized(parse_endpoints(self->current_endpoints()))) return done({});
        try {
          self->use_endpoints(eps, urls);
        } catch (const boost::system::system_error& e) {  // gRPC refused the target: keep what works
          return done(e.code());
        }
        if (self->wants_events()) {
          std::string list;
          for (const auto& u : urls) list += (list.empty() ? "" : ",") + u;
          self->emit({.kind = event_kind::endpoints_changed, .detail = std::move(list)});
        }
        done({});
      },
      slot);
}

void client_impl::arm_auto_sync() {
  sync_alarm_.Set(&cq_, std::chrono::system_clock::now() + options_.auto_sync_interval,
                  sync_tag_.arm([w = weak_from_this()](bool ok) {
                    auto self = w.lock();
                    if (!ok || !self || self->closed_) return;
                    // The next tick is armed once this one's read has ended, so two never overlap.
                    self->sync_endpoints([w](error_code) {
                      // A failed read is tried again at the next interval, as Go's client does.
                      auto s = w.lock();
                      if (s && !s->closed_) s->arm_auto_sync();
                    });
                  }));
}

void start_sync_endpoints(const std::shared_ptr<client_impl>& c, handler<> h) {
  if (!c) return fail_empty(std::move(h));  // a moved-from client
  auto slot = asio::get_associated_cancellation_slot(h);
  // std::function needs a copyable callable: the handler goes in a shared box.
  auto box = std::make_shared<handler<>>(std::move(h));
  c->sync_endpoints([c, box](error_code ec) { c->complete(std::move(*box), ec); }, slot);
}

}  // namespace detail

std::vector<std::string> client::endpoints() const { return impl_ ? impl_->current_endpoints() : std::vector<std::string>{}; }

}  // namespace coetcd
