#pragma once

#include <coetcd/client_options.hpp>
#include <coetcd/client_stats.hpp>
#include <coetcd/detail/config.hpp>
#include <coetcd/kv.hpp>
#include <coetcd/lease.hpp>
#include <coetcd/lease_keepalive.hpp>
#include <coetcd/txn.hpp>
#include <coetcd/watch.hpp>
#include <coetcd/watcher.hpp>

#include <boost/asio/io_context.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

namespace coetcd {

namespace detail {
// `end` is the owned copy of options.range_end (the view in options is not used).
void start_get(const std::shared_ptr<client_impl>&, std::string key, std::string end, get_options,
               handler<get_result>);
void start_put(const std::shared_ptr<client_impl>&, std::string, std::string, put_options, handler<put_result>);
void start_delete(const std::shared_ptr<client_impl>&, std::string key, std::string end, delete_options,
                  handler<delete_result>);
void start_txn(const std::shared_ptr<client_impl>&, txn, handler<txn_result>);
void start_compact(const std::shared_ptr<client_impl>&, std::int64_t, bool, handler<response_header>);
void start_lease_grant(const std::shared_ptr<client_impl>&, std::int64_t, std::int64_t, handler<lease_grant_result>);
void start_lease_revoke(const std::shared_ptr<client_impl>&, std::int64_t, handler<response_header>);
void start_lease_ttl(const std::shared_ptr<client_impl>&, std::int64_t, bool, handler<lease_ttl_result>);
void start_lease_list(const std::shared_ptr<client_impl>&, handler<lease_list_result>);
void start_watch(const std::shared_ptr<client_impl>&, std::string key, std::string end, watch_options,
                 handler<watcher>);
}  // namespace detail

/// A connection to an etcd cluster, owned by one executor (usually an io_context).
///
/// All state of the client lives on that executor (behind a strand, so the io_context may be run
/// by several threads). One internal thread per client waits on gRPC's completion queue and only
/// hands completions back to the executor; user code never runs on it.
///
/// Every async_* function is an Asio initiating function: any completion token (use_awaitable,
/// deferred, callbacks, use_future), move-only handlers included, and no default token in Asio
/// 1.81 (detail::default_token says why). Handlers are never invoked inside
/// the initiating function; they run on the handler's associated executor (default: the client's).
/// A pending operation counts as outstanding work, so io_context::run() does not return under it.
///
/// Unary operations support per-operation cancellation of type terminal, partial and total: the
/// RPC is cancelled and the handler gets asio::error::operation_aborted. A cancelled write may
/// still have been applied by the server.
///
/// Lifetime: sessions, mutexes and elections go before their client, and the client before its
/// executor's execution context. Work they leave in the background (a clean-up delete, the
/// release of a destroyed held mutex) holds the client's internal state and ends when it finds
/// the client closed; if such work still holds it when the context is shut down, the shutdown
/// closes it.
///
/// Cancellation through `||` of awaitable operators: run the coroutine on a strand (or a
/// single-threaded io_context). Asio's cancellation slots are not thread-safe, so on an
/// executor that runs the two branches on two threads at once, a lock or campaign that wins at
/// the same instant as the other branch may be discarded by `||` while it holds.
class client {
 public:
  /// Throws boost::system::system_error with error::invalid_endpoint, error::tls_file_unreadable
  /// or error::tls_file_invalid when the options are unusable. Does not connect: connection
  /// problems surface in the first requests (error::endpoints_unreachable).
  client(asio::any_io_executor ex, client_options options = {});
  client(asio::io_context& ioc, client_options options = {}) : client(ioc.get_executor(), std::move(options)) {}
  /// Sessions, mutexes and elections made from `other` keep working; session::get_client()
  /// returns the new object.
  client(client&& other) noexcept;
  client& operator=(client&&) noexcept;
  client(const client&) = delete;
  client& operator=(const client&) = delete;
  /// Closes the client (see close()).
  ~client();

  using executor_type = asio::any_io_executor;
  executor_type get_executor() const noexcept;
  const client_options& options() const noexcept;

  /// Counters and gauges of this client (RPCs by kind, streams, watchers, leases, lost sessions,
  /// per lock name holders, waiters, hand-offs and wait times). Any thread; reads atomics, and
  /// takes an internal mutex only to list the lock names. See examples/metrics_http.cpp for the
  /// Prometheus text format.
  client_stats stats() const;

