// Moves money between two accounts kept in etcd, under a multi_lock of both accounts' names:
// run two of these at once with the accounts in opposite orders, and neither waits for the other
// for ever (the locks are taken in name order, whatever order they are given in), and no unit of
// money is lost or made (each move is a fenced read-modify-write of both balances).
//   transfer ENDPOINT FROM TO ROUNDS
#include <coetcd.hpp>

#include <boost/asio.hpp>

#include <iostream>
#include <string>

namespace asio = boost::asio;
using asio::use_awaitable;
using namespace std::chrono_literals;

asio::awaitable<std::int64_t> balance(coetcd::client& etcd, const std::string& account) {
  auto r = co_await etcd.async_get("/bank/" + account, use_awaitable);
  co_return r.kvs.empty() ? 0 : std::stoll(r.kvs[0].value);
}

asio::awaitable<void> run(coetcd::client& etcd, std::string from, std::string to, int rounds) {
  auto s = co_await coetcd::session::async_create(etcd, {.ttl = 10s}, use_awaitable);
  coetcd::mutex a(s, "bank-lock/" + from), b(s, "bank-lock/" + to);
  coetcd::multi_lock both({a, b});  // taken as bank-lock/<first name>, then the other
  int moved = 0;
  for (int i = 0; i < rounds; ++i) {
    auto held = co_await both.async_lock(use_awaitable);
    auto have = co_await balance(etcd, from);
    auto other = co_await balance(etcd, to);
    // The write lands only while both locks are still ours.
    auto w = co_await etcd.async_txn(coetcd::txn()
                                         .when(held.fence())
                                         .then(coetcd::txn_op::put("/bank/" + from, std::to_string(have - 1)))
                                         .then(coetcd::txn_op::put("/bank/" + to, std::to_string(other + 1))),
                                     use_awaitable);
    moved += w.succeeded;
    co_await held.async_release(use_awaitable);
  }
  std::cout << "moved " << moved << " from " << from << " to " << to << "\n";
  co_await s.async_close(use_awaitable);
  etcd.close();
}

int main(int argc, char** argv) {
  if (argc != 5) {
    std::cerr << "usage: transfer ENDPOINT FROM TO ROUNDS\n";
    return 2;
  }
  asio::io_context ioc;
  coetcd::client etcd(ioc, {.endpoints = {argv[1]}});
  int rc = 0;
  asio::co_spawn(ioc, run(etcd, argv[2], argv[3], std::stoi(argv[4])), [&](std::exception_ptr e) {
    if (!e) return;
    rc = 1;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      std::cerr << "transfer failed: " << ex.what() << "\n";
    }
  });
  ioc.run();
  return rc;
}
