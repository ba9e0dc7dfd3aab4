// Span hooks on one etcd member: a start and an end for each RPC attempt and lock wait, with
// method, key, attempt, member, duration, status and the caller's context; a lock wait and the
// RPCs sent for it in one trace; a namespace stripped; a hook that throws; no hooks, no spans.
#define BOOST_TEST_MODULE coetcd_spans
#include "support/fixture.hpp"

#include <coetcd/mutex.hpp>
#include <coetcd/session.hpp>
#include <coetcd/span.hpp>
#include <coetcd/with_lock.hpp>

#include <boost/asio/deferred.hpp>

#include <set>

using namespace coetcd;
using namespace coetcd::test;
using namespace std::chrono_literals;

BOOST_TEST_GLOBAL_FIXTURE(shared_etcd);

namespace {

/// A span as the hooks saw it, with owned strings.
struct seen {
  bool start = false;
  std::uint64_t id = 0, parent = 0;
  std::string name, key, member;
  int attempt = 0;
  std::chrono::nanoseconds duration{0};
  error_code status;
  const void* context = nullptr;
};

/// Records every start and end, in order; counts the hooks' calls off the client's strand.
struct recorder {
  std::vector<seen> all;
  span_hooks hooks() {
    auto keep = [this](bool start) {
      return [this, start](const span& s) {
        all.push_back(seen{start, s.id, s.parent, std::string(s.name), std::string(s.key), std::string(s.member),
                           s.attempt, s.duration, s.status, s.context});
      };
    };
    return span_hooks{keep(true), keep(false)};
  }
  /// The shared etcd's options with these hooks.
  client_options options() {
    auto o = options_for(server());
    o.spans = hooks();
    return o;
  }
  std::vector<seen> ends(std::string_view name) const {
    std::vector<seen> out;
    for (auto& s : all)
      if (!s.start && s.name == name) out.push_back(s);
    return out;
  }
  bool started(std::uint64_t id) const {
    return std::any_of(all.begin(), all.end(), [id](const seen& s) { return s.start && s.id == id; });
  }
};

struct request_info {
  std::string id;
};

}  // namespace

// A put, a get and a txn with a context: one attempt each, each started then ended, with the
// method, key, member, status and the caller's context; a call without one has none.
BOOST_AUTO_TEST_CASE(each_rpc_attempt_is_a_span_with_the_callers_context) {
  asio::io_context ioc;
  recorder r;
  client c(ioc, r.options());
  auto request = std::make_shared<request_info>(request_info{"req-1"});
  run_for(ioc, [&](client& c) -> asio::awaitable<void> {
    co_await c.async_put("spans/a", "1", with_span_context(request, use_awaitable));
    co_await c.async_get("spans/a", with_span_context(request, use_awaitable));
    auto t = txn().when(compare::value("spans/a") == "1").then(txn_op::put("spans/b", "2"));
    co_await c.async_txn(std::move(t), with_span_context(request, use_awaitable));
    co_await c.async_get("spans/b", use_awaitable);
    // A refused request ends with its error.
    put_options bad;
    bad.lease = 0x7fff0001;
    auto [ec, pr] = co_await c.async_put("spans/c", "x", bad, with_span_context(request, asio::as_tuple(use_awaitable)));
    BOOST_TEST(ec == error::lease_not_found);
  }(c));
  ioc.poll();  // hooks are posted: the last ends may still be queued
  auto puts = r.ends("Put");
  BOOST_TEST_REQUIRE(puts.size() == 2u);
  BOOST_TEST(puts[0].key == "spans/a");
  BOOST_TEST(puts[0].attempt == 1);
  BOOST_TEST(puts[0].member == server().endpoint());
  BOOST_TEST(!puts[0].status);
  BOOST_TEST(puts[0].duration.count() > 0);
  BOOST_TEST(puts[0].context == request.get());
  BOOST_TEST(puts[0].parent == 0u);
  BOOST_TEST(r.started(puts[0].id));
  BOOST_TEST(puts[1].key == "spans/c");
  BOOST_TEST(puts[1].status == error::lease_not_found, puts[1].status.message());
  auto gets = r.ends("Range");
  BOOST_TEST_REQUIRE(gets.size() == 2u);
  BOOST_TEST(gets[0].context == request.get());
  BOOST_TEST(gets[1].key == "spans/b");
  BOOST_TEST(gets[1].context == nullptr);
  auto txns = r.ends("Txn");
  BOOST_TEST_REQUIRE(txns.size() == 1u);
  BOOST_TEST(txns[0].key == "spans/a");  // the first compared key
  BOOST_TEST(txns[0].context == request.get());
  // Every span started before it ended, and ids are unique.
  std::set<std::uint64_t> ids;
  for (auto& s : r.all)
    if (s.start) BOOST_TEST(ids.insert(s.id).second);
  for (auto& s : r.all)
    if (!s.start) BOOST_TEST(ids.count(s.id) == 1u);
}

