// The snippets of docs/operations.md, compiled so they follow the API (scripts/snippets copies them there).
#include <coetcd.hpp>
#include <coetcd/maintenance.hpp>

#include <boost/asio.hpp>

#include <cstdio>
#include <string_view>

namespace asio = boost::asio;

asio::awaitable<void> backup(coetcd::maintenance& ops, std::string_view ep) {
  // [snapshot]
  coetcd::snapshot_progress progress = [](std::uint64_t received, std::uint64_t total) {
    std::printf("%llu of %llu bytes\n", (unsigned long long)received, (unsigned long long)total);
  };
  auto saved = co_await ops.async_snapshot("backup.db", {.endpoint = ep}, progress, asio::use_awaitable);
  // [snapshot]
}
