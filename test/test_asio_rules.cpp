// Asio's rules for initiating functions, checked on every kind of operation: move-only handlers,
// the handler's executor, outstanding work, allocators, cancellation types (objects' lifetimes,
// empty objects and holds, threads and with_lock's token form: test_asio_objects.cpp).
#define BOOST_TEST_MODULE coetcd_asio_rules
#include "support/fixture.hpp"

#include <boost/asio/bind_allocator.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/strand.hpp>

#include <coetcd/barrier.hpp>
#include <coetcd/counter.hpp>
#include <coetcd/double_barrier.hpp>
#include <coetcd/election_observer.hpp>
#include <coetcd/lease_keepalive.hpp>
#include <coetcd/lock_status.hpp>
#include <coetcd/registration.hpp>

#include <future>
#include <list>
#include <set>
#include <memory>

using namespace coetcd;
using namespace coetcd::test;
using namespace std::chrono_literals;

BOOST_TEST_GLOBAL_FIXTURE(shared_etcd);

namespace {

/// A completion handler that can only be moved (it owns a unique_ptr), as Asio allows: each
/// initiating function must move it through to its completion. Counts its calls and errors.
struct tally {
  int done = 0;
  std::vector<std::string> errors;
};

template <class... Results>
auto move_only(tally& t, const char* what) {
  return [&t, what, owned = std::make_unique<int>(1)](error_code ec, Results...) {
    BOOST_TEST(*owned == 1);
    ++t.done;
    if (ec) t.errors.push_back(std::string(what) + ": " + ec.message());
  };
}

/// move_only for an operation that hands over a hold (or another result): kept in `into`, since a
/// hold dropped by its handler is released at once.
template <class T>
auto move_only_into(tally& t, const char* what, T& into) {
  return [&t, &into, what, owned = std::make_unique<int>(1)](error_code ec, T got) {
    BOOST_TEST(*owned == 1);
    ++t.done;
    if (ec) t.errors.push_back(std::string(what) + ": " + ec.message());
    into = std::move(got);
  };
}

// A call without a token: compiles only where the executor gives a default (not Asio 1.81's
// any_io_executor), so a forgotten token cannot become an operation nobody starts.
template <class Client>
concept put_without_token = requires(Client& c) { c.async_put("k", "v"); };
template <class Mutex>
concept lock_without_token = requires(Mutex& m) { m.async_lock(); };
static_assert(!std::is_void_v<detail::default_token> || !put_without_token<client>);
static_assert(!std::is_void_v<detail::default_token> || !lock_without_token<mutex>);
static_assert(put_without_token<client> == !std::is_void_v<detail::default_token>);

}  // namespace

