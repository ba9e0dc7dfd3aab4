// What span hooks cost at one request in flight: one worker's puts, and one worker's lock, get,
// fenced put and unlock, on a client without hooks and on one whose hooks do nothing, in
// interleaved rounds (the order flips each round) against one etcd. Without hooks a client does
// strictly less than with empty ones (a test of a null std::function per attempt), so the ratio
// bounds the unset cost from above. Prints one JSON line per round and cell:
//   span_cost ENDPOINT ROUNDS MILLISECONDS_PER_CELL
#include <coetcd.hpp>
#include <coetcd/span.hpp>

#include <boost/asio.hpp>

#include <iostream>

namespace asio = boost::asio;
using asio::use_awaitable;
using clock_type = std::chrono::steady_clock;

namespace {

std::uint64_t spans_seen = 0;

asio::awaitable<std::uint64_t> puts(coetcd::client& c, clock_type::duration d) {
  std::uint64_t n = 0;
  const std::string value(64, 'v');
  for (auto end = clock_type::now() + d; clock_type::now() < end; ++n)
    co_await c.async_put("span_cost/key", value, use_awaitable);
  co_return n;
}

asio::awaitable<std::uint64_t> locked_updates(coetcd::client& c, clock_type::duration d) {
  auto s = co_await coetcd::session::async_create(c, use_awaitable);
  std::uint64_t n = 0;
  {
    coetcd::mutex m(s, "span_cost/lock");
    for (auto end = clock_type::now() + d; clock_type::now() < end; ++n) {
      auto held = co_await m.async_lock(use_awaitable);
      co_await c.async_get("span_cost/count", use_awaitable);
      auto t = coetcd::txn().when(held.fence()).then(coetcd::txn_op::put("span_cost/count", "1"));
      co_await c.async_txn(t, use_awaitable);
      co_await held.async_release(use_awaitable);
    }
  }
  co_await s.async_close(use_awaitable);
  co_return n;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: span_cost ENDPOINT ROUNDS MILLISECONDS_PER_CELL\n";
    return 2;
  }
  const int rounds = std::stoi(argv[2]);
  const auto cell = std::chrono::milliseconds(std::stoi(argv[3]));
  asio::io_context io;
  coetcd::client_options plain{.endpoints = {argv[1]}, .turn_off_abseil_deadlock_detection = true};
  auto hooked = plain;
  hooked.spans.on_start = [](const coetcd::span&) { ++spans_seen; };
  hooked.spans.on_end = [](const coetcd::span&) {};
  coetcd::client without(io, plain), with(io, hooked);
  int status = 0;
  asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    co_await puts(without, std::chrono::milliseconds(500));  // connect and warm both
    co_await puts(with, std::chrono::milliseconds(500));
    for (int r = 1; r <= rounds; ++r) {
      for (const char* workload : {"put", "lock_get_txn_unlock"}) {
        for (int i = 0; i < 2; ++i) {
          const bool hooks = (i == 0) == (r % 2 == 0);  // flips which goes first each round
          auto& c = hooks ? with : without;
          const auto t0 = clock_type::now();
          std::uint64_t n = 0;
          if (std::string_view(workload) == "put") n = co_await puts(c, cell);
          else n = co_await locked_updates(c, cell);
          const double secs = std::chrono::duration<double>(clock_type::now() - t0).count();
          std::cout << "{\"round\":" << r << ",\"workload\":\"" << workload << "\",\"hooks\":\""
                    << (hooks ? "empty" : "unset") << "\",\"ops\":" << n << ",\"per_s\":" << n / secs << "}"
                    << std::endl;
        }
      }
    }
    coetcd::delete_options everything;
    everything.prefix = true;
    co_await without.async_delete("span_cost/", everything, use_awaitable);
    without.close();
    with.close();
  }, [&](std::exception_ptr e) {
    if (!e) return;
    try { std::rethrow_exception(e); } catch (const std::exception& x) { std::cerr << "span_cost: " << x.what() << '\n'; }
    status = 1;
    without.close();
    with.close();
  });
  io.run();
  if (status == 0 && spans_seen == 0) {
    std::cerr << "span_cost: the hooked client saw no span\n";
    status = 1;
  }
  return status;
}