  /// Cancels every pending request, watch and keepalive (their handlers complete with
  /// error::client_closed), then stops the completion-queue thread. Never blocks on the network.
  /// Idempotent; later operations fail with error::client_closed. May be called from any thread:
  /// the work is done on the client's strand (at once when called there). If the execution
  /// context is shut down before that has run, the context's shutdown closes the client.
  void close();

  // ---- KV ----
  //
  // Keys and values are views: they are copied before the initiating function returns.

  /// Reads a key, a prefix or a range. Handler: void(error_code, get_result).
  /// Errors: error::empty_key, error::compacted, error::future_revision, plus transport errors.
  template <class CompletionToken = detail::default_token>
  auto async_get(std::string_view key, get_options options = {}, CompletionToken&& token = {}) {
    return detail::initiate<void(error_code, get_result)>(
        std::forward<CompletionToken>(token), [i = impl_](detail::handler<get_result> h, std::string k, std::string end, get_options o) {
          detail::start_get(i, std::move(k), std::move(end), o, std::move(h));
        }, std::string(key), std::string(options.range_end), options);
  }
  template <asio::completion_token_for<void(error_code, get_result)> CompletionToken>
  auto async_get(std::string_view key, CompletionToken&& token) {
    return async_get(key, get_options{}, std::forward<CompletionToken>(token));
  }

  /// Writes a key. Handler: void(error_code, put_result). Errors: error::empty_key,
  /// error::lease_not_found, plus transport errors.
  template <class CompletionToken = detail::default_token>
  auto async_put(std::string_view key, std::string_view value, put_options options = {},
                 CompletionToken&& token = {}) {
    return detail::initiate<void(error_code, put_result)>(
        std::forward<CompletionToken>(token), [i = impl_](detail::handler<put_result> h, std::string k, std::string v, put_options o) {
          detail::start_put(i, std::move(k), std::move(v), o, std::move(h));
        }, std::string(key), std::string(value), options);
  }
  template <asio::completion_token_for<void(error_code, put_result)> CompletionToken>
  auto async_put(std::string_view key, std::string_view value, CompletionToken&& token) {
    return async_put(key, value, put_options{}, std::forward<CompletionToken>(token));
  }

  /// Deletes a key, prefix or range. Handler: void(error_code, delete_result).
  template <class CompletionToken = detail::default_token>
  auto async_delete(std::string_view key, delete_options options = {}, CompletionToken&& token = {}) {
    return detail::initiate<void(error_code, delete_result)>(
        std::forward<CompletionToken>(token), [i = impl_](detail::handler<delete_result> h, std::string k, std::string end, delete_options o) {
          detail::start_delete(i, std::move(k), std::move(end), o, std::move(h));
        }, std::string(key), std::string(options.range_end), options);
  }
  template <asio::completion_token_for<void(error_code, delete_result)> CompletionToken>
  auto async_delete(std::string_view key, CompletionToken&& token) {
    return async_delete(key, delete_options{}, std::forward<CompletionToken>(token));
  }

  /// Runs a transaction. Handler: void(error_code, txn_result); result.succeeded tells the branch.
  /// Errors: error::too_many_txn_ops, error::duplicate_key_in_txn, error::empty_key, transport.
  /// Writes are not retried on transport errors: a failed txn may still have been applied.
  template <class CompletionToken = detail::default_token>
  auto async_txn(const txn& t, CompletionToken&& token = {}) {
    return detail::initiate<void(error_code, txn_result)>(
        std::forward<CompletionToken>(token), [i = impl_](detail::handler<txn_result> h, txn t) { detail::start_txn(i, std::move(t), std::move(h)); },
        t);
  }

  /// Compacts the history up to `revision`. Handler: void(error_code, response_header).
  /// Errors: error::compacted (already compacted there), error::future_revision,
  /// error::invalid_argument (revision <= 0).
  template <class CompletionToken = detail::default_token>
  auto async_compact(std::int64_t revision, bool physical = false, CompletionToken&& token = {}) {
    return detail::initiate<void(error_code, response_header)>(
        std::forward<CompletionToken>(token), [i = impl_](detail::handler<response_header> h, std::int64_t r, bool p) {
          detail::start_compact(i, r, p, std::move(h));
        }, revision, physical);
  }
  template <asio::completion_token_for<void(error_code, response_header)> CompletionToken>
  auto async_compact(std::int64_t revision, CompletionToken&& token) {
    return async_compact(revision, false, std::forward<CompletionToken>(token));
  }

  // ---- Leases ----

