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

/// The error `f` throws as a boost::system::system_error, else none.
template <class F>
error_code thrown_code(F f) {
  try {
    f();
  } catch (const boost::system::system_error& e) {
    return e.code();
  }
  return {};
}

/// Waits up to `limit` for `done()`, looking every 10 ms.
inline asio::awaitable<bool> eventually(std::function<bool()> done, std::chrono::milliseconds limit) {
  auto until = std::chrono::steady_clock::now() + limit;
  while (!done() && std::chrono::steady_clock::now() < until) co_await sleep_for(std::chrono::milliseconds(10));
  co_return done();
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

/// The result of an acquisition started with a callback (record(o) as its handler): its error
/// once it completed, and the hold it handed over, kept here for as long as `o` lives (a hold
/// the handler dropped would be released at once).
template <class Hold>
struct acquisition {
  std::optional<error_code> ec;
  Hold hold;
};
template <class Hold>
using acquired = std::shared_ptr<acquisition<Hold>>;
/// An acquisition's record before it completes: `acquiring<mutex::hold>()`, say.
template <class Hold>
acquired<Hold> acquiring() {
  return std::make_shared<acquisition<Hold>>();
}
template <class Hold>
auto record(acquired<Hold> o) {
  return [o](error_code ec, Hold h) {
    o->hold = std::move(h);
    o->ec = ec;
  };
}
template <class Hold>
asio::awaitable<bool> settled(acquired<Hold> o, std::chrono::milliseconds limit = std::chrono::seconds(5)) {
  std::function<bool()> done = [o] { return o->ec.has_value(); };
  co_return co_await eventually(std::move(done), limit);
}

/// The result of an async_wait_lost started with a callback (record(o) as its handler): success
/// and the reason when the loss came, operation_aborted when the wait ended without one.
struct loss_wait {
  error_code ec;
  loss_reason reason;
};
using lost_outcome = std::shared_ptr<std::optional<loss_wait>>;
inline lost_outcome waiting_for_loss() { return std::make_shared<std::optional<loss_wait>>(); }
inline auto record(lost_outcome o) {
  return [o](error_code ec, loss_reason r) { *o = loss_wait{ec, r}; };
}
inline asio::awaitable<bool> settled(lost_outcome o, std::chrono::milliseconds limit = std::chrono::seconds(5)) {
  std::function<bool()> done = [o] { return o->has_value(); };
  co_return co_await eventually(std::move(done), limit);
}

}  // namespace coetcd::test
