// coetcd-bench --checked: critical sections that update a counter in etcd, so the store itself
// tells whether two holders overlapped, whatever the bench's in-memory check could see.
//
// The in-memory check marks a holder inside from its grant to the moment it sends its release;
// a grant issued after that but before the release commits (which a broken hand-off could do) is
// invisible to it. A fenced read-modify-write is not: each holder reads the counter and writes
// value + 1 in a txn guarded by its hold's fence (mutex::hold::fence(), an election hold's, on its key's create
// revision). Two holders at once either both write the same value (a lost update: the counter
// ends below the writes that succeeded) or one is refused by its guard. Both are violations.
// A semaphore's holders overlap by design; there each holder adds 1 to a holders counter on
// entry and takes 1 away on exit with compare-and-swap, and a value above the permits is an
// over-admission.
#pragma once

#include <coetcd.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <system_error>

namespace bench {

/// The counter's value (0 when the key is absent) and its mod revision (0 then).
struct counter_value {
  std::int64_t value = 0, mod_revision = 0;
};

inline boost::asio::awaitable<counter_value> read_counter(coetcd::client& c, const std::string& key) {
  auto [ec, r] = co_await c.async_get(key, boost::asio::as_tuple(boost::asio::use_awaitable));
  if (ec) throw boost::system::system_error(ec, "checked: get " + key);
  if (r.kvs.empty()) co_return counter_value{};
  co_return counter_value{std::stoll(r.kvs.front().value), r.kvs.front().mod_revision};
}

/// Reads `key` and writes value + 1 only while `guard` holds. True when written, false when the
/// guard refused; throws on a transport or server error.
inline boost::asio::awaitable<bool> guarded_increment(coetcd::client& c, const std::string& key, coetcd::compare guard) {
  auto seen = co_await read_counter(c, key);
  coetcd::txn t;
  t.when(std::move(guard)).then(coetcd::txn_op::put(key, std::to_string(seen.value + 1)));
  auto [ec, r] = co_await c.async_txn(t, boost::asio::as_tuple(boost::asio::use_awaitable));
  if (ec) throw boost::system::system_error(ec, "checked: txn on " + key);
  co_return r.succeeded;
}

/// Adds `delta` to `key` with compare-and-swap on its mod revision, retried until it lands;
/// returns the new value.
inline boost::asio::awaitable<std::int64_t> cas_add(coetcd::client& c, const std::string& key, std::int64_t delta) {
  for (;;) {
    auto seen = co_await read_counter(c, key);
    coetcd::txn t;
    t.when(coetcd::compare::mod_revision(key) == seen.mod_revision)
        .then(coetcd::txn_op::put(key, std::to_string(seen.value + delta)));
    auto [ec, r] = co_await c.async_txn(t, boost::asio::as_tuple(boost::asio::use_awaitable));
    if (ec) throw boost::system::system_error(ec, "checked: cas on " + key);
    if (r.succeeded) co_return seen.value + delta;
  }
}

}  // namespace bench
