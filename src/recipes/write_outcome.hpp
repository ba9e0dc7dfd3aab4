// What a failed write's error says about whether it was applied, for recipes that must not
// apply a change twice (stm, counter).
#pragma once

#include <coetcd/error.hpp>

namespace coetcd::detail {

/// True for errors that leave no doubt the write was not applied: refused before it was sent, or
/// by the server's checks of the request itself. error::endpoints_unreachable is one: the core
/// gives it for a deadline only when no attempt of the call could have reached a server (its own
/// channel never had a connection, see may_have_reached_a_server in core/client_impl.hpp), and
/// request_timeout otherwise. Any other (the deadline, a dropped connection, a cancel while it
/// was on the wire, a leader lost mid-proposal) may follow an applied write.
inline bool surely_not_applied(const error_code& ec) {
  if (ec.category() != etcd_category()) return false;
  switch (static_cast<error>(ec.value())) {
    case error::empty_key:
    case error::invalid_argument:
    case error::invalid_endpoint:
    case error::tls_file_unreadable:
    case error::tls_file_invalid:
    case error::endpoints_unreachable:
    case error::auth_failed:
    case error::auth_required:
    case error::invalid_auth_token:
    case error::permission_denied:
    case error::lease_not_found:
    case error::too_many_txn_ops:
    case error::duplicate_key_in_txn:
    case error::request_too_large:
      return true;
    default:
      return false;
  }
}

}  // namespace coetcd::detail
