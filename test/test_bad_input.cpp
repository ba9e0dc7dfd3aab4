// Bad input, one table: each row does one wrong thing and states the error it must get. Every
// row runs under a time limit (no hang), must not crash, and must leave no key under its lock
// name. Then cancellation at every await point of lock, by sweeping the cancel delay.
#define BOOST_TEST_MODULE coetcd_bad_input
#include "support/fixture.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <fstream>

using namespace coetcd;
using namespace coetcd::test;
using namespace std::chrono_literals;

BOOST_TEST_GLOBAL_FIXTURE(shared_etcd);

namespace {

struct bad_case {
  const char* what;
  std::string lock_name;  // checked for leftovers afterwards ("" = none)
  asio::awaitable<error_code> (*run)(client& c, const std::string& name);
  error_code expected;    // {} = must succeed
};

/// Runs `f` and turns a thrown system_error into its code: constructors report bad input by
/// throwing, operations by their error_code.
template <class F>
asio::awaitable<error_code> caught(F f) {
  try {
    co_return co_await f();
  } catch (const boost::system::system_error& e) {
    BOOST_TEST_MESSAGE("  threw: " << e.what());
    co_return e.code();
  }
}

asio::awaitable<error_code> lock_and_unlock(client& c, const std::string& name) {
  auto s = co_await session::async_create(c, use_awaitable);
  mutex m(s, name);
  auto [ec, held] = co_await m.async_lock(asio::as_tuple(use_awaitable));
  if (!ec) co_await held.async_release(use_awaitable);
  co_await s.async_close(use_awaitable);
  co_return ec;
}

/// Whether building `h`'s fence throws asio::error::bad_descriptor, as it must for a hold that
/// holds nothing (empty, or moved from): there is no fence to pass.
template <class Hold>
bool fence_refused(Hold& h) {
  try {
    (void)h.fence();
    return false;
  } catch (const boost::system::system_error& e) {
    return e.code() == asio::error::bad_descriptor;
  }
}

asio::awaitable<error_code> session_with_ttl(client& c, std::chrono::seconds ttl) {
  auto [ec, s] = co_await session::async_create(c, session_options{.ttl = ttl}, asio::as_tuple(use_awaitable));
  if (!ec) co_await s.async_close(use_awaitable);
  co_return ec;
}

/// A get through a client built from `o`: reports what construction or the first call says.
asio::awaitable<error_code> first_get(client_options o) {
  try {
    client bad(co_await asio::this_coro::executor, std::move(o));
    auto [ec, r] = co_await bad.async_get("bad-input-probe", asio::as_tuple(use_awaitable));
    co_return ec;
  } catch (const boost::system::system_error& e) {
    BOOST_TEST_MESSAGE("  threw: " << e.what());
    co_return e.code();
  }
}

client_options with_ca(const std::string& file) {
  client_options o;
  o.endpoints = {server().endpoint()};
  o.request_timeout = 1s;
  o.tls = tls_options{.ca_file = file, .cert_file = {}, .key_file = {}};
  return o;
}

client_options quick(std::vector<std::string> endpoints) {
  client_options o;
  o.endpoints = std::move(endpoints);
  o.request_timeout = 1s;
  return o;
}

/// A listener that takes connections and never says a word.
asio::awaitable<error_code> black_hole_get(client&, const std::string&) {
  auto ex = co_await asio::this_coro::executor;
  asio::ip::tcp::acceptor silent(ex, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  auto o = quick({"127.0.0.1:" + std::to_string(silent.local_endpoint().port())});
  co_return co_await first_get(std::move(o));
}

const std::string huge_name(1536 * 1024, 'n');

std::vector<bad_case> cases() {
  using namespace std::string_literals;
  return {
      {"empty lock name", "", [](client& c, const std::string&) {
         return caught([&]() -> asio::awaitable<error_code> {
           auto s = co_await session::async_create(c, use_awaitable);
           mutex m(s, "");  // throws
           co_return error_code{};
         });
       }, error::empty_key},
      {"name with slashes", "bad/slash/name", lock_and_unlock, {}},
      {"name with NUL bytes", "bad\0nul\0name"s, lock_and_unlock, {}},
      {"name that is a prefix of another, both held at once", "bad-pre", [](client& c, const std::string& name) -> asio::awaitable<error_code> {
         auto s1 = co_await session::async_create(c, use_awaitable);
         auto s2 = co_await session::async_create(c, use_awaitable);
         mutex shorter(s1, name), longer(s2, name + "fix");
         auto held = co_await shorter.async_lock(use_awaitable);
         auto [ec, also] = co_await longer.async_try_lock(asio::as_tuple(use_awaitable));  // not blocked by "bad-pre"
         if (!ec) co_await also.async_release(use_awaitable);
         co_await held.async_release(use_awaitable);
         co_await s1.async_close(use_awaitable);
         co_await s2.async_close(use_awaitable);
         co_return ec;
       }, {}},
      {"name of 1.5 MiB", huge_name, lock_and_unlock, error::request_too_large},
      {"session TTL 0", "", [](client& c, const std::string&) { return session_with_ttl(c, 0s); },
       error::invalid_argument},
      {"session TTL negative", "", [](client& c, const std::string&) { return session_with_ttl(c, -5s); },
       error::invalid_argument},
      {"session TTL huge", "", [](client& c, const std::string&) { return session_with_ttl(c, std::chrono::seconds(1LL << 40)); },
       error::invalid_argument},
      {"release twice", "bad-twice", [](client& c, const std::string& name) -> asio::awaitable<error_code> {
         auto s = co_await session::async_create(c, use_awaitable);
         mutex m(s, name);
         auto held = co_await m.async_lock(use_awaitable);
         co_await held.async_release(use_awaitable);
         auto [ec] = co_await held.async_release(asio::as_tuple(use_awaitable));
         co_await s.async_close(use_awaitable);
         co_return ec;
       }, error::not_locked},
      {"release a moved-from hold", "bad-moved-hold", [](client& c, const std::string& name) -> asio::awaitable<error_code> {
         auto s = co_await session::async_create(c, use_awaitable);
         mutex m(s, name);
         auto held = co_await m.async_lock(use_awaitable);
         auto taken = std::move(held);
         auto [ec] = co_await held.async_release(asio::as_tuple(use_awaitable));
         auto [still] = co_await taken.async_release(asio::as_tuple(use_awaitable));  // the lock went with the move
         BOOST_TEST(!still, still.message());
         co_await s.async_close(use_awaitable);
         co_return ec;
       }, asio::error::bad_descriptor},
      {"lock on a closed session", "bad-closed", [](client& c, const std::string& name) -> asio::awaitable<error_code> {
         auto s = co_await session::async_create(c, use_awaitable);
         mutex m(s, name);
         co_await s.async_close(use_awaitable);
         auto [ec, held] = co_await m.async_lock(asio::as_tuple(use_awaitable));
         BOOST_TEST(!held);
         co_return ec;
       }, error::session_lost},
      {"lock after the client is closed", "bad-client-closed", [](client&, const std::string& name) -> asio::awaitable<error_code> {
         client mine(co_await asio::this_coro::executor, options_for(server()));
         auto s = co_await session::async_create(mine, use_awaitable);
         mutex m(s, name);
         mine.close();
         auto [ec, held] = co_await m.async_lock(asio::as_tuple(use_awaitable));
         BOOST_TEST(!held);
         co_return ec;
       }, error::client_closed},
      {"endpoint that does not parse", "", [](client&, const std::string&) { return first_get(quick({"http://[::1"})); },
       error::invalid_endpoint},
      {"endpoint that refuses", "", [](client&, const std::string&) {
         return first_get(quick({"127.0.0.1:" + std::to_string(free_port())}));
       }, error::endpoints_unreachable},
      {"endpoint that black-holes (accepts, never answers)", "", black_hole_get, error::endpoints_unreachable},
      {"CA file that does not exist", "", [](client&, const std::string&) { return first_get(with_ca("/nonexistent/ca.pem")); },
       error::tls_file_unreadable},
      {"CA file that is not a certificate", "", [](client&, const std::string&) {
         auto file = server().dir() / "not-a-ca.pem";  // removed with the server's dir
         std::ofstream(file) << "this is not PEM\n";
         return first_get(with_ca(file.string()));
       }, error::tls_file_invalid},
  };
}

}  // namespace

BOOST_AUTO_TEST_CASE(bad_input_table) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  for (auto& row : cases()) {
    BOOST_TEST_CONTEXT(row.what) {
      error_code got;
      std::int64_t left = 0;
      run_for(ioc, [](client& c, const bad_case& row, error_code& got, std::int64_t& left) -> asio::awaitable<void> {
        got = co_await row.run(c, row.lock_name);
        if (!row.lock_name.empty() && row.lock_name.size() < 4096) left = co_await count_keys(c, row.lock_name + "/");
      }(c, row, got, left), 20s);
      BOOST_TEST_MESSAGE(row.what << ": " << (got ? got.message() : "ok"));
      BOOST_TEST(got == row.expected, "got '" << got.message() << "', expected '" << row.expected.message() << "'");
      if (got) BOOST_TEST(!got.message().empty());
      BOOST_TEST(left == 0, left << " keys left under the lock name");
    }
  }
}

