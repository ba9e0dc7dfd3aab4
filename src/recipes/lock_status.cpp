// async_lock_status: the queue of a lock or election name as the server has it, for people
// asking "who holds this?" — one Range of the name's prefix and one LeaseTimeToLive per lease.
#include "core/coro.hpp"
#include "core/lock_view.hpp"
#include "recipes/lock_status.hpp"

#include <coetcd/lock_status.hpp>

#include <algorithm>
#include <map>
#include <tuple>

namespace coetcd::detail {

namespace {

asio::awaitable<std::tuple<error_code, lock_status>> read_status(std::shared_ptr<client_impl> c, std::string name) {
  co_await honour_every_cancellation();
  const std::string prefix = name + "/";
  auto [ec, r] = co_await get_on(c, prefix, get_options{.prefix = true});
  if (ec) co_return std::make_tuple(ec, lock_status{.name = std::move(name)});
  std::map<std::int64_t, lease_ttl_result> ttls;
  for (const auto& kv : r.kvs) {
    if (kv.lease == 0 || ttls.count(kv.lease)) continue;
    auto [tec, t] = co_await lease_ttl_on(c, kv.lease);
    if (tec) co_return std::make_tuple(tec, lock_status{.name = std::move(name)});
    ttls.emplace(kv.lease, std::move(t));
  }
  co_return std::make_tuple(error_code{}, queue_status(std::move(name), r.header.revision, std::move(r.kvs), ttls));
}

}  // namespace

lock_status queue_status(std::string name, std::int64_t revision, std::vector<key_value> kvs,
                         const std::map<std::int64_t, lease_ttl_result>& ttls) {
  lock_status st;
  st.name = std::move(name);
  st.revision = revision;
  const std::string prefix = st.name + "/";
  // Keys made in one txn share a create revision; the recipes order those by key.
  std::sort(kvs.begin(), kvs.end(), [](const key_value& a, const key_value& b) {
    return std::tie(a.create_revision, a.key) < std::tie(b.create_revision, b.key);
  });
  const std::string reads = prefix + "read/", writes = prefix + "write/";
  auto is_read = [&](const key_value& kv) { return kv.key.starts_with(reads); };
  // Keys of longer names (is_own_key) are listed but neither hold nor decide what the name is.
  auto own = [&](const key_value& kv) { return is_own_key(prefix, kv.key); };
  const bool any_own = std::any_of(kvs.begin(), kvs.end(), own);
  st.read_write = any_own && std::all_of(kvs.begin(), kvs.end(), [&](const key_value& kv) {
    return !own(kv) || kv.key.starts_with(reads) || kv.key.starts_with(writes);
  });
  // A semaphore when every key is an acquisition and all agree on the permits.
  {
    permit_tally all(prefix);
    for (const auto& kv : kvs) all.add(kv);
    bool fits = false;
    if (any_own && !all.turn(all.permits(), fits)) st.permits = all.permits();
  }
  permit_tally taken(prefix);
  // Readers hold together while no writer is older: the run of read keys at the queue's head.
  // Acquisitions of a semaphore hold while theirs and every older one's permits fit.
  bool readers_hold = st.read_write;  // until the first own key that is not a reader's
  bool permits_fit = st.permits > 0;
  for (auto& kv : kvs) {
    const bool nested = !own(kv);
    bool holds_too = readers_hold && !nested && is_read(kv);
    if (!holds_too && !nested) readers_hold = false;
    if (permits_fit && !nested) {
      const auto before = taken.used();
      taken.add(kv);
      (void)taken.turn(st.permits, permits_fit);
      if (permits_fit) st.permits_in_use += taken.used() - before;
      holds_too = permits_fit;
    }
    lock_entry e;
    e.key = std::move(kv.key);
    e.value = std::move(kv.value);
    e.lease = kv.lease;
    e.create_revision = kv.create_revision;
    if (auto it = ttls.find(kv.lease); it != ttls.end()) {
      e.ttl = it->second.ttl;
      e.granted_ttl = it->second.granted_ttl;
    }
    // "a/b/<lease>" under "a/": a key of the longer name "a/b". Go's and etcdctl's lockers of
    // "a" queue behind it; coetcd's do not, so it never holds "a".
    if (nested) {
      auto suffix = std::string_view(e.key).substr(prefix.size());
      e.other_name = prefix + std::string(suffix.substr(0, suffix.rfind('/')));
      if (std::find(st.nested_names.begin(), st.nested_names.end(), e.other_name) == st.nested_names.end())
        st.nested_names.push_back(e.other_name);
      st.waiters.push_back(std::move(e));
    } else if (!st.holder) st.holder = std::move(e);
    else if (holds_too) st.also_holding.push_back(std::move(e));
    else st.waiters.push_back(std::move(e));
  }
  return st;
}

void start_lock_status(const std::shared_ptr<client_impl>& c, std::string name, handler<lock_status> h) {
  if (name.empty()) return fail(c, std::move(h), error::empty_key);
  spawn_result_op(c, read_status(c, std::move(name)), std::move(h));
}

}  // namespace coetcd::detail
