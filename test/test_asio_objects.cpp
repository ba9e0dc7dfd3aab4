// Asio's rules for the objects, checked on each kind: moved-from objects and holds and move
// assignment (the client, cluster and maintenance handles, counter, double_barrier included),
// empty objects and holds completing never inline, a lock object destroyed with operations
// pending, accessors read from a thread pool, get_client() of a gone client, and with_lock's
// token form.
#define BOOST_TEST_MODULE coetcd_asio_objects
#include "support/fixture.hpp"

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/strand.hpp>

#include <coetcd/cluster.hpp>
#include <coetcd/counter.hpp>
#include <coetcd/double_barrier.hpp>
#include <coetcd/election_observer.hpp>
#include <coetcd/lease_keepalive.hpp>
#include <coetcd/maintenance.hpp>

#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <type_traits>
#include <vector>

using namespace coetcd;
using namespace coetcd::test;
using namespace std::chrono_literals;

BOOST_TEST_GLOBAL_FIXTURE(shared_etcd);

namespace {

/// The error a future of an operation completed with (asio::error::timed_out: none within 5 s).
template <class Future>
error_code code_of(Future f) {
  if (f.wait_for(5s) != std::future_status::ready) return make_error_code(asio::error::timed_out);
  try {
    f.get();
    return {};
  } catch (const boost::system::system_error& e) {
    return e.code();
  }
}

/// An empty hold `H` (what every acquisition hands back with an error) holds nothing, has no
/// executor and no fence, and answers its release and its loss wait with bad_descriptor.
template <class H>
void check_empty_hold(const char* what) {
  BOOST_TEST_CONTEXT(what) {
    H h;
    BOOST_TEST(!h);
    BOOST_TEST((h.get_executor() == typename H::executor_type()));
    error_code fenced;
    try {
      (void)h.fence();
    } catch (const boost::system::system_error& e) {
      fenced = e.code();
    }
    BOOST_TEST(fenced == asio::error::bad_descriptor, fenced.message());
    auto released = code_of(h.async_release(asio::use_future));
    BOOST_TEST(released == asio::error::bad_descriptor, released.message());
    auto lost = code_of(h.async_wait_lost(asio::use_future));
    BOOST_TEST(lost == asio::error::bad_descriptor, lost.message());
    // A moved-from hold is empty too.
    H other(std::move(h));
    auto again = code_of(h.async_release(asio::use_future));
    BOOST_TEST(again == asio::error::bad_descriptor, again.message());
  }
}

}  // namespace