// Cancel lock() after every delay from 0 to 6 ms in 100 µs steps, while another session holds
// the name (so lock goes through acquire, the view's seeding and the wait) and while it is free.
// Each attempt either holds the lock (and releases it) or fails with operation_aborted; no key
// is left behind. After an abort the same mutex locks again at once, while the aborted txn may
// still be on the wire: its clean-up must not remove the new lock's key.
BOOST_AUTO_TEST_CASE(cancelling_lock_at_every_await_point_leaves_no_key) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto hs = co_await session::async_create(c, use_awaitable);
    auto ws = co_await session::async_create(c, use_awaitable);
    mutex holder(hs, "bad-cancel"), m(ws, "bad-cancel");
    int aborted = 0, acquired = 0, other = 0;
    for (int contended = 0; contended < 2; ++contended) {
      mutex::hold holding;
      if (contended) holding = co_await holder.async_lock(use_awaitable);
      for (int step = 0; step <= 60; ++step) {
        asio::cancellation_signal cancel;
        auto result = std::make_shared<std::optional<error_code>>();
        auto got = std::make_shared<mutex::hold>();
        m.async_lock(asio::bind_cancellation_slot(cancel.slot(), [result, got](error_code ec, mutex::hold h) {
          *got = std::move(h);
          *result = ec;
        }));
        asio::steady_timer t(co_await asio::this_coro::executor, std::chrono::microseconds(100 * step));
        co_await t.async_wait(use_awaitable);
        cancel.emit(asio::cancellation_type::terminal);
        while (!result->has_value()) co_await sleep_for(1ms);
        if (!**result) {
          ++acquired;
          BOOST_TEST(!contended, "acquired a lock that another session holds");
          BOOST_TEST(bool(*got));
          co_await got->async_release(use_awaitable);
        } else if (**result == asio::error::operation_aborted) {
          ++aborted;
          BOOST_TEST(!*got, "step " << step << ": an aborted lock handed over a hold");
          if (!contended) {
            auto again = co_await m.async_lock(use_awaitable);
            co_await sleep_for(5ms);  // long enough for the aborted txn and its clean-up
            auto mine = co_await c.async_get(m.key(), get_options{}, use_awaitable);
            BOOST_TEST(mine.kvs.size() == 1u, "step " << step << ": the re-lock's key was removed");
            auto guarded = txn().when(again.fence());
            auto owned = co_await c.async_txn(guarded, use_awaitable);
            BOOST_TEST(owned.succeeded, "step " << step << ": the re-lock does not own its key");
            co_await again.async_release(use_awaitable);
          }
        } else {
          ++other;
          BOOST_TEST_MESSAGE("unexpected: " << (*result)->message());
        }
        auto left = co_await settled_keys(c, "bad-cancel/", contended ? 1 : 0);
        BOOST_TEST(left == (contended ? 1 : 0), "step " << step << ": " << left << " keys left");
      }
      if (contended) co_await holding.async_release(use_awaitable);
    }
    BOOST_TEST_MESSAGE("cancelled lock: " << acquired << " acquired, " << aborted << " aborted");
    BOOST_TEST(other == 0);
    BOOST_TEST(aborted > 0);
    BOOST_TEST(acquired > 0);
    co_await hs.async_close(use_awaitable);
    co_await ws.async_close(use_awaitable);
    BOOST_TEST(co_await count_keys(c, "bad-cancel/") == 0);
  }(c), 120s);
}