// Every initiating function takes a move-only callback and calls it once. Each operation runs
// alone (the loop runs until its handler has been called), so each must succeed, but for the
// waits that end with the session.
BOOST_AUTO_TEST_CASE(every_operation_accepts_a_move_only_handler) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  tally t;
  int expected = 0;
  auto settle = [&] {
    ++expected;
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (t.done < expected && std::chrono::steady_clock::now() < until) {
      if (ioc.stopped()) ioc.restart();
      ioc.run_one_for(100ms);
    }
    BOOST_TEST_REQUIRE(t.done == expected, "operation " << expected << " did not complete");
  };

  c.async_put("/rules/k", "v", move_only<put_result>(t, "put")), settle();
  c.async_put("/rules/k", "v", put_options{}, move_only<put_result>(t, "put with options")), settle();
  c.async_get("/rules/k", move_only<get_result>(t, "get")), settle();
  c.async_get("/rules/k", get_options{}, move_only<get_result>(t, "get with options")), settle();
  c.async_txn(txn().then(txn_op::get("/rules/k")), move_only<txn_result>(t, "txn")), settle();
  lease_grant_result lease;
  c.async_lease_grant(std::chrono::seconds(10), [&, owned = std::make_unique<int>(1)](error_code ec, lease_grant_result r) {
    ++t.done;
    if (ec) t.errors.push_back("lease_grant: " + ec.message());
    lease = r;
  }), settle();
  c.async_lease_time_to_live(lease.id, move_only<lease_ttl_result>(t, "lease_time_to_live")), settle();
  c.async_lease_leases(move_only<lease_list_result>(t, "lease_leases")), settle();
  c.async_lease_revoke(lease.id, move_only<response_header>(t, "lease_revoke")), settle();
  async_lock_status(c, "/rules/lock", move_only<lock_status>(t, "lock_status")), settle();
  watcher w;
  c.async_watch("/rules/w", [&, owned = std::make_unique<int>(1)](error_code ec, watcher made) {
    ++t.done;
    if (ec) t.errors.push_back("watch: " + ec.message());
    w = std::move(made);
  }), settle();
  c.async_put("/rules/w", "v", move_only<put_result>(t, "put for the watch")), settle();
  w.async_next(move_only<watch_batch>(t, "watcher next")), settle();

  session s;
  session::async_create(c, session_options{.ttl = 10s}, [&, owned = std::make_unique<int>(1)](error_code ec, session made) {
    ++t.done;
    if (ec) t.errors.push_back("session: " + ec.message());
    s = std::move(made);
  }), settle();
  BOOST_TEST_REQUIRE((s.lease() != 0));
  mutex m(s, "/rules/mutex");
  rw_mutex rw(s, "/rules/rw"), readers(s, "/rules/rw-readers");
  semaphore sem(s, "/rules/sem", 2);
  mutex a(s, "/rules/a"), b(s, "/rules/b");
  multi_lock both({a, b});
  election e(s, "/rules/election");
  election_observer obs(c, "/rules/election");
  mutex::hold mh;
  rw_mutex::hold wh;
  rw_mutex::shared_hold rh;
  semaphore::hold ph;
  multi_lock::hold all;
  election::hold lead;
  m.async_lock(move_only_into(t, "mutex lock", mh)), settle();
  mh.async_release(move_only<>(t, "mutex release")), settle();
  m.async_try_lock(move_only_into(t, "mutex try_lock", mh)), settle();
  mh.async_release(move_only<>(t, "mutex release after try")), settle();
  rw.async_lock(move_only_into(t, "rw lock", wh)), settle();
  wh.async_release(move_only<>(t, "rw release")), settle();
  rw.async_try_lock(move_only_into(t, "rw try_lock", wh)), settle();
  wh.async_release(move_only<>(t, "rw release after try")), settle();
  rw.async_lock_shared(move_only_into(t, "rw lock_shared", rh)), settle();
  rh.async_release(move_only<>(t, "rw shared release")), settle();
  rw.async_try_lock_shared(move_only_into(t, "rw try_lock_shared", rh)), settle();
  rh.async_release(move_only<>(t, "rw shared release after try")), settle();
  sem.async_acquire(1, move_only_into(t, "sem acquire", ph)), settle();
  ph.async_release(move_only<>(t, "sem release")), settle();
  sem.async_try_acquire(1, move_only_into(t, "sem try_acquire", ph)), settle();
  ph.async_release(move_only<>(t, "sem release after try")), settle();
  both.async_lock(move_only_into(t, "multi_lock lock", all)), settle();
  all.async_release(move_only<>(t, "multi_lock release")), settle();
  both.async_try_lock(move_only_into(t, "multi_lock try_lock", all)), settle();
  all.async_release(move_only<>(t, "multi_lock release after try")), settle();
  e.async_campaign("v", move_only_into(t, "campaign", lead)), settle();
  lead.async_proclaim("w", move_only<>(t, "proclaim")), settle();
  e.async_leader(move_only<key_value>(t, "leader")), settle();
  obs.async_next(move_only<std::optional<key_value>>(t, "observer next")), settle();
  lead.async_release(move_only<>(t, "resign")), settle();
  const auto errors = t.errors.size();

  // Waits that end with the session. A hold's loss wait succeeds when the session it is held
  // under is closed (session_ended); the session's own completes with operation_aborted, since
  // its owner ended it.
  m.async_lock(move_only_into(t, "mutex lock before the close", mh)), settle();
  rw.async_lock(move_only_into(t, "rw lock before the close", wh)), settle();
  readers.async_lock_shared(move_only_into(t, "rw lock_shared before the close", rh)), settle();
  sem.async_acquire(2, move_only_into(t, "sem acquire before the close", ph)), settle();
  both.async_lock(move_only_into(t, "multi_lock lock before the close", all)), settle();
  e.async_campaign("v", move_only_into(t, "campaign before the close", lead)), settle();
  struct ended {
    std::string what;
    error_code ec;
    std::optional<loss_reason> reason;
  };
  std::vector<ended> ends;
  auto end_of = [&ends](const char* what) {
    return [&ends, what, owned = std::make_unique<int>(1)](error_code ec, loss_reason r) {
      ends.push_back({what, ec, ec ? std::nullopt : std::optional<loss_reason>(r)});
    };
  };
  mh.async_wait_lost(end_of("mutex hold"));
  wh.async_wait_lost(end_of("rw hold"));
  rh.async_wait_lost(end_of("rw shared hold"));
  ph.async_wait_lost(end_of("semaphore hold"));
  all.async_wait_lost(end_of("multi_lock hold"));
  lead.async_wait_lost(end_of("election hold"));
  s.async_wait_lost(end_of("session"));
  s.async_close(move_only<>(t, "session close")), settle();
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (ends.size() < 7u && std::chrono::steady_clock::now() < until) {
    if (ioc.stopped()) ioc.restart();
    ioc.run_one_for(100ms);
  }
  BOOST_TEST(ends.size() == 7u);
  for (const auto& end : ends) {
    BOOST_TEST_CONTEXT(end.what) {
      if (end.what == "session") {
        BOOST_TEST(end.ec == asio::error::operation_aborted, end.ec.message());
      } else {
        BOOST_TEST(!end.ec, end.ec.message());
        BOOST_TEST((end.reason && end.reason->what == loss_reason::kind::session_ended));
      }
    }
  }
  BOOST_TEST(!mh);
  BOOST_TEST(!lead);
  c.async_delete("/rules/", delete_options{.prefix = true}, move_only<delete_result>(t, "delete")), settle();

  for (auto& e : t.errors) BOOST_TEST_MESSAGE(e);
  BOOST_TEST(errors == 0u);
  BOOST_TEST(t.errors.size() == errors);
}

