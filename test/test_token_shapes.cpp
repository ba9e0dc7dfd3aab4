// Every initiating function of the public API, compiled with each completion token the docs name, and the docs' own call forms; a few run without a server.
#define BOOST_TEST_MODULE coetcd_token_shapes
#include <boost/test/unit_test.hpp>

#include <coetcd.hpp>
#include <coetcd/barrier.hpp>
#include <coetcd/cache.hpp>
#include <coetcd/cache_reader.hpp>
#include <coetcd/cluster.hpp>
#include <coetcd/counter.hpp>
#include <coetcd/double_barrier.hpp>
#include <coetcd/election_observer.hpp>
#include <coetcd/hold.hpp>
#include <coetcd/leader.hpp>
#include <coetcd/lease_keepalive.hpp>
#include <coetcd/lock_status.hpp>
#include <coetcd/maintenance.hpp>
#include <coetcd/naming.hpp>
#include <coetcd/priority_queue.hpp>
#include <coetcd/queue.hpp>
#include <coetcd/registration.hpp>
#include <coetcd/stm.hpp>
#include <coetcd/with_lock.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/system/system_error.hpp>

#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <vector>

using namespace coetcd;
using asio::use_awaitable;
using namespace std::chrono_literals;

namespace {

// What use_awaitable and use_future produce for the arguments after the error: nothing, the one
// value, or a tuple of them (Asio's rules).
template <class... Args>
struct value_of {
  using type = std::tuple<Args...>;
};
template <class T>
struct value_of<T> {
  using type = T;
};
template <>
struct value_of<> {
  using type = void;
};

template <class Signature>
struct token_shapes;

/// Starts one initiating function, given as `start(token)`, with each token shape the docs name,
/// and checks the type each gives against the documented handler signature `void(Error, Args...)`.
template <class Error, class... Args>
struct token_shapes<void(Error, Args...)> {
  using value = typename value_of<Args...>::type;

  static auto callback() {
    return [](Error, Args...) {};
  }

