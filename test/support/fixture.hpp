// Test support: one etcd member shared by the test cases of a test binary.
#pragma once

#include "etcd_process.hpp"
#include "run.hpp"

#include <coetcd.hpp>
#include <coetcd/with_lock.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <sstream>

namespace coetcd::test {

struct shared_etcd {
  shared_etcd() { instance() = std::make_unique<etcd_process>(); }
  ~shared_etcd() { instance().reset(); }
  static std::unique_ptr<etcd_process>& instance() {
    static std::unique_ptr<etcd_process> p;
    return p;
  }
};

inline etcd_process& server() { return *shared_etcd::instance(); }

inline client_options options_for(const etcd_process& e) {
  client_options o;
  o.endpoints = {e.endpoint()};
  o.request_timeout = std::chrono::seconds(5);
  return o;
}

/// A lease id as etcdctl prints and takes it.
inline std::string hex(std::int64_t id) {
  std::ostringstream s;
  s << std::hex << id;
  return s.str();
}

/// Keys remaining under a prefix.
inline asio::awaitable<std::int64_t> count_keys(client& c, std::string_view prefix) {
  auto r = co_await c.async_get(prefix, get_options{.prefix = true, .count_only = true}, use_awaitable);
  co_return r.count;
}

/// The number of keys under `prefix` once it is `expected`, or after 2 s: a caller that gave up
/// completes before its key's delete, which runs in the background.
inline asio::awaitable<std::int64_t> settled_keys(client& c, const std::string& prefix, std::int64_t expected) {
  auto n = co_await count_keys(c, prefix);
  for (int i = 0; i < 200 && n != expected; ++i) {
    co_await sleep_for(std::chrono::milliseconds(10));
    n = co_await count_keys(c, prefix);
  }
  co_return n;
}

/// Asserts that nothing is left under a lock name's prefix once a test is done (a key left
/// under a live lease stays, and fails this).
inline asio::awaitable<void> expect_no_keys(client& c, std::string name) {
  auto left = co_await settled_keys(c, name + "/", 0);
  BOOST_TEST(left == 0, "keys left under " << name << "/");
}

/// The value of `key`, or "<none>" when it is absent.
inline asio::awaitable<std::string> value_of(client& c, std::string key) {
  auto r = co_await c.async_get(key, use_awaitable);
  co_return r.kvs.empty() ? std::string("<none>") : r.kvs.front().value;
}

/// The create revision of `key`, 0 when it is absent.
inline asio::awaitable<std::int64_t> create_revision_of(client& c, const std::string& key) {
  auto r = co_await c.async_get(key, {}, use_awaitable);
  co_return r.kvs.empty() ? 0 : r.kvs.front().create_revision;
}

/// RPCs of `method` ("Txn", "Range") the client has sent so far.
inline std::uint64_t rpcs_sent(const client& c, const std::string& method) {
  auto st = c.stats();
  auto it = st.rpcs.find(method);
  return it == st.rpcs.end() ? 0 : it->second.sent;
}

/// Waits up to `limit` for `done()`, looking every 10 ms.
inline asio::awaitable<bool> eventually(std::function<bool()> done, std::chrono::milliseconds limit) {
  auto until = std::chrono::steady_clock::now() + limit;
  while (!done() && std::chrono::steady_clock::now() < until) co_await sleep_for(std::chrono::milliseconds(10));
  co_return done();
}

/// An rw_mutex's write side when `write`, else its read side.
template <class Token = asio::use_awaitable_t<>>
auto take(rw_mutex& m, bool write, Token token = {}) {
  return write ? m.async_lock(token) : m.async_lock_shared(token);
}

/// The result of an operation started with a callback (record(o) as its handler), once it ran.
using outcome = std::shared_ptr<std::optional<error_code>>;
inline outcome started() { return std::make_shared<std::optional<error_code>>(); }
inline auto record(outcome o) {
  return [o](error_code ec) { *o = ec; };
}
/// Waits up to `limit` for the operation behind `o` to complete; whether it did.
inline asio::awaitable<bool> settled(outcome o, std::chrono::milliseconds limit = std::chrono::seconds(5)) {
  // Named first: g++ 12 destroys a by-value capture written inside a co_await expression twice.
  std::function<bool()> done = [o] { return o->has_value(); };
  co_return co_await eventually(std::move(done), limit);
}

}  // namespace coetcd::test