// A moved-from object is empty, not broken: accessors give empty values, operations complete
// with asio::error::bad_descriptor (as an Asio object's on a closed one), posted, and hand over
// an empty hold. Move assignment of a lock object leaves the holds taken through it alone (they
// are not the object's); move assignment of a hold gives up what the target held, as its
// destructor would, and takes the other's hold.
BOOST_AUTO_TEST_CASE(moved_from_objects_are_empty_and_move_assignment_releases) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, use_awaitable);
    mutex a(s, "/rules/moved-a"), b(s, "/rules/moved-b");
    rw_mutex rw(s, "/rules/moved-rw");
    semaphore sem(s, "/rules/moved-sem", 1);
    election e(s, "/rules/moved-e");
    election_observer obs(c, "/rules/moved-e");
    mutex a2(std::move(a));
    rw_mutex rw2(std::move(rw));
    semaphore sem2(std::move(sem));
    election e2(std::move(e));
    election_observer obs2(std::move(obs));
    BOOST_TEST(a.name().empty());
    BOOST_TEST(a.key().empty());
    BOOST_TEST((a.get_executor() == nullptr));
    BOOST_TEST(rw.name().empty());
    BOOST_TEST(rw.write_key().empty());
    BOOST_TEST(sem.name().empty());
    BOOST_TEST(sem.permits() == 0);
    BOOST_TEST(e.name().empty());
    BOOST_TEST(e.key().empty());
    auto no_throw = asio::as_tuple(use_awaitable);
    auto [r1, h1] = co_await a.async_lock(no_throw);
    BOOST_TEST(r1 == asio::error::bad_descriptor, r1.message());
    BOOST_TEST(!h1);
    auto [r2, h2] = co_await rw.async_lock_shared(no_throw);
    BOOST_TEST(r2 == asio::error::bad_descriptor, r2.message());
    BOOST_TEST(!h2);
    auto [r3, h3] = co_await sem.async_acquire(1, no_throw);
    BOOST_TEST(r3 == asio::error::bad_descriptor, r3.message());
    BOOST_TEST(!h3);
    auto [r4, h4] = co_await e.async_campaign("v", no_throw);
    BOOST_TEST(r4 == asio::error::bad_descriptor, r4.message());
    BOOST_TEST(!h4);
    auto [r5, v5] = co_await obs.async_next(no_throw);
    BOOST_TEST(r5 == asio::error::bad_descriptor, r5.message());

    // A moved-from hold is empty: no token, key or sequence, no fence, and its release is
    // bad_descriptor; the hold moved into holds.
    auto first = co_await a2.async_lock(use_awaitable);
    const auto key = first.key();
    auto held = std::move(first);
    BOOST_TEST(!first);
    BOOST_TEST(first.fencing_token() == 0);
    BOOST_TEST(first.key().empty());
    BOOST_TEST(first.local_sequence() == 0u);
    BOOST_TEST((first.get_executor() == nullptr));
    BOOST_CHECK_THROW(first.fence(), boost::system::system_error);
    auto [r6] = co_await first.async_release(no_throw);
    BOOST_TEST(r6 == asio::error::bad_descriptor, r6.message());
    BOOST_TEST(bool(held));
    BOOST_TEST(held.key() == key);
    BOOST_TEST(held.fencing_token() > 0);

    // Move assignment onto a mutex whose hold is out: the hold stays.
    a2 = std::move(b);
    BOOST_TEST(a2.name() == "/rules/moved-b");
    co_await sleep_for(200ms);
    BOOST_TEST(bool(held));
    BOOST_TEST(co_await count_keys(c, "/rules/moved-a/") == 1, "assigning over the mutex released its hold");

    // Move assignment onto a hold that holds: its lock goes, as on destruction.
    auto other = co_await a2.async_lock(use_awaitable);
    held = std::move(other);
    BOOST_TEST(!other);
    BOOST_TEST(bool(held));
    BOOST_TEST(held.key() == a2.key());
    BOOST_TEST(co_await settled_keys(c, "/rules/moved-a/", 0) == 0, "the assigned-over hold's lock was not released");
    BOOST_TEST(co_await count_keys(c, "/rules/moved-b/") == 1);
    co_await held.async_release(use_awaitable);
    co_await s.async_close(use_awaitable);
  }(c));
}