// The same sweep for campaign(): against a sitting leader every attempt is aborted, and no
// candidate key outlives the abort.
BOOST_AUTO_TEST_CASE(cancelling_campaign_at_every_await_point_leaves_no_key) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto ls = co_await session::async_create(c, use_awaitable);
    auto cs = co_await session::async_create(c, use_awaitable);
    election leader(ls, "bad-cancel-elect"), e(cs, "bad-cancel-elect");
    auto sitting = co_await leader.async_campaign("sitting", use_awaitable);
    int aborted = 0;
    for (int step = 0; step <= 30; ++step) {
      asio::cancellation_signal cancel;
      auto result = std::make_shared<std::optional<error_code>>();
      auto got = std::make_shared<election::hold>();
      e.async_campaign("hopeful", asio::bind_cancellation_slot(cancel.slot(), [result, got](error_code ec, election::hold h) {
        *got = std::move(h);
        *result = ec;
      }));
      asio::steady_timer t(co_await asio::this_coro::executor, std::chrono::microseconds(200 * step));
      co_await t.async_wait(use_awaitable);
      cancel.emit(asio::cancellation_type::terminal);
      while (!result->has_value()) co_await sleep_for(1ms);
      BOOST_TEST(**result == asio::error::operation_aborted, "step " << step << ": " << (*result)->message());
      if (**result == asio::error::operation_aborted) ++aborted;
      BOOST_TEST(!*got, "step " << step << ": an aborted campaign handed over a leadership");
      auto left = co_await settled_keys(c, "bad-cancel-elect/", 1);
      BOOST_TEST(left == 1, "step " << step << ": " << left << " keys under the election");
    }
    BOOST_TEST(aborted == 31);
    BOOST_TEST(bool(sitting));
    co_await sitting.async_release(use_awaitable);
    co_await ls.async_close(use_awaitable);
    co_await cs.async_close(use_awaitable);
  }(c), 60s);
}

