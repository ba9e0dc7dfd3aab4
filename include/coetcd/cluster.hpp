// coetcd::cluster: etcd's Cluster service (list, add, remove, update and promote members).
#pragma once

#include <coetcd/client.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace coetcd {

/// One member of the cluster, as the member list reports it.
struct member {
  std::uint64_t id = 0;                  ///< the member's ID
  std::string name;                      ///< its --name; empty until a member added has started
  std::vector<std::string> peer_urls;    ///< URLs the other members reach it at
  std::vector<std::string> client_urls;  ///< URLs clients reach it at; empty until it has started
  bool is_learner = false;               ///< a learner: it follows the log but does not vote
};

/// The answer to cluster::async_member_list, and to the changes (the members after the change).
struct member_list_result {
  response_header header;       ///< the response's header
  std::vector<member> members;  ///< every member, learners included
};

/// The answer to cluster::async_member_add.
struct member_add_result {
  response_header header;       ///< the response's header
  member added;                 ///< the new member (no name or client URLs until it starts)
  std::vector<member> members;  ///< every member, the new one included
};

namespace detail {
void start_member_list(const std::shared_ptr<client_impl>&, handler<member_list_result>);
void start_member_add(const std::shared_ptr<client_impl>&, std::vector<std::string>, bool, handler<member_add_result>);
void start_member_remove(const std::shared_ptr<client_impl>&, std::uint64_t, handler<member_list_result>);
void start_member_update(const std::shared_ptr<client_impl>&, std::uint64_t, std::vector<std::string>,
                         handler<member_list_result>);
void start_member_promote(const std::shared_ptr<client_impl>&, std::uint64_t, handler<member_list_result>);
}  // namespace detail

/// The membership of the cluster a client talks to, as `etcdctl member ...` changes it (Go's
/// clientv3.Cluster). A cheap handle: it shares the client's connection and may be copied.
///
/// Every function is an Asio initiating function with the client's rules (see client): the
/// handler runs on its associated executor (default: the client's), never inside the call, and
/// the client may be closed meanwhile (error::client_closed). Any number of operations may be
/// pending at once.
///
/// @par Errors
/// error::invalid_argument for a bad argument (checked before sending); etcd's own refusals
/// (server_category(): "member ID not found", "peerURL exists", "too many learner members",
/// "can only promote a learner member which is in sync with leader", "re-configuration failed
/// due to not enough started members"); the @ref request_errors "request errors".
/// @par Cancellation
/// The list: terminal, partial and total. The changes: terminal and partial (the change may
/// have been applied all the same); a request for total alone is ignored.
class cluster {
 public:
  /// A handle on `c`'s cluster; `c` must outlive the operations started through it.
  /// Made from an empty (moved-from) client, the handle is empty: get_executor() is empty and
  /// its operations complete with asio::error::bad_descriptor.
  explicit cluster(client& c) : impl_(detail::access::impl(c)) {}

  /// The type of get_executor().
  using executor_type = client::executor_type;
  /// The client's executor, on which handlers run by default (empty for an empty handle).
  executor_type get_executor() const noexcept;

  /// Every member, learners included. Sent again after UNAVAILABLE within the request deadline.
  ///
  /// @par Handler signature
  /// `void(error_code, member_list_result)`
  template <class CompletionToken = detail::default_token>
  auto async_member_list(CompletionToken&& token = {}) {
    return detail::initiate<void(error_code, member_list_result)>(
        std::forward<CompletionToken>(token),
        [i = impl_](detail::handler<member_list_result> h) { detail::start_member_list(i, std::move(h)); });
  }

  /// Adds a member that will be reached at `peer_urls` (at least one, each "http://host:port"
  /// or "https://..."), as a learner when `learner` is true. Start the new member afterwards
  /// with `--initial-cluster-state=existing` and a cluster list that names it.
  ///
  /// @par Handler signature
  /// `void(error_code, member_add_result)`
  template <class CompletionToken = detail::default_token>
  auto async_member_add(std::vector<std::string> peer_urls, bool learner = false, CompletionToken&& token = {}) {
    return detail::initiate<void(error_code, member_add_result)>(
        std::forward<CompletionToken>(token),
        [i = impl_](detail::handler<member_add_result> h, std::vector<std::string> u, bool l) {
          detail::start_member_add(i, std::move(u), l, std::move(h));
        },
        std::move(peer_urls), learner);
  }
  /// async_member_add(peer_urls, false, token).
  template <asio::completion_token_for<void(error_code, member_add_result)> CompletionToken>
  auto async_member_add(std::vector<std::string> peer_urls, CompletionToken&& token) {
    return async_member_add(std::move(peer_urls), false, std::forward<CompletionToken>(token));
  }

  /// Removes member `id` (0 is no member: error::invalid_argument).
  ///
  /// @par Handler signature
  /// `void(error_code, member_list_result)`
  template <class CompletionToken = detail::default_token>
  auto async_member_remove(std::uint64_t id, CompletionToken&& token = {}) {
    return detail::initiate<void(error_code, member_list_result)>(
        std::forward<CompletionToken>(token),
        [i = impl_](detail::handler<member_list_result> h, std::uint64_t id) {
          detail::start_member_remove(i, id, std::move(h));
        },
        id);
  }

  /// Gives member `id` new peer URLs (at least one).
  ///
  /// @par Handler signature
  /// `void(error_code, member_list_result)`
  template <class CompletionToken = detail::default_token>
  auto async_member_update(std::uint64_t id, std::vector<std::string> peer_urls, CompletionToken&& token = {}) {
    return detail::initiate<void(error_code, member_list_result)>(
        std::forward<CompletionToken>(token),
        [i = impl_](detail::handler<member_list_result> h, std::uint64_t id, std::vector<std::string> u) {
          detail::start_member_update(i, id, std::move(u), std::move(h));
        },
        id, std::move(peer_urls));
  }

  /// Makes learner `id` a voting member. etcd refuses while the learner's log is behind the
  /// leader's; try again once it has caught up.
  ///
  /// @par Handler signature
  /// `void(error_code, member_list_result)`
  template <class CompletionToken = detail::default_token>
  auto async_member_promote(std::uint64_t id, CompletionToken&& token = {}) {
    return detail::initiate<void(error_code, member_list_result)>(
        std::forward<CompletionToken>(token),
        [i = impl_](detail::handler<member_list_result> h, std::uint64_t id) {
          detail::start_member_promote(i, id, std::move(h));
        },
        id);
  }

 private:
  std::shared_ptr<detail::client_impl> impl_;
};

}  // namespace coetcd