  template <class Start>
  static void check(Start start) {
    auto awaited = start(use_awaitable);
    static_assert(std::is_same_v<decltype(awaited), asio::awaitable<value>>);
    auto tupled = start(asio::as_tuple(use_awaitable));
    static_assert(std::is_same_v<decltype(tupled), asio::awaitable<std::tuple<Error, Args...>>>);
    auto future = start(asio::use_future);
    static_assert(std::is_same_v<decltype(future), std::future<value>>);
    auto op = start(asio::deferred);
    static_assert(std::is_same_v<asio::completion_signature_of_t<decltype(op)>, void(Error, Args...)>);
    std::move(op)(callback());
    start(callback());
  }
};

// `start` for token_shapes: the call with the token in last place, forwarded as written.
#define WITH_TOKEN(...) [&](auto&& token) { return __VA_ARGS__; }
#define TOKEN std::forward<decltype(token)>(token)

using signal = void(error_code);
template <class T>
using result = void(error_code, T);
template <class T>
using spawned = void(std::exception_ptr, T);
using lost = void(error_code, loss_reason);

// Every hold meets coetcd::hold (what with_lock and generic code need), and has one owner: none
// can be copied, so no two objects can release, fence with or read the token of one hold.
template <class H>
constexpr bool one_owner = !std::is_copy_constructible_v<H> && !std::is_copy_assignable_v<H> &&
                           std::is_nothrow_move_constructible_v<H> && std::is_nothrow_move_assignable_v<H>;
static_assert(coetcd::hold<mutex::hold> && one_owner<mutex::hold>);
static_assert(coetcd::hold<rw_mutex::hold> && one_owner<rw_mutex::hold>);
static_assert(coetcd::hold<rw_mutex::shared_hold> && one_owner<rw_mutex::shared_hold>);
static_assert(coetcd::hold<semaphore::hold> && one_owner<semaphore::hold>);
static_assert(coetcd::hold<multi_lock::hold> && one_owner<multi_lock::hold>);
static_assert(coetcd::hold<election::hold> && one_owner<election::hold>);
// A hold of one kind is not another's: the three mutex-family holds share a base, not a type.
static_assert(!std::is_convertible_v<mutex::hold, rw_mutex::hold> && !std::is_convertible_v<rw_mutex::hold, mutex::hold>);
static_assert(!std::is_convertible_v<rw_mutex::shared_hold, rw_mutex::hold>);
// The lock objects themselves are no holds.
static_assert(!coetcd::hold<mutex> && !coetcd::hold<semaphore> && !coetcd::hold<election>);

/// Every initiating function of the public API with every token shape, the forms that take only
/// a token (their other parameters defaulted) included. Compiled, never called.
[[maybe_unused]] void every_function(client& c, session& s, mutex& m, rw_mutex& rw, semaphore& sem, multi_lock& ml,
                                     election& el, election_observer& obs, leader& ld, registration& reg, cache& ca,
                                     cache_reader& cr, counter& ctr, barrier& b, double_barrier& db, queue& q,
                                     priority_queue& pq, watcher& w, lease_keepalive& ka, mutex::hold& mh,
                                     rw_mutex::hold& wh, rw_mutex::shared_hold& rh, semaphore::hold& ph,
                                     multi_lock::hold& mlh, election::hold& eh) {
  // client
  token_shapes<signal>::check(WITH_TOKEN(c.async_sync_endpoints(TOKEN)));
  token_shapes<result<get_result>>::check(WITH_TOKEN(c.async_get("k", TOKEN)));
  token_shapes<result<get_result>>::check(WITH_TOKEN(c.async_get("k", {.prefix = true}, TOKEN)));
  token_shapes<result<put_result>>::check(WITH_TOKEN(c.async_put("k", "v", TOKEN)));
  token_shapes<result<put_result>>::check(WITH_TOKEN(c.async_put("k", "v", {.lease = 1}, TOKEN)));
  token_shapes<result<delete_result>>::check(WITH_TOKEN(c.async_delete("k", TOKEN)));
  token_shapes<result<delete_result>>::check(WITH_TOKEN(c.async_delete("k", {.prefix = true}, TOKEN)));
  token_shapes<result<txn_result>>::check(WITH_TOKEN(c.async_txn(txn(), TOKEN)));
  token_shapes<result<response_header>>::check(WITH_TOKEN(c.async_compact(7, TOKEN)));
  token_shapes<result<response_header>>::check(WITH_TOKEN(c.async_compact(7, true, TOKEN)));
  token_shapes<result<lease_grant_result>>::check(WITH_TOKEN(c.async_lease_grant(std::chrono::seconds(10), TOKEN)));
  token_shapes<result<lease_grant_result>>::check(WITH_TOKEN(c.async_lease_grant(std::chrono::seconds(10), 0x1234, TOKEN)));
  token_shapes<result<response_header>>::check(WITH_TOKEN(c.async_lease_revoke(0x1234, TOKEN)));
  token_shapes<result<lease_ttl_result>>::check(WITH_TOKEN(c.async_lease_time_to_live(0x1234, TOKEN)));
  token_shapes<result<lease_ttl_result>>::check(WITH_TOKEN(c.async_lease_time_to_live(0x1234, true, TOKEN)));
  token_shapes<result<lease_list_result>>::check(WITH_TOKEN(c.async_lease_leases(TOKEN)));
  token_shapes<result<watcher>>::check(WITH_TOKEN(c.async_watch("k", TOKEN)));
  token_shapes<result<watcher>>::check(WITH_TOKEN(c.async_watch("k", {.prefix = true}, TOKEN)));
  token_shapes<result<watch_batch>>::check(WITH_TOKEN(w.async_next(TOKEN)));
  token_shapes<lost>::check(WITH_TOKEN(ka.async_wait_lost(TOKEN)));

  // cluster and maintenance
  cluster members(c);
  token_shapes<result<member_list_result>>::check(WITH_TOKEN(members.async_member_list(TOKEN)));
  token_shapes<result<member_add_result>>::check(WITH_TOKEN(members.async_member_add({"http://h:2380"}, TOKEN)));
  token_shapes<result<member_add_result>>::check(WITH_TOKEN(members.async_member_add({"http://h:2380"}, true, TOKEN)));
  token_shapes<result<member_list_result>>::check(WITH_TOKEN(members.async_member_remove(1, TOKEN)));
  token_shapes<result<member_list_result>>::check(WITH_TOKEN(members.async_member_update(1, {"http://h:2380"}, TOKEN)));
  token_shapes<result<member_list_result>>::check(WITH_TOKEN(members.async_member_promote(1, TOKEN)));
  maintenance ops(c);
  token_shapes<result<endpoint_status>>::check(WITH_TOKEN(ops.async_status("h:2379", TOKEN)));
  token_shapes<result<endpoint_health>>::check(WITH_TOKEN(ops.async_health("h:2379", TOKEN)));
  token_shapes<result<alarm_result>>::check(WITH_TOKEN(ops.async_alarm_list(TOKEN)));
  token_shapes<result<alarm_result>>::check(WITH_TOKEN(ops.async_alarm_disarm(TOKEN)));
  token_shapes<result<alarm_result>>::check(WITH_TOKEN(ops.async_alarm_disarm(1, alarm_type::nospace, TOKEN)));
  token_shapes<result<response_header>>::check(WITH_TOKEN(ops.async_defragment("h:2379", TOKEN)));
  token_shapes<result<hash_kv_result>>::check(WITH_TOKEN(ops.async_hash_kv("h:2379", TOKEN)));
  token_shapes<result<hash_kv_result>>::check(WITH_TOKEN(ops.async_hash_kv("h:2379", 7, TOKEN)));
  token_shapes<result<response_header>>::check(WITH_TOKEN(ops.async_move_leader(1, TOKEN)));
  token_shapes<result<snapshot_result>>::check(WITH_TOKEN(ops.async_snapshot("db", TOKEN)));
  token_shapes<result<snapshot_result>>::check(WITH_TOKEN(ops.async_snapshot("db", {.endpoint = "h:2379"}, TOKEN)));
  snapshot_progress progress = [](std::uint64_t, std::uint64_t) {};
  token_shapes<result<snapshot_result>>::check(WITH_TOKEN(ops.async_snapshot("db", {}, progress, TOKEN)));

  // sessions and the lock family
  token_shapes<result<session>>::check(WITH_TOKEN(session::async_create(c, TOKEN)));
  token_shapes<result<session>>::check(WITH_TOKEN(session::async_create(c, {.ttl = 10s}, TOKEN)));
  token_shapes<lost>::check(WITH_TOKEN(s.async_wait_lost(TOKEN)));
  token_shapes<signal>::check(WITH_TOKEN(s.async_close(TOKEN)));
  token_shapes<result<mutex::hold>>::check(WITH_TOKEN(m.async_lock(TOKEN)));
  token_shapes<result<mutex::hold>>::check(WITH_TOKEN(m.async_try_lock(TOKEN)));
  token_shapes<signal>::check(WITH_TOKEN(mh.async_release(TOKEN)));
  token_shapes<lost>::check(WITH_TOKEN(mh.async_wait_lost(TOKEN)));
  token_shapes<result<rw_mutex::hold>>::check(WITH_TOKEN(rw.async_lock(TOKEN)));
  token_shapes<result<rw_mutex::hold>>::check(WITH_TOKEN(rw.async_try_lock(TOKEN)));
  token_shapes<signal>::check(WITH_TOKEN(wh.async_release(TOKEN)));
  token_shapes<lost>::check(WITH_TOKEN(wh.async_wait_lost(TOKEN)));
  token_shapes<result<rw_mutex::shared_hold>>::check(WITH_TOKEN(rw.async_lock_shared(TOKEN)));
  token_shapes<result<rw_mutex::shared_hold>>::check(WITH_TOKEN(rw.async_try_lock_shared(TOKEN)));
  token_shapes<signal>::check(WITH_TOKEN(rh.async_release(TOKEN)));
  token_shapes<lost>::check(WITH_TOKEN(rh.async_wait_lost(TOKEN)));
  token_shapes<result<semaphore::hold>>::check(WITH_TOKEN(sem.async_acquire(TOKEN)));
  token_shapes<result<semaphore::hold>>::check(WITH_TOKEN(sem.async_acquire(2, TOKEN)));
  token_shapes<result<semaphore::hold>>::check(WITH_TOKEN(sem.async_try_acquire(TOKEN)));
  token_shapes<result<semaphore::hold>>::check(WITH_TOKEN(sem.async_try_acquire(2, TOKEN)));
  token_shapes<signal>::check(WITH_TOKEN(ph.async_release(TOKEN)));
  token_shapes<lost>::check(WITH_TOKEN(ph.async_wait_lost(TOKEN)));
  token_shapes<result<multi_lock::hold>>::check(WITH_TOKEN(ml.async_lock(TOKEN)));
  token_shapes<result<multi_lock::hold>>::check(WITH_TOKEN(ml.async_try_lock(TOKEN)));
  token_shapes<signal>::check(WITH_TOKEN(mlh.async_release(TOKEN)));
  token_shapes<lost>::check(WITH_TOKEN(mlh.async_wait_lost(TOKEN)));
  token_shapes<result<lock_status>>::check(WITH_TOKEN(async_lock_status(c, "jobs", TOKEN)));

  // with_lock and stm: the token after the options, or alone; bodies that take the hold or not
  auto body = []() -> asio::awaitable<int> { co_return 1; };
  auto nothing = []() -> asio::awaitable<void> { co_return; };
  auto fenced = [](mutex::hold& h) -> asio::awaitable<int> { co_return h.fencing_token() > 0 ? 1 : 0; };
  auto fenced_writer = [](rw_mutex::hold& h) -> asio::awaitable<int> { co_return h.fencing_token() > 0 ? 1 : 0; };
  auto fenced_reader = [](rw_mutex::shared_hold& h) -> asio::awaitable<int> { co_return h.fencing_token() > 0 ? 1 : 0; };
  auto fenced_permits = [](semaphore::hold& h) -> asio::awaitable<int> { co_return static_cast<int>(h.permits()); };
  auto fenced_parts = [](multi_lock::hold& h) -> asio::awaitable<void> {
    (void)h.fence();
    co_return;
  };
  token_shapes<spawned<int>>::check(WITH_TOKEN(with_lock(m, body, TOKEN)));
  token_shapes<spawned<int>>::check(WITH_TOKEN(with_lock(m, body, {.max_hold = 1s}, TOKEN)));
  token_shapes<void(std::exception_ptr)>::check(WITH_TOKEN(with_lock(m, nothing, {}, TOKEN)));
  token_shapes<spawned<int>>::check(WITH_TOKEN(with_lock(m, fenced, TOKEN)));
  token_shapes<spawned<int>>::check(WITH_TOKEN(with_lock(m, fenced, {}, TOKEN)));
  token_shapes<spawned<int>>::check(WITH_TOKEN(with_lock(rw, body, TOKEN)));
  token_shapes<spawned<int>>::check(WITH_TOKEN(with_lock(rw, body, {}, TOKEN)));
  token_shapes<spawned<int>>::check(WITH_TOKEN(with_lock(rw, fenced_writer, TOKEN)));
  token_shapes<spawned<int>>::check(WITH_TOKEN(with_lock(ml, body, TOKEN)));
  token_shapes<spawned<int>>::check(WITH_TOKEN(with_lock(ml, body, {}, TOKEN)));
  token_shapes<void(std::exception_ptr)>::check(WITH_TOKEN(with_lock(ml, fenced_parts, TOKEN)));
  token_shapes<spawned<int>>::check(WITH_TOKEN(with_shared_lock(rw, body, TOKEN)));
  token_shapes<spawned<int>>::check(WITH_TOKEN(with_shared_lock(rw, body, {}, TOKEN)));
  token_shapes<spawned<int>>::check(WITH_TOKEN(with_shared_lock(rw, fenced_reader, TOKEN)));
  token_shapes<spawned<int>>::check(WITH_TOKEN(with_permits(sem, 2, body, TOKEN)));
  token_shapes<spawned<int>>::check(WITH_TOKEN(with_permits(sem, 2, body, {}, TOKEN)));
  token_shapes<spawned<int>>::check(WITH_TOKEN(with_permits(sem, 2, fenced_permits, TOKEN)));
  auto tx_body = [](stm_tx& tx) -> asio::awaitable<int> {
    auto v = co_await tx.get("k");
    co_return v ? 1 : 0;
  };
  token_shapes<spawned<int>>::check(WITH_TOKEN(stm(c, tx_body, TOKEN)));
  token_shapes<spawned<int>>::check(WITH_TOKEN(stm(c, tx_body, {.max_attempts = 3}, TOKEN)));

  // elections and leaders
  token_shapes<result<election::hold>>::check(WITH_TOKEN(el.async_campaign("me", TOKEN)));
  token_shapes<signal>::check(WITH_TOKEN(eh.async_proclaim("me again", TOKEN)));
  token_shapes<signal>::check(WITH_TOKEN(eh.async_release(TOKEN)));
  token_shapes<lost>::check(WITH_TOKEN(eh.async_wait_lost(TOKEN)));
  token_shapes<result<key_value>>::check(WITH_TOKEN(el.async_leader(TOKEN)));
  token_shapes<result<std::optional<key_value>>>::check(WITH_TOKEN(obs.async_next(TOKEN)));
  auto term_body = [](election::hold&) -> asio::awaitable<void> { co_return; };
  token_shapes<void(std::exception_ptr)>::check(WITH_TOKEN(ld.async_run(term_body, TOKEN)));
  token_shapes<result<leader_event>>::check(WITH_TOKEN(ld.async_next_event(TOKEN)));
  token_shapes<signal>::check(WITH_TOKEN(reg.async_run(TOKEN)));

  // recipes
  token_shapes<signal>::check(WITH_TOKEN(ca.async_wait_synced(TOKEN)));
  token_shapes<signal>::check(WITH_TOKEN(ca.async_wait_for(7, TOKEN)));
  token_shapes<result<cache_update>>::check(WITH_TOKEN(ca.async_next(TOKEN)));
  token_shapes<result<cache_update>>::check(WITH_TOKEN(cr.async_next(TOKEN)));
  token_shapes<result<std::int64_t>>::check(WITH_TOKEN(ctr.async_add(1, TOKEN)));
  token_shapes<void(error_code, bool, std::int64_t)>::check(WITH_TOKEN(ctr.async_compare_and_set(1, 0, TOKEN)));
  token_shapes<result<std::int64_t>>::check(WITH_TOKEN(ctr.async_get(TOKEN)));
  token_shapes<result<watcher>>::check(WITH_TOKEN(ctr.async_watch(TOKEN)));
  token_shapes<signal>::check(WITH_TOKEN(b.async_hold(TOKEN)));
  token_shapes<signal>::check(WITH_TOKEN(b.async_release(TOKEN)));
  token_shapes<signal>::check(WITH_TOKEN(b.async_wait(TOKEN)));
  token_shapes<signal>::check(WITH_TOKEN(db.async_enter(TOKEN)));
  token_shapes<signal>::check(WITH_TOKEN(db.async_leave(TOKEN)));
  token_shapes<result<std::string>>::check(WITH_TOKEN(q.async_enqueue("job", TOKEN)));
  token_shapes<result<std::string>>::check(WITH_TOKEN(q.async_dequeue(TOKEN)));
  token_shapes<result<std::string>>::check(WITH_TOKEN(pq.async_enqueue("job", 3, TOKEN)));
  token_shapes<result<std::string>>::check(WITH_TOKEN(pq.async_dequeue(TOKEN)));
}

/// The calls as README.md and docs/*.md write them (snippets and inline forms, with the names
/// they assume given here), in the hold API's spelling (docs/api-vocabulary.md, section 4: the
/// docs' snippets follow it). Compiled, never run.
[[maybe_unused]] asio::awaitable<void> as_the_docs_write_them(client& etcd, session& session, mutex& m,
                                                                rw_mutex& rw, semaphore& pool, std::int64_t id,
                                                                std::string endpoint, std::string path) {
  using namespace asio::experimental::awaitable_operators;
  client& client = etcd;
  asio::steady_timer timer(etcd.get_executor());

  // README.md
  co_await etcd.async_put("/config/mode", "fast", use_awaitable);
  auto got = co_await etcd.async_get("/config/", {.prefix = true}, use_awaitable);
  auto w = co_await etcd.async_watch("/config/", {.prefix = true}, use_awaitable);
  auto t = txn().when(compare::value("/config/mode") == "fast").then(txn_op::put("/config/mode", "safe"));
  co_await etcd.async_txn(t, use_awaitable);
  auto batch = co_await w.async_next(use_awaitable);

  // docs/client.md
  auto raced = co_await (etcd.async_get("k", use_awaitable) || timer.async_wait(use_awaitable));

  // docs/cache.md
  coetcd::cache config(client.get_executor(), client, "/config/");
  co_await config.async_wait_synced(use_awaitable);
  auto r = co_await client.async_put("/config/rate-limit", "200", use_awaitable);
  co_await config.async_wait_for(r.header.revision, use_awaitable);
  auto update = co_await config.async_next(use_awaitable);
  coetcd::cache_reader audit(config);
  auto audited = co_await audit.async_next(use_awaitable);

  // docs/coordination.md
  coetcd::leader scheduler(client, "services/scheduler", {.value = "10.0.0.1:9000", .ttl = 10s});
  auto body = [&](coetcd::election::hold& term) -> asio::awaitable<void> {
    auto write = coetcd::txn().when(term.fence()).then(coetcd::txn_op::put("jobs/next", "..."));
    co_await client.async_txn(write, use_awaitable);
    co_await timer.async_wait(use_awaitable);
  };
  co_await scheduler.async_run(body, use_awaitable);
  coetcd::registration self(client, coetcd::naming::key("services/api", "i1"),
                            coetcd::naming::encode({"10.0.0.1:8080", R"({"zone":"a"})"}), {.ttl = 10s});
  self.async_run(asio::detached);
  coetcd::cache view(client.get_executor(), client, "services/api/");
  co_await view.async_wait_synced(use_awaitable);
  coetcd::queue jobs(session, "jobs");
  co_await jobs.async_enqueue("resize:img-17", use_awaitable);
  auto job = co_await jobs.async_dequeue(use_awaitable);

  // docs/lock-family.md
  auto s = co_await coetcd::session::async_create(etcd, {.ttl = std::chrono::seconds(10)}, use_awaitable);
  auto held = co_await m.async_lock(use_awaitable);
  auto guarded = coetcd::txn().when(held.fence()).then(coetcd::txn_op::put("/jobs/state", "running"));
  co_await etcd.async_txn(guarded, use_awaitable);
  co_await held.async_release(use_awaitable);
  auto run_job = []() -> asio::awaitable<void> { co_return; };
  coetcd::with_lock_options limits{.max_hold = std::chrono::minutes(5)};
  co_await coetcd::with_lock(m, run_job, limits);
  auto [lock_ec, maybe] = co_await m.async_lock(asio::as_tuple(use_awaitable));
  auto why = co_await maybe.async_wait_lost(use_awaitable);
  auto counted = [&](coetcd::mutex::hold& h) -> asio::awaitable<std::int64_t> {
    auto write = coetcd::txn().when(h.fence()).then(coetcd::txn_op::put("/http_counter/value", "1"));
    auto r = co_await etcd.async_txn(write, use_awaitable);
    co_return r.succeeded ? 1 : 0;
  };
  auto value = co_await coetcd::with_lock(m, std::move(counted));
  co_await coetcd::with_lock(m, run_job);
  co_await coetcd::with_lock(m, run_job, {}, use_awaitable);
  boost::system::error_code release_error;
  coetcd::with_lock_options report{.release_error = &release_error};
  co_await coetcd::with_lock(m, run_job, report);
  auto reading = co_await rw.async_lock_shared(use_awaitable);
  auto cfg = co_await etcd.async_get("/config/value", use_awaitable);
  co_await reading.async_release(use_awaitable);
  auto update_config = [](coetcd::rw_mutex::hold& writing) -> asio::awaitable<void> {
    (void)writing.fence();
    co_return;
  };
  co_await coetcd::with_lock(rw, std::move(update_config));
  co_await coetcd::with_shared_lock(rw, run_job);
  auto slot = co_await pool.async_acquire(1, use_awaitable);
  co_await slot.async_release(use_awaitable);
  co_await coetcd::with_permits(pool, 2, run_job);
  coetcd::mutex a(session, "bank-lock/alice"), b(session, "bank-lock/bob");
  coetcd::multi_lock both({a, b});
  auto all = co_await both.async_lock(use_awaitable);
  auto transfer_txn = coetcd::txn().when(all.fence()).then(coetcd::txn_op::put("/bank/alice", "0"));
  co_await etcd.async_txn(transfer_txn, use_awaitable);
  co_await all.async_release(use_awaitable);
  coetcd::election e(session, "services/scheduler");
  auto lead = co_await e.async_campaign("10.0.0.1:9000", use_awaitable);
  auto tick = coetcd::txn().when(lead.fence()).then(coetcd::txn_op::put("scheduler/last-tick", "a"));
  co_await etcd.async_txn(tick, use_awaitable);
  co_await lead.async_proclaim("10.0.0.1:9000 (draining)", use_awaitable);
  co_await lead.async_release(use_awaitable);
  auto session_why = co_await session.async_wait_lost(use_awaitable);

  // docs/observability.md
  auto request = std::make_shared<const int>(1);
  auto traced = co_await m.async_lock(coetcd::with_span_context(request, asio::use_awaitable));
  co_await etcd.async_get("k", coetcd::with_span_context(request, asio::use_awaitable));
  co_await traced.async_release(asio::use_awaitable);
  auto status = co_await coetcd::async_lock_status(client, "jobs", use_awaitable);

  // docs/transactions.md
  auto transfer = [&](coetcd::stm_tx& tx) -> asio::awaitable<void> {
    auto from = std::stoll((co_await tx.get("/bank/alice")).value_or("0"));
    tx.put("/bank/alice", std::to_string(from - 1));
  };
  co_await coetcd::stm(client, transfer, {.level = coetcd::isolation::serializable_snapshot});
  co_await coetcd::stm(client, transfer, {}, use_awaitable);
  coetcd::counter hits(client, "/stats/hits");
  auto now = co_await hits.async_add(1, use_awaitable);
  auto [swapped, found] = co_await hits.async_compare_and_set(now, 0, use_awaitable);
  auto hit_watch = co_await hits.async_watch(use_awaitable);

  // docs/operations.md (its tables name the arguments; a coroutine adds use_awaitable)
  // (a braced list inside a co_await expression does not compile with g++ 12: name it first)
  coetcd::cluster members(etcd);
  std::vector<std::string> urls{"http://10.0.0.4:2380"};
  bool learner = true;
  co_await members.async_member_list(use_awaitable);
  co_await members.async_member_add(urls, learner, use_awaitable);
  co_await members.async_member_promote(id, use_awaitable);
  co_await members.async_member_remove(id, use_awaitable);
  co_await members.async_member_update(id, urls, use_awaitable);
  coetcd::maintenance ops(etcd);
  co_await ops.async_status(endpoint, use_awaitable);
  co_await ops.async_health(endpoint, use_awaitable);
  co_await ops.async_alarm_list(use_awaitable);
  co_await ops.async_alarm_disarm(id, alarm_type::nospace, use_awaitable);
  co_await ops.async_alarm_disarm(use_awaitable);
  co_await ops.async_defragment(endpoint, use_awaitable);
  co_await ops.async_hash_kv(endpoint, got.header.revision, use_awaitable);
  co_await ops.async_hash_kv(endpoint, use_awaitable);
  co_await ops.async_move_leader(id, use_awaitable);
  co_await ops.async_snapshot(path, {.endpoint = endpoint}, use_awaitable);
  coetcd::snapshot_progress progress = [](std::uint64_t, std::uint64_t) {};
  co_await ops.async_snapshot(path, {.endpoint = endpoint}, progress, use_awaitable);
  co_await etcd.async_compact(got.header.revision, true, use_awaitable);
  co_await etcd.async_sync_endpoints(use_awaitable);
  co_await etcd.async_get("", {.prefix = true}, use_awaitable);
  co_await etcd.async_delete("", {.prefix = true}, use_awaitable);
  co_await etcd.async_delete(std::string_view("\0", 1), {.from_key = true}, use_awaitable);
  co_await etcd.async_lease_time_to_live(id, true, use_awaitable);
}

// A prefix of defaulted parameters that would mislead has no token-only form: etcd disarms
// nothing for a member named with alarm_type::none.
template <class M>
concept disarm_by_member_alone = requires(M& m) { m.async_alarm_disarm(std::uint64_t{1}, use_awaitable); };
static_assert(!disarm_by_member_alone<maintenance>);

/// A client that connects nowhere (nothing listens on port 1), and counts the RPC attempts it
/// begins.
struct unconnected {
  asio::io_context ioc;
  std::vector<std::string> attempts;  // the gRPC method of each attempt begun
  client c{ioc, options()};

