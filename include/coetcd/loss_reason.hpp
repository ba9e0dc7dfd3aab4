// coetcd::loss_reason: why a session, a lease or a hold was lost (what async_wait_lost hands back).
#pragma once

#include <coetcd/error.hpp>

#include <boost/asio/error.hpp>

namespace coetcd {

/// Why a session, a lease or a hold was lost: the second argument of every async_wait_lost.
/// The wait completes with success when the loss happens; `cause` is the code that says so.
struct loss_reason {
  /// The kinds of loss.
  enum class kind {
    /// etcd says the lease is gone: revoked by another client, or expired (error::lease_not_found).
    lease_gone,
    /// No renewal was answered within the TTL: etcd may have expired the lease (error::lease_expired).
    lease_deadline,
    /// A hold's session was closed, orphaned or destroyed by its owner (asio::error::operation_aborted).
    session_ended,
    /// A hold's key was deleted or replaced while its lease lives (found by a leadership's
    /// proclaim, or a leader's watch; error::not_leader or error::session_lost).
    key_gone,
    /// The client was closed or destroyed (error::client_closed).
    client_closed,
    /// The keepalive stream was refused: error::auth_failed, error::auth_required,
    /// error::auth_not_enabled, error::permission_denied.
    refused,
  };
  kind what = kind::lease_gone;  ///< what happened
  error_code cause;              ///< the code that reported it
};

/// The kind of loss a session's `why` code names (see loss_reason::kind).
inline loss_reason::kind loss_kind_of(error_code why) noexcept {
  if (why == error::lease_expired) return loss_reason::kind::lease_deadline;
  if (why == error::client_closed) return loss_reason::kind::client_closed;
  if (why == boost::asio::error::operation_aborted) return loss_reason::kind::session_ended;
  if (why == error::lease_not_found || !why) return loss_reason::kind::lease_gone;
  return loss_reason::kind::refused;
}

}  // namespace coetcd