// A moved-from client is empty, as the other objects: its accessors give empty values and its
// operations, and those of a cluster or maintenance handle made from it, complete with
// bad_descriptor, posted (each dereferenced a null state before). The handles' get_executor()
// is the client's.
BOOST_AUTO_TEST_CASE(a_moved_from_client_is_empty_and_its_operations_answer_bad_descriptor) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  client taken(std::move(c));
  BOOST_TEST((c.get_executor() == nullptr));
  BOOST_TEST((taken.get_executor() == asio::any_io_executor(ioc.get_executor())));
  BOOST_TEST(c.options().endpoints.empty());
  BOOST_TEST((taken.options().endpoints == options_for(server()).endpoints));
  BOOST_TEST(c.endpoints().empty());
  BOOST_TEST(c.stats().rpcs.empty());
  BOOST_TEST(!c.keep_alive(1));
  cluster members(c), live_members(taken);
  maintenance ops(c), live_ops(taken);
  BOOST_TEST((members.get_executor() == nullptr));
  BOOST_TEST((ops.get_executor() == nullptr));
  BOOST_TEST((live_members.get_executor() == taken.get_executor()));
  BOOST_TEST((live_ops.get_executor() == taken.get_executor()));

  std::vector<error_code> got;  // only touched on ioc's thread (the handlers are bound to it)
  std::size_t started = 0;
  int done_after_initiating = -1;
  auto record = [&got](error_code ec, auto&&...) { got.push_back(ec); };
  // Initiated from a handler that ioc runs: a dispatch would run the handler inside the call.
  asio::post(ioc, [&] {
    auto r = [&] {
      ++started;
      return asio::bind_executor(ioc, record);
    };
    c.async_get("/rules/empty-client", r());
    c.async_put("/rules/empty-client", "v", r());
    c.async_delete("/rules/empty-client", r());
    c.async_txn(txn().then(txn_op::get("/rules/empty-client")), r());
    c.async_compact(1, r());
    c.async_lease_grant(std::chrono::seconds(10), r());
    c.async_lease_revoke(1, r());
    c.async_lease_time_to_live(1, r());
    c.async_lease_leases(r());
    c.async_watch("/rules/empty-client", r());
    c.async_sync_endpoints(r());
    members.async_member_list(r());
    ops.async_status(server().endpoint(), r());
    ops.async_move_leader(1, r());
    done_after_initiating = static_cast<int>(got.size());
  });
  const auto until = std::chrono::steady_clock::now() + 10s;
  while ((started == 0 || got.size() < started) && std::chrono::steady_clock::now() < until) {
    if (ioc.stopped()) ioc.restart();
    ioc.run_one_for(50ms);
  }
  BOOST_TEST(done_after_initiating == 0, "an empty client completed inside its initiating function");
  BOOST_TEST(got.size() == started);
  for (auto& ec : got) BOOST_TEST(ec == asio::error::bad_descriptor, ec.message());
}

// counter: move-only (a copy shared the batch and the hint, and could not abort the other's
// operations), made from the client's state rather than a client& that moving the client left
// dangling, and refusing an empty key or an empty client when made, as the other recipes.
static_assert(!std::is_copy_constructible_v<counter> && !std::is_copy_assignable_v<counter>);
static_assert(std::is_nothrow_move_constructible_v<counter> && std::is_nothrow_move_assignable_v<counter>);

BOOST_AUTO_TEST_CASE(a_counter_outlives_a_client_move_and_a_moved_from_one_is_empty) {
  asio::io_context ioc;
  std::optional<client> first(std::in_place, ioc, options_for(server()));
  counter ctr(*first, "/rules/moved-counter");
  client c(std::move(*first));
  first.reset();  // the client object the counter was made from is gone
  BOOST_TEST((ctr.get_executor() == c.get_executor()));
  auto make = [](client& from, std::string key) { counter made(from, std::move(key)); };
  auto code_is = [](error e) {
    return [e](const boost::system::system_error& x) { return x.code() == e; };
  };
  BOOST_CHECK_EXCEPTION(make(c, ""), boost::system::system_error, code_is(error::empty_key));
  client live(std::move(c));  // `c` is empty now
  BOOST_CHECK_EXCEPTION(make(c, "/rules/k"), boost::system::system_error, code_is(error::client_closed));
  run_for(ioc, [](client& c, counter& ctr) -> asio::awaitable<void> {
    co_await c.async_delete("/rules/moved-counter", use_awaitable);
    BOOST_TEST(co_await ctr.async_add(2, use_awaitable) == 2);
    counter taken(std::move(ctr));
    BOOST_TEST(ctr.key().empty());
    BOOST_TEST((ctr.get_executor() == nullptr));
    auto no_throw = asio::as_tuple(use_awaitable);
    auto [e1, v1] = co_await ctr.async_add(1, no_throw);
    BOOST_TEST(e1 == asio::error::bad_descriptor, e1.message());
    auto [e2, v2] = co_await ctr.async_get(no_throw);
    BOOST_TEST(e2 == asio::error::bad_descriptor, e2.message());
    auto [e3, w3] = co_await ctr.async_watch(no_throw);
    BOOST_TEST(e3 == asio::error::bad_descriptor, e3.message());
    BOOST_TEST(co_await taken.async_get(use_awaitable) == 2);

    // double_barrier: the client's executor, none when moved from.
    auto s = co_await session::async_create(c, use_awaitable);
    double_barrier db(s, "/rules/moved-db", 2);
    BOOST_TEST((db.get_executor() == c.get_executor()));
    double_barrier db2(std::move(db));
    BOOST_TEST((db.get_executor() == nullptr));
    BOOST_TEST((db2.get_executor() == c.get_executor()));
    auto [e4] = co_await db.async_enter(no_throw);
    BOOST_TEST(e4 == asio::error::bad_descriptor, e4.message());
    co_await s.async_close(use_awaitable);
  }(live, ctr));
}

