// A service's configuration kept in memory: coetcd::cache lists /config-demo/ once, then follows
// it; reads cost no request, and a change made elsewhere reaches the reader of changes.
//   config_cache [ENDPOINT]
#include <coetcd.hpp>
#include <coetcd/cache.hpp>

#include <boost/asio.hpp>

#include <iostream>

namespace asio = boost::asio;
using asio::use_awaitable;

asio::awaitable<void> run(coetcd::client& etcd, coetcd::client& admin) {
  const std::string prefix = "/config-demo/";
  co_await admin.async_put(prefix + "rate-limit", "100", use_awaitable);
  co_await admin.async_put(prefix + "mode", "normal", use_awaitable);

  coetcd::cache config(etcd.get_executor(), etcd, prefix);  // one thread runs the io_context
  co_await config.async_wait_synced(use_awaitable);
  for (auto& kv : config.range()) std::cout << "cached " << kv.key << " = " << kv.value << "\n";

  // Another process (here: another client) changes the configuration.
  auto r = co_await admin.async_put(prefix + "rate-limit", "200", use_awaitable);
  co_await admin.async_delete(prefix + "mode", use_awaitable);
  auto update = co_await config.async_next(use_awaitable);
  while (!update.reset && update.events.size() < 2) {  // the two changes may come in one update or two
    auto more = co_await config.async_next(use_awaitable);
    if (more.reset) update = std::move(more);
    else for (auto& e : more.events) update.events.push_back(e);
  }
  if (update.reset) std::cout << "reset: re-read the cache\n";
  for (auto& e : update.events)
    std::cout << "change: " << (e.type == coetcd::watch_event::kind::put ? "put " : "delete ") << e.kv.key
              << (e.type == coetcd::watch_event::kind::put ? " = " + e.kv.value : "") << "\n";
  co_await config.async_wait_for(r.header.revision, use_awaitable);
  auto limit = config.get(prefix + "rate-limit");
  std::cout << "rate-limit is now " << (limit ? limit->value : "unset") << ", mode is "
            << (config.get(prefix + "mode") ? "set" : "gone") << " (read locally, no request)\n";
  co_await admin.async_delete(prefix, coetcd::delete_options{.prefix = true}, use_awaitable);
}

int main(int argc, char** argv) {
  asio::io_context ioc;
  const std::string endpoint = argc > 1 ? argv[1] : "127.0.0.1:2379";
  coetcd::client etcd(ioc, {.endpoints = {endpoint}}), admin(ioc, {.endpoints = {endpoint}});
  int rc = 0;
  asio::co_spawn(ioc, run(etcd, admin), [&](std::exception_ptr e) {
    etcd.close();
    admin.close();
    if (!e) return;
    rc = 1;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      std::cerr << "config_cache failed: " << ex.what() << "\n";
    }
  });
  ioc.run();
  return rc;
}