// Outstanding work is held on the handler's associated executor while the operation is pending,
// as Asio's own operations hold it: a handler bound to another io_context keeps that context's
// run() going until the handler has run.
BOOST_AUTO_TEST_CASE(a_pending_operation_keeps_the_handlers_io_context_running) {
  asio::io_context ioc, other;
  client c(ioc, options_for(server()));
  auto guard = asio::make_work_guard(ioc);
  std::thread client_thread([&] { ioc.run(); });
  std::atomic<bool> called{false};
  std::atomic<bool> failed{false};
  // A watch's next batch comes only once the put below is made: until then only the pending
  // operation's work keeps `other` running.
  auto w = c.async_watch("/rules/work", asio::use_future).get();
  w.async_next(asio::bind_executor(other, [&](error_code ec, watch_batch) {
    failed = static_cast<bool>(ec);
    called = true;
  }));
  // run() returns once `other` is out of work: it reports whether the handler had run by then.
  auto ran = std::async(std::launch::async, [&] {
    other.run();
    return called.load();
  });
  BOOST_TEST((ran.wait_for(300ms) == std::future_status::timeout), "other.run() returned with the operation pending");
  c.async_put("/rules/work", "v", asio::use_future).get();
  if (ran.wait_for(10s) == std::future_status::timeout) {
    other.stop();
    BOOST_TEST(false, "the handler did not run within 10 s");
  }
  BOOST_TEST(ran.get(), "other.run() returned before the handler ran");
  BOOST_TEST(!failed);
  c.async_delete("/rules/work", asio::use_future).get();
  c.close();
  guard.reset();
  client_thread.join();
}