// A fence without the lock never passes. A hold that holds nothing (empty, the empty hold of a
// try_lock that found the name held, a moved-from hold) has no fence: building one throws
// bad_descriptor. A fence of a hold that is over (released; its session lost), whether built
// while it held or after, must fail its txn and write nothing. A lock cancelled while waiting
// hands over no hold at all.
BOOST_AUTO_TEST_CASE(a_fence_without_the_lock_never_passes) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto holder_s = co_await session::async_create(c, use_awaitable);
    auto s = co_await session::async_create(c, use_awaitable);
    mutex holder(holder_s, "fence");
    auto fenced = [&c](compare fence, std::string what) -> asio::awaitable<void> {
      auto guarded = txn().when(fence).then(txn_op::put("fence-written", what));
      auto r = co_await c.async_txn(guarded, use_awaitable);
      BOOST_TEST(!r.succeeded, what << ": the fence passed");
      BOOST_TEST(co_await count_keys(c, "fence-written") == 0, what);
    };
    mutex::hold none;
    BOOST_TEST(fence_refused(none), "an empty hold built a fence");
    auto held = co_await holder.async_lock(use_awaitable);
    mutex m(s, "fence");
    auto [e1, tried] = co_await m.async_try_lock(asio::as_tuple(use_awaitable));
    BOOST_TEST(e1 == error::locked);
    BOOST_TEST(!tried);
    BOOST_TEST(fence_refused(tried), "the hold of a failed try_lock built a fence");
    {
      using namespace boost::asio::experimental::awaitable_operators;
      auto r = co_await (m.async_lock(use_awaitable) || sleep_for(100ms));
      BOOST_TEST(r.index() == 1u, "a lock of a held name won the race against 100 ms");
    }
    co_await held.async_release(use_awaitable);
    auto h = co_await m.async_lock(use_awaitable);
    const auto during = h.fence();
    {  // the control: while held, the fence passes
      auto guarded = txn().when(during).then(txn_op::put("fence-control", "held"));
      auto r = co_await c.async_txn(guarded, use_awaitable);
      BOOST_TEST(r.succeeded, "the fence of a hold that holds failed");
      co_await c.async_delete("fence-control", use_awaitable);
    }
    co_await h.async_release(use_awaitable);
    co_await fenced(during, "built while held, used after the release");
    const auto after = h.fence();
    co_await fenced(after, "built after the release");
    mutex lost(s, "fence-lost");
    auto lost_hold = co_await lost.async_lock(use_awaitable);
    const auto before_loss = lost_hold.fence();
    auto r = etcdctl(server(), "lease revoke " + hex(s.lease()));
    BOOST_TEST_REQUIRE(r.exit_code == 0, r.output);
    co_await sleep_for(300ms);
    co_await fenced(before_loss, "built while held, used after the session loss");
    const auto after_loss = lost_hold.fence();
    co_await fenced(after_loss, "built after the session loss");
    auto taken = std::move(lost_hold);
    BOOST_TEST(fence_refused(lost_hold), "a moved-from hold built a fence");
  }(c));
}