// A lock wait is a span from lock() to its completion; the RPCs sent to take the key for it carry
// its id as their parent and the caller's context; a wait behind another session's holder lasts
// at least as long as that holder held.
BOOST_AUTO_TEST_CASE(a_lock_wait_and_its_rpcs_form_one_trace) {
  asio::io_context ioc;
  recorder r;
  client c(ioc, r.options());
  client other(ioc, options_for(server()));
  auto request = std::make_shared<request_info>(request_info{"req-2"});
  run_for(ioc, [&](client& c) -> asio::awaitable<void> {
    auto holder_session = co_await session::async_create(other, use_awaitable);
    mutex held_elsewhere(holder_session, "spans/lock");
    auto elsewhere = co_await held_elsewhere.async_lock(use_awaitable);
    auto s = co_await session::async_create(c, use_awaitable);
    mutex m(s, "spans/lock");
    asio::steady_timer hold(co_await asio::this_coro::executor, 300ms);
    auto release = [&]() -> asio::awaitable<void> {
      co_await hold.async_wait(use_awaitable);
      co_await elsewhere.async_release(use_awaitable);
    };
    asio::co_spawn(co_await asio::this_coro::executor, release(), asio::detached);
    auto held = co_await m.async_lock(with_span_context(request, use_awaitable));
    BOOST_TEST(bool(held));
    co_await held.async_release(use_awaitable);
    co_await s.async_close(use_awaitable);
    co_await holder_session.async_close(use_awaitable);
  }(c));
  ioc.poll();  // hooks are posted: the last ends may still be queued
  auto locks = r.ends("lock");
  BOOST_TEST_REQUIRE(locks.size() == 1u);
  BOOST_TEST(locks[0].key == "spans/lock");
  BOOST_TEST(locks[0].attempt == 0);
  BOOST_TEST(!locks[0].status);
  BOOST_TEST(locks[0].context == request.get());
  BOOST_TEST((locks[0].duration >= 300ms));
  BOOST_TEST(r.started(locks[0].id));
  // The acquire txn went out for the wait, and so did any read of the queue while it waited.
  auto txns = r.ends("Txn");
  const auto children = std::count_if(txns.begin(), txns.end(), [&](const seen& t) {
    return t.parent == locks[0].id && t.context == request.get() && t.key.rfind("spans/lock", 0) == 0;
  });
  BOOST_TEST(children >= 1);
  // The lease grant was no part of it.
  auto grants = r.ends("LeaseGrant");
  BOOST_TEST_REQUIRE(!grants.empty());
  BOOST_TEST(grants[0].parent == 0u);
  BOOST_TEST(grants[0].context == nullptr);
}

