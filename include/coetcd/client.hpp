// coetcd::client: a connection to an etcd cluster, with its KV, lease and watch operations.
#pragma once

#include <coetcd/client_options.hpp>
#include <coetcd/client_stats.hpp>
#include <coetcd/detail/access.hpp>
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

/// An etcd v3 client on Boost.Asio: KV, leases and watches (client), and sessions, locks and
/// elections built on them. Every public name is in this namespace; `coetcd::detail` is not API.
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
void start_sync_endpoints(const std::shared_ptr<client_impl>&, handler<>);
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
/// Any number of operations may be pending at once.
/// An empty (moved-from) client's operations complete with asio::error::bad_descriptor.
///
/// Unary operations support per-operation cancellation: the RPC is cancelled and the handler
/// gets asio::error::operation_aborted, unless the reply was in already (then it completes as
/// answered). Reads (get, lease TTL, lease list, the member list) honour terminal, partial and
/// total. Writes (put, delete, txn, compact, lease grant and revoke) honour terminal and partial
/// only: a cancelled write may still have been applied by the server, so it cannot promise the
/// "no effect" of total cancellation, and a request for total alone is ignored.
///
/// Reads (get, lease TTL, lease list) are sent again after UNAVAILABLE within the request
/// deadline, and a get also when unanswered after client_options::resend_after. Writes are sent
/// again only after error::cluster_no_leader, which etcd reports before applying anything: a write
/// that failed otherwise may still have been applied.
///
/// @anchor request_errors
/// Request errors: every operation that sends a request may also complete with
/// error::client_closed, error::endpoints_unreachable, error::request_timeout,
/// error::cluster_no_leader, error::request_too_large, the authentication errors
/// (error::auth_failed, error::auth_required, error::auth_not_enabled, error::invalid_auth_token,
/// error::permission_denied), or a code of grpc_category() or server_category().
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
  /// A client whose state lives on `ex`.
  ///
  /// Throws boost::system::system_error with error::invalid_endpoint, error::tls_file_unreadable
  /// (also for a cert_file without key_file or the reverse), error::tls_file_invalid, or
  /// error::invalid_argument (request_timeout not positive, resend_after negative) when the
  /// options are unusable. Does not connect: connection problems surface in the first requests
  /// (error::endpoints_unreachable).
  client(asio::any_io_executor ex, client_options options = {});
  /// client(ioc.get_executor(), options).
  client(asio::io_context& ioc, client_options options = {}) : client(ioc.get_executor(), std::move(options)) {}
  /// Sessions, mutexes and elections made from `other` keep working; session::get_client()
  /// returns the new object. `other` is left empty: its operations complete with
  /// asio::error::bad_descriptor, posted to the handler's associated executor (Asio's system
  /// executor when it has none), and its accessors return empty values (see each).
  client(client&& other) noexcept;
  /// Closes this object's connection (see close()) and takes over `other`'s; `other` is left
  /// empty, as by the move constructor.
  client& operator=(client&&) noexcept;
  /// Not copyable.
  client(const client&) = delete;
  /// Not copyable.
  client& operator=(const client&) = delete;
  /// Closes the client (see close()): pending operations complete with error::client_closed.
  ~client();

  /// The executor handlers run on by default.
  using executor_type = asio::any_io_executor;
  /// The executor the client was made with; an empty one (no target) for an empty client, as
  /// every coetcd object's when empty. (A moved-from Asio socket keeps its executor; a client's
  /// lives in the state the move took.)
  executor_type get_executor() const noexcept;
  /// The options the client was made with. An empty client: default options without endpoints
  /// (it talks to no one, as endpoints() says).
  const client_options& options() const noexcept;
  /// The endpoints requests go to now: client_options::endpoints until a sync (see
  /// client_options::auto_sync_interval) moved the client to the members' client URLs. Any
  /// thread; empty for a moved-from client.
  std::vector<std::string> endpoints() const;

  /// Reads the member list and, when the started voting members' client URLs differ from
  /// endpoints(), sends new requests there from now on (Go's Client.Sync). Requests on the wire
  /// finish where they are; the shared streams move when they next reopen.
  ///
  /// @par Handler signature
  /// `void(error_code)`
  /// @par Errors
  /// The @ref request_errors "request errors" of the member list (the endpoints then stay).
  /// @par Cancellation
  /// Terminal, partial and total: the member list is a read.
  /// @par Executor
  /// The handler's associated executor (default: the client's); never inside this call.
  template <class CompletionToken = detail::default_token>
  auto async_sync_endpoints(CompletionToken&& token = {}) {
    return detail::initiate<void(error_code)>(
        std::forward<CompletionToken>(token), [i = impl_](detail::handler<> h) { detail::start_sync_endpoints(i, std::move(h)); });
  }

  /// Counters and gauges of this client (RPCs by kind, streams, watchers, leases, lost sessions,
  /// per lock name holders, waiters, hand-offs and wait times). Any thread; reads atomics, and
  /// takes an internal mutex only to list the lock names. See examples/metrics_http.cpp for the
  /// Prometheus text format. All zero for an empty client.
  client_stats stats() const;

  /// Cancels every pending request, watch and keepalive (their handlers complete with
  /// error::client_closed), then stops the completion-queue thread. Never blocks on the network.
  /// Idempotent; later operations fail with error::client_closed. May be called from any thread:
  /// the work is done on the client's strand (at once when called there). There it joins the
  /// completion-queue thread, which only drains the operations it has just cancelled: the one
  /// wait coetcd makes on the event loop's thread, and a short one. If the execution context is
  /// shut down before that has run, the context's shutdown closes the client.
  void close();

  // ---- KV ----
  //
  // Keys and values are views: they are copied before the initiating function returns.

  /// Reads a key, a prefix or a range.
  ///
  /// @par Handler signature
  /// `void(error_code, get_result)`
  /// @par Errors
  /// error::empty_key (an empty key without `prefix` or `from_key`); error::compacted,
  /// error::future_revision (options.revision); the @ref request_errors "request errors".
  /// @par Cancellation
  /// Terminal, partial, total: the RPC is cancelled and the handler gets
  /// asio::error::operation_aborted (or the reply, if it was in already).
  /// @par Executor
  /// The handler's associated executor (default: the client's); never inside this call.
  /// @par Lifetimes
  /// `key` and `options` are copied before this returns. The client may be closed or destroyed
  /// meanwhile: the operation then completes with error::client_closed.
  template <class CompletionToken = detail::default_token>
  auto async_get(std::string_view key, get_options options = {}, CompletionToken&& token = {}) {
    return detail::initiate<void(error_code, get_result)>(
        std::forward<CompletionToken>(token), [i = impl_](detail::handler<get_result> h, std::string k, std::string end, get_options o) {
          detail::start_get(i, std::move(k), std::move(end), o, std::move(h));
        }, std::string(key), std::string(options.range_end), options);
  }
  /// async_get(key, get_options{}, token).
  template <asio::completion_token_for<void(error_code, get_result)> CompletionToken>
  auto async_get(std::string_view key, CompletionToken&& token) {
    return async_get(key, get_options{}, std::forward<CompletionToken>(token));
  }

  /// Writes a key.
  ///
  /// @par Handler signature
  /// `void(error_code, put_result)`
  /// @par Errors
  /// error::empty_key; error::lease_not_found (options.lease); the
  /// @ref request_errors "request errors" (after which the put may still have been applied).
  /// @par Cancellation
  /// Terminal and partial: the RPC is cancelled and the handler gets
  /// asio::error::operation_aborted (or the reply, if it was in already); the write may have
  /// been applied all the same. Total is not honoured (a write on the wire cannot promise to
  /// have had no effect): a request for total cancellation alone is ignored.
  /// @par Executor
  /// The handler's associated executor (default: the client's); never inside this call.
  /// @par Lifetimes
  /// `key`, `value` and `options` are copied before this returns. The client may be closed or
  /// destroyed meanwhile: the operation then completes with error::client_closed.
  template <class CompletionToken = detail::default_token>
  auto async_put(std::string_view key, std::string_view value, put_options options = {},
                 CompletionToken&& token = {}) {
    return detail::initiate<void(error_code, put_result)>(
        std::forward<CompletionToken>(token), [i = impl_](detail::handler<put_result> h, std::string k, std::string v, put_options o) {
          detail::start_put(i, std::move(k), std::move(v), o, std::move(h));
        }, std::string(key), std::string(value), options);
  }
  /// async_put(key, value, put_options{}, token).
  template <asio::completion_token_for<void(error_code, put_result)> CompletionToken>
  auto async_put(std::string_view key, std::string_view value, CompletionToken&& token) {
    return async_put(key, value, put_options{}, std::forward<CompletionToken>(token));
  }

  /// Deletes a key, prefix or range.
  ///
  /// @par Handler signature
  /// `void(error_code, delete_result)`
  /// @par Errors
  /// error::empty_key (an empty key, unless with `prefix` or `from_key` in a namespace: see
  /// delete_options); the @ref request_errors "request errors" (after which the delete may
  /// still have been applied).
  /// @par Cancellation
  /// Terminal and partial: the RPC is cancelled and the handler gets
  /// asio::error::operation_aborted (or the reply, if it was in already); the write may have
  /// been applied all the same. Total is not honoured (a write on the wire cannot promise to
  /// have had no effect): a request for total cancellation alone is ignored.
  /// @par Executor
  /// The handler's associated executor (default: the client's); never inside this call.
  /// @par Lifetimes
  /// `key` and `options` are copied before this returns. The client may be closed or destroyed
  /// meanwhile: the operation then completes with error::client_closed.
  template <class CompletionToken = detail::default_token>
  auto async_delete(std::string_view key, delete_options options = {}, CompletionToken&& token = {}) {
    return detail::initiate<void(error_code, delete_result)>(
        std::forward<CompletionToken>(token), [i = impl_](detail::handler<delete_result> h, std::string k, std::string end, delete_options o) {
          detail::start_delete(i, std::move(k), std::move(end), o, std::move(h));
        }, std::string(key), std::string(options.range_end), options);
  }
  /// async_delete(key, delete_options{}, token).
  template <asio::completion_token_for<void(error_code, delete_result)> CompletionToken>
  auto async_delete(std::string_view key, CompletionToken&& token) {
    return async_delete(key, delete_options{}, std::forward<CompletionToken>(token));
  }

  /// Runs a transaction; txn_result::succeeded tells which branch ran.
  ///
  /// @par Handler signature
  /// `void(error_code, txn_result)`
  /// @par Errors
  /// error::empty_key (an operation's key); error::too_many_txn_ops, error::duplicate_key_in_txn,
  /// error::lease_not_found (a put's lease), error::compacted, error::future_revision (a get's
  /// revision); the @ref request_errors "request errors". Writes are not retried on transport
  /// errors: a failed txn may still have been applied.
  /// @par Cancellation
  /// Terminal and partial: the RPC is cancelled and the handler gets
  /// asio::error::operation_aborted (or the reply, if it was in already); the write may have
  /// been applied all the same. Total is not honoured (a write on the wire cannot promise to
  /// have had no effect): a request for total cancellation alone is ignored.
  /// @par Executor
  /// The handler's associated executor (default: the client's); never inside this call.
  /// @par Lifetimes
  /// `t` is copied before this returns. The client may be closed or destroyed meanwhile: the
  /// operation then completes with error::client_closed.
  template <class CompletionToken = detail::default_token>
  auto async_txn(const txn& t, CompletionToken&& token = {}) {
    return detail::initiate<void(error_code, txn_result)>(
        std::forward<CompletionToken>(token), [i = impl_](detail::handler<txn_result> h, txn t) { detail::start_txn(i, std::move(t), std::move(h)); },
        t);
  }

  /// Compacts the history up to `revision`.
  ///
  /// @par Handler signature
  /// `void(error_code, response_header)`
  /// @par Errors
  /// error::invalid_argument (revision <= 0); error::compacted (already compacted there),
  /// error::future_revision; the @ref request_errors "request errors".
  /// @par Cancellation
  /// Terminal and partial: the RPC is cancelled and the handler gets
  /// asio::error::operation_aborted (or the reply, if it was in already); the write may have
  /// been applied all the same. Total is not honoured (a write on the wire cannot promise to
  /// have had no effect): a request for total cancellation alone is ignored.
  /// @par Executor
  /// The handler's associated executor (default: the client's); never inside this call.
  /// @par Lifetimes
  /// The client may be closed or destroyed meanwhile: the operation then completes with
  /// error::client_closed.
  template <class CompletionToken = detail::default_token>
  auto async_compact(std::int64_t revision, bool physical = false, CompletionToken&& token = {}) {
    return detail::initiate<void(error_code, response_header)>(
        std::forward<CompletionToken>(token), [i = impl_](detail::handler<response_header> h, std::int64_t r, bool p) {
          detail::start_compact(i, r, p, std::move(h));
        }, revision, physical);
  }
  /// async_compact(revision, false, token).
  template <asio::completion_token_for<void(error_code, response_header)> CompletionToken>
  auto async_compact(std::int64_t revision, CompletionToken&& token) {
    return async_compact(revision, false, std::forward<CompletionToken>(token));
  }

  // ---- Leases ----

  /// Grants a lease of `ttl` (whole seconds; id 0: the server picks one).
  ///
  /// @par Handler signature
  /// `void(error_code, lease_grant_result)`
  /// @par Errors
  /// error::invalid_argument (ttl <= 0, id < 0, or a TTL above the server's maximum); the
  /// @ref request_errors "request errors".
  /// @par Cancellation
  /// Terminal and partial: the RPC is cancelled and the handler gets
  /// asio::error::operation_aborted (or the reply, if it was in already); the write may have
  /// been applied all the same. Total is not honoured (a write on the wire cannot promise to
  /// have had no effect): a request for total cancellation alone is ignored.
  /// @par Executor
  /// The handler's associated executor (default: the client's); never inside this call.
  /// @par Lifetimes
  /// The client may be closed or destroyed meanwhile: the operation then completes with
  /// error::client_closed.
  template <class CompletionToken = detail::default_token>
  auto async_lease_grant(std::chrono::seconds ttl, std::int64_t id = 0, CompletionToken&& token = {}) {
    return detail::initiate<void(error_code, lease_grant_result)>(
        std::forward<CompletionToken>(token), [i = impl_](detail::handler<lease_grant_result> h, std::int64_t t, std::int64_t id) {
          detail::start_lease_grant(i, t, id, std::move(h));
        }, static_cast<std::int64_t>(ttl.count()), id);
  }
  /// async_lease_grant(ttl, 0, token).
  template <asio::completion_token_for<void(error_code, lease_grant_result)> CompletionToken>
  auto async_lease_grant(std::chrono::seconds ttl, CompletionToken&& token) {
    return async_lease_grant(ttl, 0, std::forward<CompletionToken>(token));
  }

  /// Revokes a lease and deletes its keys.
  ///
  /// @par Handler signature
  /// `void(error_code, response_header)`
  /// @par Errors
  /// error::lease_not_found; the @ref request_errors "request errors".
  /// @par Cancellation
  /// Terminal and partial: the RPC is cancelled and the handler gets
  /// asio::error::operation_aborted (or the reply, if it was in already); the write may have
  /// been applied all the same. Total is not honoured (a write on the wire cannot promise to
  /// have had no effect): a request for total cancellation alone is ignored.
  /// @par Executor
  /// The handler's associated executor (default: the client's); never inside this call.
  /// @par Lifetimes
  /// The client may be closed or destroyed meanwhile: the operation then completes with
  /// error::client_closed.
  template <class CompletionToken = detail::default_token>
  auto async_lease_revoke(std::int64_t id, CompletionToken&& token = {}) {
    return detail::initiate<void(error_code, response_header)>(
        std::forward<CompletionToken>(token), [i = impl_](detail::handler<response_header> h, std::int64_t id) {
          detail::start_lease_revoke(i, id, std::move(h));
        }, id);
  }

  /// Remaining TTL of a lease (ttl -1 when it does not exist; that is not an error), and its
  /// keys when `keys` is set.
  ///
  /// @par Handler signature
  /// `void(error_code, lease_ttl_result)`
  /// @par Errors
  /// The @ref request_errors "request errors".
  /// @par Cancellation
  /// Terminal, partial, total: the RPC is cancelled and the handler gets
  /// asio::error::operation_aborted (or the reply, if it was in already).
  /// @par Executor
  /// The handler's associated executor (default: the client's); never inside this call.
  /// @par Lifetimes
  /// The client may be closed or destroyed meanwhile: the operation then completes with
  /// error::client_closed.
  template <class CompletionToken = detail::default_token>
  auto async_lease_time_to_live(std::int64_t id, bool keys = false, CompletionToken&& token = {}) {
    return detail::initiate<void(error_code, lease_ttl_result)>(
        std::forward<CompletionToken>(token), [i = impl_](detail::handler<lease_ttl_result> h, std::int64_t id, bool k) {
          detail::start_lease_ttl(i, id, k, std::move(h));
        }, id, keys);
  }
  /// async_lease_time_to_live(id, false, token).
  template <asio::completion_token_for<void(error_code, lease_ttl_result)> CompletionToken>
  auto async_lease_time_to_live(std::int64_t id, CompletionToken&& token) {
    return async_lease_time_to_live(id, false, std::forward<CompletionToken>(token));
  }

  /// Every lease of the cluster.
  ///
  /// @par Handler signature
  /// `void(error_code, lease_list_result)`
  /// @par Errors
  /// The @ref request_errors "request errors".
  /// @par Cancellation
  /// Terminal, partial, total: the RPC is cancelled and the handler gets
  /// asio::error::operation_aborted (or the reply, if it was in already).
  /// @par Executor
  /// The handler's associated executor (default: the client's); never inside this call.
  /// @par Lifetimes
  /// The client may be closed or destroyed meanwhile: the operation then completes with
  /// error::client_closed.
  template <class CompletionToken = detail::default_token>
  auto async_lease_leases(CompletionToken&& token = {}) {
    return detail::initiate<void(error_code, lease_list_result)>(
        std::forward<CompletionToken>(token), [i = impl_](detail::handler<lease_list_result> h) { detail::start_lease_list(i, std::move(h)); });
  }

  /// Starts keeping lease `id` alive on the client's shared keepalive stream; see lease_keepalive.
  /// `ttl_hint` (the granted TTL, if known) bounds the wait for the first renewal; without it the
  /// request timeout does. Never fails here: a closed client or a lease that is gone shows in
  /// lease_keepalive::async_wait_lost. An empty client gives an empty lease_keepalive.
  lease_keepalive keep_alive(std::int64_t id, std::chrono::seconds ttl_hint = std::chrono::seconds(0));

  // ---- Watch ----

  /// Creates a watcher on the client's shared Watch stream and completes once the server has
  /// confirmed it, so a change made after completion is always reported. No deadline: while no
  /// member answers, the stream is reopened and the creation waits (request_timeout does not
  /// apply).
  ///
  /// @par Handler signature
  /// `void(error_code, watcher)`
  /// @par Errors
  /// error::empty_key (an empty key without `prefix` or `from_key`), error::client_closed; the
  /// stream's refusals (error::permission_denied, error::auth_failed, error::auth_required,
  /// error::auth_not_enabled, error::invalid_auth_token);
  /// error::watch_canceled when the server refuses the watch. A compacted start revision is
  /// normally reported by the watcher's first async_next (error::compacted); if the server
  /// refuses the creation for it, here.
  /// @par Cancellation
  /// Terminal, partial, total abandon the creation (the watch is cancelled on the server;
  /// asio::error::operation_aborted), from the moment this call returns.
  /// @par Executor
  /// The handler's associated executor (default: the client's); never inside this call.
  /// @par Lifetimes
  /// `key` and `options` are copied before this returns. The client may be closed or destroyed
  /// meanwhile: the operation then completes with error::client_closed.
  template <class CompletionToken = detail::default_token>
  auto async_watch(std::string_view key, watch_options options = {}, CompletionToken&& token = {}) {
    return detail::initiate<void(error_code, watcher)>(
        std::forward<CompletionToken>(token), [i = impl_](detail::handler<watcher> h, std::string k, std::string end, watch_options o) {
          detail::start_watch(i, std::move(k), std::move(end), o, std::move(h));
        }, std::string(key), std::string(options.range_end), options);
  }
  /// async_watch(key, watch_options{}, token).
  template <asio::completion_token_for<void(error_code, watcher)> CompletionToken>
  auto async_watch(std::string_view key, CompletionToken&& token) {
    return async_watch(key, watch_options{}, std::forward<CompletionToken>(token));
  }

  /// @cond INTERNAL
  friend struct detail::access;
  /// @endcond

 private:
  std::shared_ptr<detail::client_impl> impl_;
};

}  // namespace coetcd
