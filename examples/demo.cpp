// coetcd demo: a few KV operations, a transaction, a lease kept alive and a watch, all with co_await.
#include <coetcd.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <cstdlib>
#include <iostream>

namespace asio = boost::asio;
using asio::use_awaitable;

asio::awaitable<void> demo(coetcd::client& etcd) {
  auto put = co_await etcd.async_put("/demo/greeting", "hello from coetcd", use_awaitable);
  std::cout << "put /demo/greeting at revision " << put.header.revision << "\n";

  auto got = co_await etcd.async_get("/demo/greeting", use_awaitable);
  std::cout << "get /demo/greeting -> " << got.kvs.at(0).value << "\n";

  // Watch the prefix from the next revision, then change it.
  auto w = co_await etcd.async_watch("/demo/", {.prefix = true, .start_revision = put.header.revision + 1},
                                     use_awaitable);
  auto created = co_await etcd.async_txn(
      coetcd::txn()
          .when(coetcd::compare::version("/demo/counter") == 0)
          .then(coetcd::txn_op::put("/demo/counter", "1"))
          .otherwise(coetcd::txn_op::get("/demo/counter")),
      use_awaitable);
  std::cout << "txn: counter " << (created.succeeded ? "created" : "already existed") << "\n";

  auto batch = co_await w.async_next(use_awaitable);
  for (const auto& e : batch.events)
    std::cout << "watch: " << (e.type == coetcd::watch_event::kind::put ? "PUT " : "DELETE ") << e.kv.key
              << " = " << e.kv.value << " (revision " << e.kv.mod_revision << ")\n";

  auto lease = co_await etcd.async_lease_grant(std::chrono::seconds(5), use_awaitable);
  auto keep = etcd.keep_alive(lease.id, lease.ttl);
  co_await etcd.async_put("/demo/ephemeral", "lives while kept alive", {.lease = lease.id}, use_awaitable);
  auto ttl = co_await etcd.async_lease_time_to_live(lease.id, true, use_awaitable);
  std::cout << "lease " << std::hex << lease.id << std::dec << " ttl " << ttl.ttl.count() << "s, keys: " << ttl.keys.size()
            << "\n";
  co_await etcd.async_lease_revoke(lease.id, use_awaitable);
  auto lost = co_await keep.async_wait_lost(use_awaitable);  // completes when the lease is gone
  std::cout << "lease revoked; keepalive reports: " << lost.cause.message() << "\n";
  co_await etcd.async_delete("/demo/", {.prefix = true}, use_awaitable);
  std::cout << "cleaned up /demo/\n";
  etcd.close();
}

int main(int argc, char** argv) {
  asio::io_context ioc;
  coetcd::client_options opts;
  if (argc > 1) opts.endpoints = {argv[1]};
  else if (const char* e = std::getenv("COETCD_ENDPOINTS")) opts.endpoints = {e};
  coetcd::client etcd(ioc, opts);
  int rc = 0;
  asio::co_spawn(ioc, demo(etcd), [&](std::exception_ptr e) {
    if (!e) return;
    rc = 1;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      std::cerr << "demo failed: " << ex.what() << "\n";
    }
  });
  ioc.run();
  return rc;
}