// A client moved into another object (construction and assignment): sessions made from it keep
// working through the new object, get_client() returns it, and a hold destroyed after the move is
// released in the background (under ASan: nothing reaches the moved-from object). Destroying the
// mutex first leaves its hold alone.
BOOST_AUTO_TEST_CASE(a_moved_client_keeps_its_sessions) {
  asio::io_context ioc;
  client checker(ioc, options_for(server()));
  auto first = std::make_unique<client>(ioc, options_for(server()));
  run_for(ioc, [](client& checker, std::unique_ptr<client>& first) -> asio::awaitable<void> {
    auto s = co_await session::async_create(*first, use_awaitable);
    auto m = std::make_unique<mutex>(s, "moved-client");
    auto held = co_await m->async_lock(use_awaitable);
    auto moved = std::make_unique<client>(std::move(*first));
    first.reset();  // the moved-from object is gone
    BOOST_TEST(&s.get_client() == moved.get());
    co_await held.async_release(use_awaitable);
    held = co_await m->async_lock(use_awaitable);
    m.reset();  // the mutex goes; its hold stays
    co_await sleep_for(200ms);
    BOOST_TEST(bool(held));
    BOOST_TEST(co_await count_keys(checker, "moved-client/") == 1, "destroying the mutex released its hold");
    { auto dropped = std::move(held); }  // destroyed while held: released in the background
    bool free = false;
    for (int i = 0; i < 100 && !free; ++i) {
      free = co_await count_keys(checker, "moved-client/") == 0;
      if (!free) co_await sleep_for(20ms);
    }
    BOOST_TEST(free, "the destroyed hold's key was not released");
    client assigned(co_await asio::this_coro::executor, options_for(server()));
    assigned = std::move(*moved);
    moved.reset();
    BOOST_TEST(&s.get_client() == &assigned);
    election e(s, "moved-client-e");
    auto lead = co_await e.async_campaign("v", use_awaitable);
    co_await lead.async_release(use_awaitable);
    co_await s.async_close(use_awaitable);
    BOOST_TEST(co_await count_keys(checker, "moved-client") == 0);
  }(checker, first));
}

// "Every key >= key" has a spelling that cannot shrink to one key: from_key, for get, delete,
// watch and compare. `range_end = "\0"` (a C++ literal, so an empty view) still means one key.
BOOST_AUTO_TEST_CASE(from_key_covers_every_key_after) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    for (auto k : {"zz-from/a", "zz-from/b", "zz-fromz"}) co_await c.async_put(k, "v", use_awaitable);
    auto one = co_await c.async_get("zz-from/", get_options{.range_end = "\0", .count_only = true}, use_awaitable);
    BOOST_TEST(one.count == 0);  // the key "zz-from/" itself only
    auto all = co_await c.async_get("zz-from/", get_options{.count_only = true, .from_key = true}, use_awaitable);
    BOOST_TEST(all.count >= 3);
    auto w = co_await c.async_watch("zz-from/b", watch_options{.from_key = true}, use_awaitable);
    co_await c.async_put("zz-fromzz", "v", use_awaitable);
    auto b = co_await w.async_next(use_awaitable);
    BOOST_TEST(b.events.at(0).kv.key == "zz-fromzz");
    auto t = co_await c.async_txn(txn().when(compare::version("zz-from/").from_key() > 0), use_awaitable);
    BOOST_TEST(t.succeeded);
    auto d = co_await c.async_delete("zz-from/", delete_options{.from_key = true}, use_awaitable);
    BOOST_TEST(d.deleted >= 4);
    BOOST_TEST(co_await count_keys(c, "zz-from") == 0);
  }(c));
}

// Every I/O object, and every hold, answers get_executor() with its client's executor; an empty
// one with an empty executor.
BOOST_AUTO_TEST_CASE(every_io_object_has_the_clients_executor) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto s = co_await session::async_create(c, use_awaitable);
    auto ex = c.get_executor();
    BOOST_TEST((s.get_executor() == ex));
    BOOST_TEST((mutex(s, "exec").get_executor() == ex));
    BOOST_TEST((election(s, "exec-e").get_executor() == ex));
    BOOST_TEST((election_observer(c, "exec-e").get_executor() == ex));
    auto w = co_await c.async_watch("exec-w", use_awaitable);
    BOOST_TEST((w.get_executor() == ex));
    auto k = c.keep_alive(s.lease());
    BOOST_TEST((k.get_executor() == ex));
    BOOST_TEST((session().get_executor() == session::executor_type()));
    mutex m(s, "exec-m");
    semaphore sem(s, "exec-sem", 1);
    election e(s, "exec-held-e");
    auto held = co_await m.async_lock(use_awaitable);
    auto permit = co_await sem.async_acquire(1, use_awaitable);
    auto lead = co_await e.async_campaign("v", use_awaitable);
    BOOST_TEST((held.get_executor() == ex));
    BOOST_TEST((permit.get_executor() == ex));
    BOOST_TEST((lead.get_executor() == ex));
    BOOST_TEST((mutex::hold().get_executor() == mutex::hold::executor_type()));
    BOOST_TEST((election::hold().get_executor() == election::hold::executor_type()));
    co_await held.async_release(use_awaitable);
    co_await permit.async_release(use_awaitable);
    co_await lead.async_release(use_awaitable);
  }(c));
}