// Never inline: an empty object (default-constructed or moved from) has no executor of its own,
// so its operations complete through the handler's associated executor, after the initiating
// function has returned.
BOOST_AUTO_TEST_CASE(empty_objects_complete_on_the_handlers_executor_never_inline) {
  asio::io_context ioc;
  std::atomic<int> done{0};
  std::vector<error_code> got;  // only touched on ioc's thread (the handlers are bound to it)
  auto record = [&](error_code ec, auto&&...) {
    ++done;
    got.push_back(ec);
  };
  watcher w;
  session s;
  lease_keepalive k;
  mutex::hold mh;
  rw_mutex::shared_hold rh;
  semaphore::hold ph;
  multi_lock::hold all;
  election::hold lead;
  int done_after_initiating = -1;
  // Initiated from a handler that ioc runs: a dispatch to the handler's executor would run the
  // handler right there, inside the initiating function.
  asio::post(ioc, [&] {
    w.async_next(asio::bind_executor(ioc, record));
    s.async_wait_lost(asio::bind_executor(ioc, record));
    s.async_close(asio::bind_executor(ioc, record));
    k.async_wait_lost(asio::bind_executor(ioc, record));
    mh.async_release(asio::bind_executor(ioc, record));
    mh.async_wait_lost(asio::bind_executor(ioc, record));
    rh.async_release(asio::bind_executor(ioc, record));
    ph.async_wait_lost(asio::bind_executor(ioc, record));
    all.async_release(asio::bind_executor(ioc, record));
    lead.async_proclaim("v", asio::bind_executor(ioc, record));
    lead.async_wait_lost(asio::bind_executor(ioc, record));
    done_after_initiating = done;
  });
  ioc.run();
  BOOST_TEST(done_after_initiating == 0, "an empty object completed inside its initiating function");
  BOOST_TEST(done == 11);
  // An empty watcher's next is watch_canceled (its watch is over); every other operation on
  // nothing, an empty session's close included, is bad_descriptor, as Asio's closed objects answer.
  const auto bad = make_error_code(asio::error::bad_descriptor);
  std::multiset<error_code> want{make_error_code(error::watch_canceled), bad, bad, bad,
                                 bad, bad, bad, bad, bad, bad, bad};
  BOOST_TEST((std::multiset<error_code>(got.begin(), got.end()) == want));
}