  /// Grants a lease of `ttl` seconds (id 0: the server picks one).
  /// Handler: void(error_code, lease_grant_result). Errors: error::invalid_argument (ttl <= 0).
  template <class CompletionToken = detail::default_token>
  auto async_lease_grant(std::int64_t ttl, std::int64_t id = 0, CompletionToken&& token = {}) {
    return detail::initiate<void(error_code, lease_grant_result)>(
        std::forward<CompletionToken>(token), [i = impl_](detail::handler<lease_grant_result> h, std::int64_t t, std::int64_t id) {
          detail::start_lease_grant(i, t, id, std::move(h));
        }, ttl, id);
  }
  template <asio::completion_token_for<void(error_code, lease_grant_result)> CompletionToken>
  auto async_lease_grant(std::int64_t ttl, CompletionToken&& token) {
    return async_lease_grant(ttl, 0, std::forward<CompletionToken>(token));
  }

  /// Revokes a lease and deletes its keys. Handler: void(error_code, response_header).
  /// Errors: error::lease_not_found.
  template <class CompletionToken = detail::default_token>
  auto async_lease_revoke(std::int64_t id, CompletionToken&& token = {}) {
    return detail::initiate<void(error_code, response_header)>(
        std::forward<CompletionToken>(token), [i = impl_](detail::handler<response_header> h, std::int64_t id) {
          detail::start_lease_revoke(i, id, std::move(h));
        }, id);
  }

  /// Remaining TTL of a lease (ttl -1 when it does not exist; that is not an error).
  /// Handler: void(error_code, lease_ttl_result).
  template <class CompletionToken = detail::default_token>
  auto async_lease_time_to_live(std::int64_t id, bool keys = false, CompletionToken&& token = {}) {
    return detail::initiate<void(error_code, lease_ttl_result)>(
        std::forward<CompletionToken>(token), [i = impl_](detail::handler<lease_ttl_result> h, std::int64_t id, bool k) {
          detail::start_lease_ttl(i, id, k, std::move(h));
        }, id, keys);
  }
  template <asio::completion_token_for<void(error_code, lease_ttl_result)> CompletionToken>
  auto async_lease_time_to_live(std::int64_t id, CompletionToken&& token) {
    return async_lease_time_to_live(id, false, std::forward<CompletionToken>(token));
  }

  /// Every lease of the cluster. Handler: void(error_code, lease_list_result).
  template <class CompletionToken = detail::default_token>
  auto async_lease_leases(CompletionToken&& token = {}) {
    return detail::initiate<void(error_code, lease_list_result)>(
        std::forward<CompletionToken>(token), [i = impl_](detail::handler<lease_list_result> h) { detail::start_lease_list(i, std::move(h)); });
  }

  /// Starts keeping lease `id` alive on the client's shared keepalive stream; see lease_keepalive.
  /// `ttl_hint` (the granted TTL, if known) bounds the wait for the first renewal; without it the
  /// request timeout does.
  lease_keepalive keep_alive(std::int64_t id, std::chrono::seconds ttl_hint = std::chrono::seconds(0));

  // ---- Watch ----

  /// Creates a watcher on the client's shared Watch stream and completes once the server has
  /// confirmed it, so a change made after completion is always reported.
  /// Handler: void(error_code, watcher). Errors: error::empty_key, error::client_closed,
  /// error::permission_denied. A compacted start revision is reported by the watcher's first
  /// async_next (error::compacted). Cancellation: terminal/partial/total abandon the creation.
  template <class CompletionToken = detail::default_token>
  auto async_watch(std::string_view key, watch_options options = {}, CompletionToken&& token = {}) {
    return detail::initiate<void(error_code, watcher)>(
        std::forward<CompletionToken>(token), [i = impl_](detail::handler<watcher> h, std::string k, std::string end, watch_options o) {
          detail::start_watch(i, std::move(k), std::move(end), o, std::move(h));
        }, std::string(key), std::string(options.range_end), options);
  }
  template <asio::completion_token_for<void(error_code, watcher)> CompletionToken>
  auto async_watch(std::string_view key, CompletionToken&& token) {
    return async_watch(key, watch_options{}, std::forward<CompletionToken>(token));
  }

  /// Internal access for coetcd's own higher-level types.
  const std::shared_ptr<detail::client_impl>& impl() const noexcept { return impl_; }

 private:
  std::shared_ptr<detail::client_impl> impl_;
};

}  // namespace coetcd