// A handler given as an any_completion_handler, and a lock's handler wrapped for its span, are
// destroyed once each when the io_context goes with them unrun: the wrappers take their inner
// handler's executor and slot, not its allocator (whose storage the inner handler frees first).
// ASan and valgrind see a use after free here otherwise (the reads go through the handlers'
// allocator, which has state).
namespace {
/// Counts what goes through it: a handler's allocator with state, as a pool would have.
template <class T>
struct counting_allocator {
  using value_type = T;
  std::shared_ptr<std::pair<long, long>> counts;  // allocations, deallocations
  template <class U>
  counting_allocator(const counting_allocator<U>& o) noexcept : counts(o.counts) {}
  explicit counting_allocator(std::shared_ptr<std::pair<long, long>> c) noexcept : counts(std::move(c)) {}
  T* allocate(std::size_t n) {
    ++counts->first;
    return std::allocator<T>().allocate(n);
  }
  void deallocate(T* p, std::size_t n) {
    ++counts->second;
    std::allocator<T>().deallocate(p, n);
  }
  template <class U>
  bool operator==(const counting_allocator<U>& o) const noexcept { return counts == o.counts; }
};
}  // namespace

BOOST_AUTO_TEST_CASE(type_erased_handlers_dropped_unrun_are_freed_once) {
  int ran = 0;
  auto counts = std::make_shared<std::pair<long, long>>(0, 0);
  const counting_allocator<void> alloc(counts);
  {
    asio::io_context ioc;
    auto o = options_for(server());
    o.spans.on_end = [](const span&) {};
    client c(ioc, o);
    std::optional<session> s1, s2;
    session::async_create(c, [&](error_code ec, session made) {
      if (!ec) s1.emplace(std::move(made));
    });
    session::async_create(c, [&](error_code ec, session made) {
      if (!ec) s2.emplace(std::move(made));
    });
    // By the clock, not by handlers: a client polling gRPC's queue runs a handler per look.
    const auto until = [&ioc](auto done) {
      for (auto end = std::chrono::steady_clock::now() + 20s; !done() && std::chrono::steady_clock::now() < end;)
        ioc.run_one_for(10ms);
    };
    until([&] { return s1 && s2; });
    BOOST_TEST_REQUIRE((s1 && s2));
    mutex holder(*s1, "/rules/dropped-lock"), waiter(*s2, "/rules/dropped-lock");
    bool held = false;
    mutex::hold holding;
    holder.async_lock([&](error_code ec, mutex::hold h) {
      held = !ec;
      holding = std::move(h);
    });
    until([&] { return held; });
    BOOST_TEST_REQUIRE(held);
    // Queued behind the holder (its span open, its handler wrapped), then left waiting.
    // A handler with an allocator of its own: the type-erased one the library makes of it
    // allocates through it, and the span's wrapper around that must not.
    waiter.async_lock(asio::bind_allocator(alloc, [&ran](error_code, mutex::hold) { ++ran; }));
    for (int i = 0; i < 20; ++i) ioc.run_one_for(10ms);
    // The user's own type-erased handler, under a binder that forwards its allocator.
    c.async_get("/rules/dropped",
                asio::bind_executor(ioc.get_executor(), asio::any_completion_handler<void(error_code, get_result)>(
                                                            asio::bind_allocator(alloc, [&ran](error_code, get_result) { ++ran; }))));
    c.close();
  }  // the io_context goes with the handlers still queued, never run
  BOOST_TEST(ran == 0);
  BOOST_TEST(counts->first == counts->second);
}