// Destroying a lock object aborts its pending operations at once (operation_aborted), as
// destroying an Asio object does, instead of when their turn comes. The waiting key goes at once
// when the callers could be cancelled (a handler with a cancellation slot, as every coroutine
// has); a caller nobody could cancel had its txn awaited without an abandonable side task, so
// its key goes when its turn comes.
BOOST_AUTO_TEST_CASE(destroying_a_mutex_aborts_its_pending_locks_at_once) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    for (bool with_slot : {true, false}) {
      auto hs = co_await session::async_create(c, use_awaitable);
      auto ws = co_await session::async_create(c, use_awaitable);
      mutex held(hs, "/rules/destroyed");
      auto holding = co_await held.async_lock(use_awaitable);
      std::vector<error_code> results;
      int handed_over = 0;  // holds that came with the aborts
      asio::cancellation_signal unused[3];
      auto waiting = std::make_unique<mutex>(ws, "/rules/destroyed");
      for (auto& sig : unused) {
        auto record = [&results, &handed_over](error_code ec, mutex::hold h) {
          results.push_back(ec);
          handed_over += bool(h);
        };
        if (with_slot) waiting->async_lock(asio::bind_cancellation_slot(sig.slot(), record));
        else waiting->async_lock(record);
      }
      // Queued behind `held`: two keys on the server.
      BOOST_TEST_REQUIRE(co_await settled_keys(c, "/rules/destroyed/", 2) == 2);
      waiting.reset();
      co_await eventually([&] { return results.size() == 3u; }, 1000ms);  // the turn never comes meanwhile
      BOOST_TEST(results.size() == 3u, "pending locks did not complete when their mutex was destroyed");
      for (auto& ec : results) BOOST_TEST(ec == asio::error::operation_aborted, ec.message());
      BOOST_TEST(handed_over == 0);
      if (with_slot)
        BOOST_TEST(co_await settled_keys(c, "/rules/destroyed/", 1) == 1, "the destroyed mutex's waiting key is still there");
      co_await holding.async_release(use_awaitable);
      // Its turn: a key nobody waits on is released.
      BOOST_TEST(co_await settled_keys(c, "/rules/destroyed/", 0) == 0, "a key of the destroyed mutex outlived its turn");
      co_await hs.async_close(use_awaitable);
      co_await ws.async_close(use_awaitable);
    }
  }(c));
}

// Every hold type, empty: no server is needed, since an empty hold has nothing to ask it.
BOOST_AUTO_TEST_CASE(an_empty_hold_answers_bad_descriptor) {
  check_empty_hold<mutex::hold>("mutex::hold");
  check_empty_hold<rw_mutex::hold>("rw_mutex::hold");
  check_empty_hold<rw_mutex::shared_hold>("rw_mutex::shared_hold");
  check_empty_hold<semaphore::hold>("semaphore::hold");
  check_empty_hold<multi_lock::hold>("multi_lock::hold");
  check_empty_hold<election::hold>("election::hold");
  election::hold none;
  auto proclaimed = code_of(none.async_proclaim("v", asio::use_future));
  BOOST_TEST(proclaimed == asio::error::bad_descriptor, proclaimed.message());
  BOOST_TEST(none.fencing_token() == 0);
}

