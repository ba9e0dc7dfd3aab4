// Fuzz target: async_lock_status's reading of a name's keys (queue_status): who holds, who waits.
#include "fuzz_check.hpp"

#include "core/lock_view.hpp"
#include "recipes/lock_status.hpp"

#include <algorithm>
#include <tuple>

namespace coetcd_fuzz {

// Lines: a name, then one key under it each: its suffix, and after the first space its value. A
// line starting with '&' shares the create revision of the one before (keys of one txn); a key
// already given is left out. Leases go 1, 2, 0 (none) in turn; lease 1 has a TTL, lease 2 is gone.
void lock_status(std::string_view in) {
  using coetcd::detail::is_own_key;
  const auto lines = split(in, '\n');
  const std::string name = lines[0].empty() ? std::string("n") : std::string(lines[0]);
  const std::string prefix = name + "/";
  std::vector<coetcd::key_value> kvs;
  std::int64_t rev = 0;
  for (std::size_t i = 1; i < lines.size(); ++i) {
    auto line = lines[i];
    if (line.starts_with('&') && rev > 0) line.remove_prefix(1);
    else ++rev;
    const auto space = line.find(' ');
    coetcd::key_value kv;
    kv.key = prefix + std::string(line.substr(0, space));
    if (std::any_of(kvs.begin(), kvs.end(), [&](const coetcd::key_value& k) { return k.key == kv.key; }))
      continue;  // etcd holds a key once
    if (space != std::string_view::npos) kv.value = std::string(line.substr(space + 1));
    kv.create_revision = kv.mod_revision = rev;
    kv.version = 1;
    kv.lease = static_cast<std::int64_t>(i % 3);
    kvs.push_back(std::move(kv));
  }
  std::map<std::int64_t, coetcd::lease_ttl_result> ttls;
  ttls[1].ttl = std::chrono::seconds(9);
  ttls[1].granted_ttl = std::chrono::seconds(60);
  ttls[2].ttl = std::chrono::seconds(-1);

  const auto st = coetcd::detail::queue_status(name, rev, kvs, ttls);
  FUZZ_CHECK(st.name == name && st.revision == rev);

  // Every key is listed once; the holder is the oldest of the name's own keys.
  const auto own = [&](const coetcd::lock_entry& e) { return is_own_key(prefix, e.key); };
  const bool any_own = std::any_of(kvs.begin(), kvs.end(), [&](const coetcd::key_value& kv) {
    return is_own_key(prefix, kv.key);
  });
  FUZZ_CHECK(st.holder.has_value() == any_own);
  FUZZ_CHECK((st.holder ? 1 : 0) + st.also_holding.size() + st.waiters.size() == kvs.size());
  std::vector<coetcd::lock_entry> listed(st.also_holding);
  listed.insert(listed.end(), st.waiters.begin(), st.waiters.end());
  if (st.holder) {
    FUZZ_CHECK(own(*st.holder) && st.holder->other_name.empty());
    for (const auto& e : listed)
      if (own(e))
        FUZZ_CHECK(std::tie(st.holder->create_revision, st.holder->key) < std::tie(e.create_revision, e.key));
    listed.push_back(*st.holder);
  }
  for (const auto& e : listed) {
    auto kv = std::find_if(kvs.begin(), kvs.end(), [&](const coetcd::key_value& k) { return k.key == e.key; });
    FUZZ_CHECK(kv != kvs.end() && kv->value == e.value && kv->lease == e.lease && kv->create_revision == e.create_revision);
    FUZZ_CHECK(e.ttl == (ttls.count(e.lease) ? ttls.at(e.lease).ttl : std::chrono::seconds(0)));
    // A longer name's key says which name it is of ("a//<lease>" is "a/"'s), and never holds.
    if (own(e)) {
      FUZZ_CHECK(e.other_name.empty());
    } else {
      FUZZ_CHECK(e.other_name.size() >= prefix.size() && e.other_name.starts_with(prefix) &&
                 e.key.starts_with(e.other_name + "/"));
      FUZZ_CHECK(std::count(st.nested_names.begin(), st.nested_names.end(), e.other_name) == 1);
    }
  }
  for (const auto& e : st.also_holding) FUZZ_CHECK(own(e));

  // Readers hold together behind a reading holder; acquisitions while their permits fit.
  FUZZ_CHECK(!(st.read_write && st.permits > 0));
  FUZZ_CHECK(st.also_holding.empty() || st.read_write || st.permits > 0);
  if (st.read_write) {
    for (const auto& e : listed)
      if (own(e)) FUZZ_CHECK(e.key.starts_with(prefix + "read/") || e.key.starts_with(prefix + "write/"));
    for (const auto& e : st.also_holding) FUZZ_CHECK(e.key.starts_with(prefix + "read/"));
    if (!st.holder->key.starts_with(prefix + "read/")) FUZZ_CHECK(st.also_holding.empty());
  }
  if (st.permits > 0) FUZZ_CHECK(st.permits_in_use >= 1 && st.permits_in_use <= st.permits);
  else FUZZ_CHECK(st.permits_in_use == 0);
}

}  // namespace coetcd_fuzz

COETCD_FUZZ_ENTRY(lock_status)