// Destroying a barrier or a double barrier completes its pending operations with
// operation_aborted, as destroying an Asio object does (they ran on before); the aborted enter
// takes its key out, as a cancelled one does. A double barrier answers a second operation while
// one is pending with already_started (before, a second enter of one object put a second key
// and let the object count as two participants).
BOOST_AUTO_TEST_CASE(destroying_a_barrier_or_a_double_barrier_aborts_its_pending_operations) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    barrier holder(c, "/rules/gone-barrier");
    co_await holder.async_hold(use_awaitable);
    auto waiting = std::make_unique<barrier>(c, "/rules/gone-barrier");
    auto waited = started();
    waiting->async_wait(record(waited));  // no cancellation slot: only the destructor can end it
    BOOST_TEST_REQUIRE(!co_await settled(waited, 300ms), "a wait on a held barrier completed");
    waiting.reset();
    BOOST_TEST(co_await settled(waited, 2000ms), "a pending wait went on after its barrier was destroyed");
    BOOST_TEST((waited->value_or(error_code()) == asio::error::operation_aborted));
    co_await holder.async_release(use_awaitable);

    auto s = co_await session::async_create(c, use_awaitable);
    auto db = std::make_unique<double_barrier>(s, "/rules/gone-db", 2);
    auto first = started(), second = started();
    db->async_enter(record(first));  // the only participant of two: it waits
    db->async_enter(record(second));
    BOOST_TEST(co_await settled(second, 2000ms), "a second enter of one object is still pending");
    BOOST_TEST((second->value_or(error_code()) == asio::error::already_started),
               (*second ? (*second)->message() : "pending"));
    BOOST_TEST(!first->has_value(), "one participant of two went in");
    BOOST_TEST(co_await settled_keys(c, "/rules/gone-db/waiters/", 1) == 1, "one object put more than its key");
    db.reset();
    BOOST_TEST(co_await settled(first, 2000ms), "a pending enter went on after its double barrier was destroyed");
    BOOST_TEST((first->value_or(error_code()) == asio::error::operation_aborted));
    BOOST_TEST(co_await settled_keys(c, "/rules/gone-db/waiters/", 0) == 0, "the aborted enter left its key");
    co_await s.async_close(use_awaitable);
  }(c));
}

// Destroying a counter completes its pending operations with operation_aborted at once (they
// ran on before): against a paused server, an add whose txn is on the wire, an add queued
// behind it for the next txn, a compare-and-set and a get.
BOOST_AUTO_TEST_CASE(destroying_a_counter_aborts_its_pending_operations) {
  etcd_process etcd;
  asio::io_context ioc;
  auto o = options_for(etcd);
  o.request_timeout = 20s;  // nothing ends by itself while the test looks
  client c(ioc, o);
  run_for(ioc, [](client& c, etcd_process& etcd) -> asio::awaitable<void> {
    auto ctr = std::make_unique<counter>(c, "/rules/gone-counter");
    co_await ctr->async_add(1, use_awaitable);  // the value is known: the next txns write
    std::vector<outcome> ops{started(), started(), started(), started()};
    auto keep = [](outcome r) { return [r](error_code ec, auto&&...) { *r = ec; }; };
    etcd.pause();
    ctr->async_add(1, keep(ops[0]));
    ctr->async_add(2, keep(ops[1]));
    ctr->async_compare_and_set(1, 10, keep(ops[2]));
    ctr->async_get(keep(ops[3]));
    co_await sleep_for(300ms);
    for (auto& r : ops) BOOST_TEST_REQUIRE(!r->has_value(), "completed on a paused server: " << (*r ? (*r)->message() : ""));
    ctr.reset();
    for (std::size_t i = 0; i < ops.size(); ++i) {
      BOOST_TEST(co_await settled(ops[i], 2000ms), "operation " << i << " went on after its counter was destroyed");
      BOOST_TEST((ops[i]->value_or(error_code()) == asio::error::operation_aborted),
                 "operation " << i << ": " << (*ops[i] ? (*ops[i])->message() : "pending"));
    }
    etcd.resume();
  }(c, etcd), 60s);
  c.close();
}