  client_options options() {
    client_options o;
    o.endpoints = {"127.0.0.1:1"};
    o.spans.on_start = [this](const span& s) { attempts.emplace_back(s.name); };
    return o;
  }
  // (a loop that ran out of work is stopped: restarted before each run)
  void run_for(std::chrono::milliseconds d) {
    ioc.restart();
    ioc.run_for(d);
  }
  template <class Done>
  bool run_until(Done done) {
    for (auto until = std::chrono::steady_clock::now() + 10s; !done() && std::chrono::steady_clock::now() < until;) {
      ioc.restart();
      if (ioc.run_one_for(50ms) == 0) std::this_thread::sleep_for(1ms);
    }
    return done();
  }
};

}  // namespace

// asio::deferred makes an operation object and starts nothing: no attempt begins until it is
// launched, and then it completes once, through the handler given at launch.
BOOST_AUTO_TEST_CASE(a_deferred_operation_starts_only_when_launched) {
  unconnected u;
  auto get = u.c.async_get("/shapes/k", asio::deferred);
  u.run_for(100ms);
  BOOST_TEST(u.attempts.empty());

  int calls = 0;
  error_code got;
  std::move(get)([&](error_code ec, get_result) {
    ++calls;
    got = ec;
  });
  BOOST_TEST(calls == 0);  // never inside the launch
  BOOST_TEST_REQUIRE(u.run_until([&] { return !u.attempts.empty(); }));
  BOOST_TEST(u.attempts.front() == "Range");
  u.c.close();
  BOOST_TEST_REQUIRE(u.run_until([&] { return calls > 0; }));
  BOOST_TEST(calls == 1);
  BOOST_TEST(got == error::client_closed);
}