// Keys show without the client's namespace; a hook that throws changes nothing for the caller;
// with deferred, the context is set when the operation is launched.
BOOST_AUTO_TEST_CASE(spans_show_keys_without_the_namespace_and_survive_a_throwing_hook) {
  asio::io_context ioc;
  recorder r;
  int thrown = 0;
  auto o = options_for(server());
  o.key_prefix = "tenant-a/";
  o.spans.on_start = [&](const span& s) {
    r.all.push_back(seen{true, s.id, s.parent, std::string(s.name), std::string(s.key)});
    ++thrown;
    throw std::runtime_error("a hook's bug");
  };
  o.spans.on_end = r.hooks().on_end;
  client c(ioc, o);
  auto request = std::make_shared<request_info>(request_info{"req-3"});
  run_for(ioc, [&](client& c) -> asio::awaitable<void> {
    auto op = c.async_put("k", "v", with_span_context(request, asio::deferred));
    co_await std::move(op)(use_awaitable);
    auto got = co_await c.async_get("k", use_awaitable);
    BOOST_TEST_REQUIRE(got.kvs.size() == 1u);
    BOOST_TEST(got.kvs[0].value == "v");
  }(c));
  ioc.poll();  // hooks are posted: the last ends may still be queued
  BOOST_TEST(thrown == 2);
  auto puts = r.ends("Put");
  BOOST_TEST_REQUIRE(puts.size() == 1u);
  BOOST_TEST(puts[0].key == "k");
  BOOST_TEST(puts[0].context == request.get());
  BOOST_TEST(etcdctl(server(), "get tenant-a/k --print-value-only").output == "v\n");
}

// with_lock's token form runs its body as a coroutine of its own: given a context, the lock wait
// and every call inside the body carry it, though the body passes it to none of them, also after
// a with_lock nested in the body; the caller's calls after it do not.
BOOST_AUTO_TEST_CASE(with_lock_carries_the_context_into_its_body) {
  asio::io_context ioc;
  recorder r;
  client c(ioc, r.options());
  auto request = std::make_shared<request_info>(request_info{"req-5"});
  run_for(ioc, [&](client& c) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, use_awaitable);
    mutex m(s, "spans/with-lock");
    mutex inner(s, "spans/with-lock-inner");
    auto body = [&c, &inner]() -> asio::awaitable<int> {
      // A body inside the body: its calls, and ours after it, carry the context still.
      auto nested = [&c]() -> asio::awaitable<void> { co_await c.async_get("spans/nested", use_awaitable); };
      co_await with_lock(inner, std::move(nested), {}, use_awaitable);
      co_await c.async_put("spans/in-body", "1", use_awaitable);
      auto got = co_await c.async_get("spans/in-body", use_awaitable);
      co_return static_cast<int>(got.kvs.size());
    };
    auto token = with_span_context(request, use_awaitable);
    const int n = co_await with_lock(m, std::move(body), {}, std::move(token));
    BOOST_TEST(n == 1);
    co_await c.async_get("spans/in-body", use_awaitable);  // after: no context
    co_await s.async_close(use_awaitable);
  }(c));
  ioc.poll();  // hooks are posted: the last ends may still be queued
  auto locks = r.ends("lock");
  BOOST_TEST_REQUIRE(locks.size() == 2u);
  BOOST_TEST(locks[0].context == request.get());
  BOOST_TEST(locks[1].context == request.get());
  auto puts = r.ends("Put");
  BOOST_TEST_REQUIRE(puts.size() == 1u);
  BOOST_TEST(puts[0].context == request.get());
  BOOST_TEST(puts[0].parent == 0u);  // the body's own call, not the wait's
  auto gets = r.ends("Range");
  BOOST_TEST_REQUIRE(gets.size() == 3u);
  BOOST_TEST(gets[0].key == "spans/nested");
  BOOST_TEST(gets[0].context == request.get());
  BOOST_TEST(gets[1].context == request.get());
  BOOST_TEST(gets[2].context == nullptr);
}

// Without hooks nothing is called, and a context given anyway changes nothing.
BOOST_AUTO_TEST_CASE(without_hooks_a_context_is_ignored) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  auto request = std::make_shared<request_info>(request_info{"req-4"});
  run_for(ioc, [&](client& c) -> asio::awaitable<void> {
    co_await c.async_put("spans/none", "v", with_span_context(request, use_awaitable));
    auto s = co_await session::async_create(c, use_awaitable);
    mutex m(s, "spans/none-lock");
    auto held = co_await m.async_lock(with_span_context(request, use_awaitable));
    co_await held.async_release(use_awaitable);
    co_await s.async_close(use_awaitable);
  }(c));
  ioc.poll();  // hooks are posted: the last ends may still be queued
  BOOST_TEST(request.use_count() == 1);  // nothing kept it
}
