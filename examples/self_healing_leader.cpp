// A scheduler that leads whenever it can: two replicas run coetcd::leader on one name; the
// leader's body writes under its term's fence. The leader's lease is revoked (as if its session
// died): it is told, the other replica leads at once, and the first campaigns again and leads
// once the second stops.
//   self_healing_leader [ENDPOINT]
#include <coetcd.hpp>
#include <coetcd/leader.hpp>

#include <boost/asio.hpp>

#include <iostream>

namespace asio = boost::asio;
using asio::use_awaitable;
using namespace std::chrono_literals;

// What a replica does while it leads: its writes go through only while its term lasts.
auto scheduler(coetcd::client& etcd, std::string name) {
  return [&etcd, name](coetcd::election::hold& term) -> asio::awaitable<void> {
    std::cout << name << " leads (term " << term.fencing_token() << ")\n";
    for (;;) {
      auto tick = coetcd::txn().when(term.fence()).then(coetcd::txn_op::put("scheduler/last-tick", name));
      // A failed write is not worth ending the run for (a body that throws would end it).
      auto [ec, written] = co_await etcd.async_txn(tick, asio::as_tuple(use_awaitable));
      if (!ec && !written.succeeded) std::cout << name << "'s tick refused: its term is over\n";
      asio::steady_timer t(co_await asio::this_coro::executor, 50ms);
      co_await t.async_wait(use_awaitable);  // cancelled the moment the term ends
    }
  };
}

// Prints each replica's events until its run ends.
asio::awaitable<void> report(coetcd::leader& l, std::string name) {
  for (;;) {
    auto e = co_await l.async_next_event(use_awaitable);
    if (e.what == coetcd::leader_event::kind::lost) std::cout << name << " lost its term: " << e.why.message() << "\n";
    if (e.what == coetcd::leader_event::kind::stopped) co_return;
  }
}

asio::awaitable<void> wait_until(auto done) {
  asio::steady_timer t(co_await asio::this_coro::executor);
  while (!done()) {
    t.expires_after(10ms);
    co_await t.async_wait(use_awaitable);
  }
}

asio::awaitable<void> run(coetcd::client& etcd) {
  auto ex = co_await asio::this_coro::executor;
  coetcd::leader a(etcd, "services/scheduler", {.value = "replica-a", .ttl = 5s});
  coetcd::leader b(etcd, "services/scheduler", {.value = "replica-b", .ttl = 5s});
  asio::cancellation_signal stop_a, stop_b;
  asio::co_spawn(ex, report(a, "replica-a"), asio::detached);
  asio::co_spawn(ex, report(b, "replica-b"), asio::detached);
  a.async_run(scheduler(etcd, "replica-a"), asio::bind_cancellation_slot(stop_a.slot(), asio::detached));
  co_await wait_until([&] { return a.is_leader(); });
  b.async_run(scheduler(etcd, "replica-b"), asio::bind_cancellation_slot(stop_b.slot(), asio::detached));

  // The leader's session dies (its lease revoked, as an operator or an expiry would).
  auto keys = co_await etcd.async_get("services/scheduler/", coetcd::get_options{.prefix = true}, use_awaitable);
  for (auto& kv : keys.kvs)
    if (kv.create_revision == a.fencing_token()) co_await etcd.async_lease_revoke(kv.lease, use_awaitable);
  co_await wait_until([&] { return b.is_leader(); });
  std::cout << "replica-a campaigns again behind replica-b\n";
  stop_b.emit(asio::cancellation_type::terminal);  // replica-b shuts down
  co_await wait_until([&] { return a.is_leader() && a.terms() == 2; });
  std::cout << "replica-a leads again: " << a.terms() << " terms\n";
  stop_a.emit(asio::cancellation_type::terminal);
  co_await wait_until([&] { return !a.is_leader(); });
  co_await etcd.async_delete("scheduler/last-tick", use_awaitable);
}

int main(int argc, char** argv) {
  asio::io_context ioc;
  coetcd::client etcd(ioc, {.endpoints = {argc > 1 ? argv[1] : "127.0.0.1:2379"}});
  int status = 0;
  asio::co_spawn(ioc, run(etcd), [&](std::exception_ptr e) {
    if (e) {
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& x) {
        std::cerr << "error: " << x.what() << "\n";
      }
      status = 1;
    }
    etcd.close();
  });
  ioc.run();
  return status;
}