// The cancellation types each initiating function documents, checked one by one against a paused
// server, so every request stays on the wire: a type it honours completes it at once with
// operation_aborted; a type it does not honour leaves it running, and it completes with its own
// outcome once the server resumes. Writes honour terminal and partial only (a write cancelled on
// the wire may have been applied, which total cancellation rules out); reads, locks,
// acquisitions and campaigns all three; lock_status and session creation run as one coroutine
// and honour terminal only. A hold's loss wait is abandoned by all three (nothing is lost
// meanwhile, so it stays pending until then); a hold's release honours none: its delete is on
// the wire, and it runs to its outcome once the server resumes.
BOOST_AUTO_TEST_CASE(each_operation_honours_the_cancellation_types_it_documents) {
  etcd_process etcd;
  asio::io_context ioc;
  auto o = options_for(etcd);
  o.request_timeout = 20s;
  client c(ioc, o);
  auto run_until = [&](const std::function<bool()>& done, std::chrono::milliseconds limit) {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (!done() && std::chrono::steady_clock::now() < until) {
      if (ioc.stopped()) ioc.restart();
      ioc.run_one_for(20ms);
    }
  };
  std::optional<error_code> warmed;
  c.async_put("/cx/k", "v", [&](error_code ec, put_result) { warmed = ec; });  // connected first
  run_until([&] { return warmed.has_value(); }, 10s);
  BOOST_TEST_REQUIRE((warmed && !*warmed));
  session s;
  session::async_create(c, session_options{.ttl = 60s}, [&](error_code ec, session made) {
    BOOST_TEST(!ec, ec.message());
    s = std::move(made);
  });
  run_until([&] { return (s.lease() != 0); }, 10s);
  BOOST_TEST_REQUIRE((s.lease() != 0));
  // A fresh object per call: each cell's lock or campaign is the only one on its name.
  std::vector<std::unique_ptr<mutex>> mutexes;
  std::vector<std::unique_ptr<rw_mutex>> rw_mutexes;
  std::vector<std::unique_ptr<semaphore>> semaphores;
  std::vector<std::unique_ptr<multi_lock>> multi_locks;
  std::vector<std::unique_ptr<election>> elections;
  std::vector<std::unique_ptr<registration>> registrations;
  std::vector<std::unique_ptr<counter>> counters;
  std::vector<std::unique_ptr<barrier>> barriers;
  auto fresh = [n = 0]() mutable { return "/cx/r" + std::to_string(n++); };
  // The holds of the rows on holds: each cell takes its own before the server pauses.
  std::list<mutex::hold> mutex_holds;
  std::list<rw_mutex::hold> write_holds;
  std::list<rw_mutex::shared_hold> read_holds;
  std::list<semaphore::hold> permit_holds;
  std::list<multi_lock::hold> multi_holds;
  std::list<election::hold> leaderships;
  // Takes a hold through `start(handler)` on the running server, and keeps it at `into`'s back.
  auto take = [&](auto& into, auto start) {
    using hold_type = typename std::decay_t<decltype(into)>::value_type;
    std::optional<error_code> got;
    start([&got, &into](error_code ec, hold_type h) {
      got = ec;
      into.push_back(std::move(h));
    });
    run_until([&] { return got.has_value(); }, 10s);
    BOOST_TEST_REQUIRE((got && !*got), "a hold for the row: " << (got ? got->message() : std::string("none in 10 s")));
  };
  auto take_mutex = [&] {
    mutexes.push_back(std::make_unique<mutex>(s, fresh()));
    take(mutex_holds, [&](auto h) { mutexes.back()->async_lock(std::move(h)); });
  };
  auto take_write = [&] {
    rw_mutexes.push_back(std::make_unique<rw_mutex>(s, fresh()));
    take(write_holds, [&](auto h) { rw_mutexes.back()->async_lock(std::move(h)); });
  };
  auto take_read = [&] {
    rw_mutexes.push_back(std::make_unique<rw_mutex>(s, fresh()));
    take(read_holds, [&](auto h) { rw_mutexes.back()->async_lock_shared(std::move(h)); });
  };
  auto take_permits = [&] {
    semaphores.push_back(std::make_unique<semaphore>(s, fresh(), 2));
    take(permit_holds, [&](auto h) { semaphores.back()->async_acquire(2, std::move(h)); });
  };
  auto take_parts = [&] {
    mutexes.push_back(std::make_unique<mutex>(s, fresh()));
    mutexes.push_back(std::make_unique<mutex>(s, fresh()));
    auto& first = *mutexes[mutexes.size() - 2];
    auto& second = *mutexes.back();
    multi_locks.push_back(std::make_unique<multi_lock>(std::vector<multi_lock::part>{first, second}));
    take(multi_holds, [&](auto h) { multi_locks.back()->async_lock(std::move(h)); });
  };
  auto take_lead = [&] {
    elections.push_back(std::make_unique<election>(s, fresh()));
    take(leaderships, [&](auto h) { elections.back()->async_campaign("v", std::move(h)); });
  };

  using done_fn = std::function<void(error_code)>;
  auto cb = [](asio::cancellation_slot slot, done_fn done) {
    return asio::bind_cancellation_slot(slot, [done](error_code ec, auto&&...) { done(ec); });
  };
  struct row {
    const char* what;
    std::function<void(asio::cancellation_slot, done_fn)> start;
    bool terminal, partial, total;
    std::function<void()> prepare = {};  // run before the server pauses (empty: nothing)
  };
  const std::vector<row> rows = {
      {"get", [&](auto slot, done_fn d) { c.async_get("/cx/k", cb(slot, d)); }, true, true, true},
      {"lease_time_to_live", [&](auto slot, done_fn d) { c.async_lease_time_to_live(1, cb(slot, d)); }, true, true, true},
      {"lease_leases", [&](auto slot, done_fn d) { c.async_lease_leases(cb(slot, d)); }, true, true, true},
      {"watch", [&](auto slot, done_fn d) { c.async_watch("/cx/w", cb(slot, d)); }, true, true, true},
      {"put", [&](auto slot, done_fn d) { c.async_put("/cx/k", "v", cb(slot, d)); }, true, true, false},
      {"delete", [&](auto slot, done_fn d) { c.async_delete("/cx/gone", cb(slot, d)); }, true, true, false},
      {"txn", [&](auto slot, done_fn d) { c.async_txn(txn().then(txn_op::put("/cx/t", "v")), cb(slot, d)); }, true, true, false},
      {"lease_grant", [&](auto slot, done_fn d) { c.async_lease_grant(std::chrono::seconds(60), cb(slot, d)); }, true, true, false},
      {"lease_revoke", [&](auto slot, done_fn d) { c.async_lease_revoke(1, cb(slot, d)); }, true, true, false},
      // Reads that run as one coroutine: a read has no side effect, so all three.
      {"lock_status", [&](auto slot, done_fn d) { async_lock_status(c, "/cx/lock", cb(slot, d)); }, true, true, true},
      {"election leader", [&](auto slot, done_fn d) {
         elections.push_back(std::make_unique<election>(s, fresh()));
         elections.back()->async_leader(cb(slot, d));
       }, true, true, true},
      // Reads that run as one coroutine and say terminal only.
      {"counter get", [&](auto slot, done_fn d) {
         counters.push_back(std::make_unique<counter>(c, fresh()));
         counters.back()->async_get(cb(slot, d));
       }, true, false, false},
      {"barrier wait", [&](auto slot, done_fn d) {
         barriers.push_back(std::make_unique<barrier>(c, fresh()));
         barriers.back()->async_wait(cb(slot, d));
       }, true, false, false},
      // Each type stops the run as terminal does (its session, still being made here, closed).
      {"registration run", [&](auto slot, done_fn d) {
         registrations.push_back(std::make_unique<registration>(c, fresh(), "v"));
         registrations.back()->async_run(cb(slot, d));
       }, true, true, true},
      {"session create", [&](auto slot, done_fn d) { session::async_create(c, cb(slot, d)); }, true, false, false},
      {"mutex lock", [&](auto slot, done_fn d) {
         mutexes.push_back(std::make_unique<mutex>(s, fresh()));
         mutexes.back()->async_lock(cb(slot, d));
       }, true, true, true},
      {"semaphore acquire", [&](auto slot, done_fn d) {
         semaphores.push_back(std::make_unique<semaphore>(s, fresh(), 1));
         semaphores.back()->async_acquire(1, cb(slot, d));
       }, true, true, true},
      {"campaign", [&](auto slot, done_fn d) {
         elections.push_back(std::make_unique<election>(s, fresh()));
         elections.back()->async_campaign("v", cb(slot, d));
       }, true, true, true},
      {"mutex::hold wait_lost", [&](auto slot, done_fn d) { mutex_holds.back().async_wait_lost(cb(slot, d)); },
       true, true, true, take_mutex},
      {"rw_mutex::hold wait_lost", [&](auto slot, done_fn d) { write_holds.back().async_wait_lost(cb(slot, d)); },
       true, true, true, take_write},
      {"rw_mutex::shared_hold wait_lost", [&](auto slot, done_fn d) { read_holds.back().async_wait_lost(cb(slot, d)); },
       true, true, true, take_read},
      {"semaphore::hold wait_lost", [&](auto slot, done_fn d) { permit_holds.back().async_wait_lost(cb(slot, d)); },
       true, true, true, take_permits},
      {"multi_lock::hold wait_lost", [&](auto slot, done_fn d) { multi_holds.back().async_wait_lost(cb(slot, d)); },
       true, true, true, take_parts},
      {"election::hold wait_lost", [&](auto slot, done_fn d) { leaderships.back().async_wait_lost(cb(slot, d)); },
       true, true, true, take_lead},
      {"mutex::hold release", [&](auto slot, done_fn d) { mutex_holds.back().async_release(cb(slot, d)); },
       false, false, false, take_mutex},
      {"rw_mutex::hold release", [&](auto slot, done_fn d) { write_holds.back().async_release(cb(slot, d)); },
       false, false, false, take_write},
      {"rw_mutex::shared_hold release", [&](auto slot, done_fn d) { read_holds.back().async_release(cb(slot, d)); },
       false, false, false, take_read},
      {"semaphore::hold release", [&](auto slot, done_fn d) { permit_holds.back().async_release(cb(slot, d)); },
       false, false, false, take_permits},
      {"multi_lock::hold release", [&](auto slot, done_fn d) { multi_holds.back().async_release(cb(slot, d)); },
       false, false, false, take_parts},
      {"election::hold release", [&](auto slot, done_fn d) { leaderships.back().async_release(cb(slot, d)); },
       false, false, false, take_lead},
  };
  using ct = asio::cancellation_type;
  std::list<asio::cancellation_signal> signals;
  std::vector<std::shared_ptr<std::optional<error_code>>> results;
  for (const auto& r : rows) {
    for (auto [type, name, honours] : {std::tuple{ct::terminal, "terminal", r.terminal},
                                       std::tuple{ct::partial, "partial", r.partial},
                                       std::tuple{ct::total, "total", r.total}}) {
      BOOST_TEST_CONTEXT(r.what << ", " << name << " cancellation") {
        if (r.prepare) r.prepare();
        etcd.pause();
        // Kept until the end: a cell that fails leaves its operation pending on the signal's slot.
        auto& signal = signals.emplace_back();
        auto result_ptr = results.emplace_back(std::make_shared<std::optional<error_code>>());
        auto& result = *result_ptr;
        r.start(signal.slot(), [result_ptr](error_code ec) { *result_ptr = ec; });
        run_until([&] { return result.has_value(); }, 200ms);
        BOOST_TEST_REQUIRE(!result, "completed on a paused server: " << (result ? result->message() : ""));
        signal.emit(type);
        run_until([&] { return result.has_value(); }, honours ? 2000ms : 300ms);
        if (honours) {
          BOOST_TEST((result && *result == asio::error::operation_aborted),
                     (result ? result->message() : std::string("still pending")));
          etcd.resume();
        } else {
          BOOST_TEST(!result, "cancelled by a type it does not honour: " << (result ? result->message() : ""));
          etcd.resume();
          run_until([&] { return result.has_value(); }, 10s);
          BOOST_TEST((result && *result != asio::error::operation_aborted),
                     (result ? result->message() : std::string("no outcome after the server resumed")));
          // A release has nothing to fail on here: it ran to its end.
          if (r.prepare) BOOST_TEST((result && !*result), (result ? result->message() : std::string()));
        }
        run_until([] { return false; }, 100ms);  // what the server answers now goes nowhere
      }
    }
  }
  registrations.clear();
  barriers.clear();
  counters.clear();
  leaderships.clear();
  multi_holds.clear();
  permit_holds.clear();
  read_holds.clear();
  write_holds.clear();
  mutex_holds.clear();
  elections.clear();
  multi_locks.clear();
  semaphores.clear();
  rw_mutexes.clear();
  mutexes.clear();
  s = session();  // (its lease expires on the throwaway server)
  c.close();
}