// A pool: the io_context runs on 4 threads, and 8 callers of one mutex, each a coroutine on a
// strand of its own (as with_lock's `||` needs), lock it through with_lock and read the hold's
// accessors inside while the client's strand, on another thread, writes them. Exclusion holds,
// every accessor says the hold is held, each hold has a sequence of its own, and ThreadSanitizer
// (COETCD_TEST_BUILDS=clang-tsan scripts/test) reports no race.
BOOST_AUTO_TEST_CASE(callers_on_a_thread_pool_read_the_accessors_safely) {
  asio::io_context ioc(4);
  client c(ioc.get_executor(), options_for(server()));
  std::atomic<int> inside{0}, overlaps{0}, sections{0}, wrong{0}, errors{0};
  std::atomic<int> finished{0};
  constexpr int callers = 8, rounds = 25;
  session s;
  std::promise<void> ready;
  session::async_create(c, [&](error_code ec, session made) {
    if (ec) ++errors;
    s = std::move(made);
    ready.set_value();
  });
  std::vector<std::thread> pool;
  auto guard = asio::make_work_guard(ioc);
  for (int i = 0; i < 4; ++i) pool.emplace_back([&] { ioc.run(); });
  ready.get_future().wait();
  BOOST_TEST_REQUIRE(s.lease() != 0);
  mutex m(s, "/rules/pool");
  std::mutex seen_mutex;
  std::set<std::uint64_t> seen;  // the holds' local sequences
  for (int i = 0; i < callers; ++i)
    asio::co_spawn(asio::make_strand(ioc), [&]() -> asio::awaitable<void> {
      for (int r = 0; r < rounds; ++r) {
        co_await with_lock(m, [&](mutex::hold& h) -> asio::awaitable<void> {
          if (inside.fetch_add(1) != 0) ++overlaps;
          ++sections;
          // Reads race with the strand's writes unless they are atomics.
          if (!h || h.fencing_token() <= 0 || h.local_sequence() == 0 || h.header().revision <= 0 || s.lost() ||
              h.key() != m.key())
            ++wrong;
          (void)h.fence();
          {
            std::lock_guard<std::mutex> lock(seen_mutex);
            if (!seen.insert(h.local_sequence()).second) ++wrong;  // another caller's hold showed here
          }
          co_await asio::post(co_await asio::this_coro::executor, use_awaitable);  // yield while holding
          inside.fetch_sub(1);
        });
      }
    }, [&](std::exception_ptr e) {
      if (e) ++errors;
      ++finished;
    });
  const auto until = std::chrono::steady_clock::now() + 60s;
  while (finished < callers && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(10ms);
  BOOST_TEST(finished == callers);
  BOOST_TEST(sections == callers * rounds);
  BOOST_TEST(overlaps == 0);
  BOOST_TEST(wrong == 0);
  BOOST_TEST(errors == 0);
  BOOST_TEST(seen.size() == static_cast<std::size_t>(callers * rounds));
  std::promise<void> closed;
  s.async_close([&](error_code) { closed.set_value(); });
  closed.get_future().wait_for(10s);
  c.close();
  guard.reset();
  ioc.stop();
  for (auto& t : pool) t.join();
}

// session::get_client() once the client object is gone, or of an empty session: a clear error,
// not a dangling reference.
BOOST_AUTO_TEST_CASE(get_client_of_a_session_whose_client_is_gone_throws) {
  asio::io_context ioc;
  session s;
  BOOST_CHECK_THROW(s.get_client(), boost::system::system_error);
  {
    client c(ioc, options_for(server()));
    run_for(ioc, [](client& c, session& s) -> asio::awaitable<void> {
      s = co_await session::async_create(c, use_awaitable);
      BOOST_TEST(&s.get_client() == &c);
    }(c, s));
  }
  try {
    s.get_client();
    BOOST_TEST(false, "no error for a gone client");
  } catch (const boost::system::system_error& e) {
    BOOST_TEST(e.code() == error::client_closed, e.code().message());
  }
}

// with_lock with a completion token, started from code that is no coroutine: a callback gets the
// body's value, a future rethrows the body's exception, a cancelled callback gets
// operation_aborted once the body has stopped; the body runs under the lock and the lock is
// released each time.
BOOST_AUTO_TEST_CASE(with_lock_takes_a_completion_token) {
  static_assert(std::is_same_v<decltype(with_lock(std::declval<mutex&>(), [] { return asio::awaitable<int>(); }, {},
                                                  asio::use_future)),
                               std::future<int>>);
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  auto guard = asio::make_work_guard(ioc);
  std::thread loop([&] { ioc.run(); });
  auto s = session::async_create(c, asio::use_future).get();
  mutex m(s, "/rules/with-lock");

  std::promise<std::pair<std::exception_ptr, int>> called;
  auto body = [](mutex::hold& h) -> asio::awaitable<int> { co_return h ? 42 : -1; };
  with_lock(m, std::move(body), {}, [&called](std::exception_ptr e, int v) { called.set_value({e, v}); });
  auto result = called.get_future();
  BOOST_TEST_REQUIRE((result.wait_for(10s) == std::future_status::ready));
  auto [e, v] = result.get();
  BOOST_TEST(!e);
  BOOST_TEST(v == 42, "the body did not run under the lock");

  auto failing = []() -> asio::awaitable<void> {
    throw std::runtime_error("body failed");
    co_return;
  };
  auto thrown = with_lock(m, std::move(failing), {}, asio::use_future);
  BOOST_TEST_REQUIRE((thrown.wait_for(10s) == std::future_status::ready));
  BOOST_CHECK_THROW(thrown.get(), std::runtime_error);

  asio::cancellation_signal stop;
  std::promise<std::exception_ptr> cancelled;
  std::atomic<bool> holding{false};
  auto sleeper = [&holding]() -> asio::awaitable<void> {
    holding = true;
    co_await sleep_for(30s);
  };
  const auto t0 = std::chrono::steady_clock::now();
  with_lock(m, std::move(sleeper), {},
            asio::bind_cancellation_slot(stop.slot(), [&cancelled](std::exception_ptr e) { cancelled.set_value(e); }));
  // The cancel is for the body, not the lock wait: it goes once the body holds the lock.
  for (int i = 0; i < 1000 && !holding; ++i) std::this_thread::sleep_for(10ms);
  BOOST_TEST_REQUIRE(holding.load());
  asio::post(ioc, [&stop] { stop.emit(asio::cancellation_type::terminal); });
  auto outcome = cancelled.get_future();
  BOOST_TEST_REQUIRE((outcome.wait_for(10s) == std::future_status::ready), "a cancelled with_lock did not complete");
  error_code why;
  try {
    if (auto ex = outcome.get()) std::rethrow_exception(ex);
  } catch (const boost::system::system_error& se) {
    why = se.code();
  }
  BOOST_TEST(why == asio::error::operation_aborted, why.message());
  BOOST_TEST((std::chrono::steady_clock::now() - t0 < 5s));

  BOOST_TEST(asio::co_spawn(ioc, count_keys(c, "/rules/with-lock/"), asio::use_future).get() == 0);
  s.async_close(asio::use_future).get();
  c.close();
  guard.reset();
  loop.join();
}

// A release that fails after the body returned is reported through release_error, not thrown: the
// body's value stands. The server is paused as the body ends, so the delete runs out of time;
// once it resumes the background retry removes the key. A release that succeeds clears it.
BOOST_AUTO_TEST_CASE(a_failed_release_is_reported_and_the_bodys_value_kept) {
  etcd_process etcd;
  asio::io_context ioc;
  auto o = options_for(etcd);
  o.request_timeout = 1s;
  client c(ioc, o);
  run_for(ioc, [](client& c, etcd_process& etcd) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, session_options{.ttl = 30s}, use_awaitable);
    mutex m(s, "/rules/release");
    error_code released = make_error_code(error::locked);
    auto fine = []() -> asio::awaitable<int> { co_return 1; };
    const with_lock_options report{.release_error = &released};
    BOOST_TEST(co_await with_lock(m, std::move(fine), report) == 1);
    BOOST_TEST(!released, "a release that succeeded left " << released.message());

    auto pausing = [&etcd]() -> asio::awaitable<int> {
      etcd.pause();
      co_return 7;
    };
    int v = 0;
    try {
      v = co_await with_lock(m, std::move(pausing), report);
    } catch (const std::exception& e) {
      BOOST_TEST(false, "with_lock threw after its body returned: " << e.what());
    }
    etcd.resume();
    BOOST_TEST(v == 7);
    BOOST_TEST(static_cast<bool>(released), "a release against a paused server reported no error");
    BOOST_TEST(co_await settled_keys(c, "/rules/release/", 0) == 0, "the background retry did not delete the key");
    co_await s.async_close(use_awaitable);
  }(c, etcd));
}