// The token-only forms are the full operations with their defaults: disarming every alarm (member
// 0, no type) starts with listing them, and a hash at the latest revision (0) passes the
// revision check and reaches the endpoint's parsing.
BOOST_AUTO_TEST_CASE(token_only_forms_run_with_their_defaults) {
  unconnected u;
  maintenance ops(u.c);
  auto disarm = ops.async_alarm_disarm(asio::deferred);
  static_assert(std::is_same_v<asio::completion_signature_of_t<decltype(disarm)>, void(error_code, alarm_result)>);
  int calls = 0;
  std::move(disarm)([&](error_code, alarm_result) { ++calls; });
  BOOST_TEST_REQUIRE(u.run_until([&] { return !u.attempts.empty(); }));
  BOOST_TEST(u.attempts.front() == "Alarm");
  u.c.close();
  BOOST_TEST_REQUIRE(u.run_until([&] { return calls > 0; }));

  auto hash = ops.async_hash_kv("not an endpoint", asio::use_future);
  BOOST_TEST_REQUIRE(u.run_until([&] { return hash.wait_for(0s) == std::future_status::ready; }));
  try {
    hash.get();
    BOOST_ERROR("a hash from no endpoint succeeded");
  } catch (const boost::system::system_error& e) {
    BOOST_TEST(e.code() == error::invalid_endpoint, e.code().message());
  }
  error_code past;
  ops.async_hash_kv("not an endpoint", -1, [&](error_code ec, hash_kv_result) { past = ec; });
  BOOST_TEST_REQUIRE(u.run_until([&] { return past.failed(); }));
  BOOST_TEST(past == error::invalid_argument);  // what a wrong default would have met first
}
