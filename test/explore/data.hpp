// The explorer's data cases (test_explore_data): what they share — etcd's own record of every
// change under the case's names, read by the judge through one watch from the case's first
// revision, each key's versions looked up by revision, and how a recorded value is printed.
#pragma once

#include "check.hpp"
#include "schedule.hpp"

#include <exception>

namespace coetcd::test::explore {

/// Every change under a prefix as etcd applied it, from the revision after the first read on:
/// the judge's watch (never faulted) writes it down as the case runs.
struct etcd_record {
  std::string prefix;
  std::int64_t first = 0;  // the first revision recorded; `initial` is the prefix just before it
  std::int64_t seen = 0;   // every change of the prefix up to this revision is in `events`
  std::map<std::string, key_value> initial;
  std::vector<watch_event> events;  // in revision order
  std::optional<error_code> ended;  // how the watch ended, once it has
  watcher watch;
  std::string sentinel() const { return prefix + "~end"; }
};
using record_ptr = std::shared_ptr<etcd_record>;

inline asio::awaitable<void> follow_record(record_ptr r) {
  // Left by break, not co_return: g++ 12 destroys loop-scoped objects twice on a co_return.
  for (;;) {
    auto next = r->watch.async_next(asio::as_tuple(use_awaitable));
    auto [ec, batch] = co_await std::move(next);
    if (ec) {
      r->ended = ec;
      break;
    }
    for (auto& e : batch.events) {
      r->seen = std::max(r->seen, e.kv.mod_revision);
      r->events.push_back(std::move(e));
    }
  }
}

/// Reads the prefix and starts recording its changes from the next revision. Not one of the
/// world's coroutines (drain() does not wait for it): finish_record() ends it.
inline asio::awaitable<record_ptr> start_record(world& w, std::string prefix) {
  auto r = std::make_shared<etcd_record>();
  r->prefix = std::move(prefix);
  auto reading = w.judge->async_get(r->prefix, get_options{.prefix = true}, use_awaitable);
  auto now = co_await std::move(reading);
  for (auto& kv : now.kvs) r->initial.emplace(kv.key, kv);
  r->first = now.header.revision + 1;
  r->seen = now.header.revision;
  watch_options o;
  o.prefix = true;
  o.start_revision = r->first;
  auto watching = w.judge->async_watch(r->prefix, o, use_awaitable);
  r->watch = co_await std::move(watching);
  asio::co_spawn(w.ioc, follow_record(r), asio::detached);
  co_return r;
}

/// Puts a sentinel key under the prefix and waits up to `limit` for its change to be recorded:
/// then the record holds every change made before. Whether it came; the sentinel goes again and
/// the recording stops either way (its own changes are left out of `events`).
inline asio::awaitable<bool> finish_record(world& w, record_ptr r, ms limit = ms(10000)) {
  // Named: an operation of use_awaitable starts when awaited, so its string_view arguments must
  // still point at something then.
  const std::string sentinel = r->sentinel();
  auto putting = w.judge->async_put(sentinel, "end", put_options{}, use_awaitable);
  auto put = co_await std::move(putting);
  const auto until = clock_type::now() + limit;
  while (r->seen < put.header.revision && !r->ended && clock_type::now() < until) co_await sleep_for(ms(20));
  const bool complete = r->seen >= put.header.revision;
  // Its follower ends before the case does, so the watcher goes while its client is alive.
  r->watch.close();
  for (int i = 0; i < 100 && !r->ended; ++i) co_await sleep_for(ms(20));
  std::erase_if(r->events, [&](const watch_event& e) {
    return e.kv.key == sentinel || e.kv.mod_revision >= put.header.revision;
  });
  auto deleting = w.judge->async_delete(sentinel, delete_options{}, asio::as_tuple(use_awaitable));
  co_await std::move(deleting);
  co_return complete;
}

/// The recorded versions of each key: what it held at any revision of the record.
class versions {
 public:
  /// A version: the revision it began at, and the key then (none: absent, a delete).
  using version = std::pair<std::int64_t, std::optional<key_value>>;

  explicit versions(const etcd_record& r) {
    for (auto& [k, kv] : r.initial) of_[k].push_back({r.first - 1, kv});
    for (auto& e : r.events)
      of_[e.kv.key].push_back(
          {e.kv.mod_revision, e.type == watch_event::kind::put ? std::optional<key_value>(e.kv) : std::nullopt});
  }
  /// The key at `revision` (none: absent then, or before anything was recorded of it).
  std::optional<key_value> at(const std::string& key, std::int64_t revision) const {
    auto it = of_.find(key);
    if (it == of_.end()) return std::nullopt;
    std::optional<key_value> out;
    for (auto& [rev, kv] : it->second) {
      if (rev > revision) break;
      out = kv;
    }
    return out;
  }
  /// Every key present at `revision` whose name starts with `prefix`.
  std::map<std::string, key_value> state_at(std::int64_t revision, const std::string& prefix = "") const {
    std::map<std::string, key_value> out;
    for (auto& [k, vs] : of_)
      if (k.rfind(prefix, 0) == 0)
        if (auto kv = at(k, revision)) out.emplace(k, *kv);
    return out;
  }
  const std::vector<version>& of(const std::string& key) const {
    static const std::vector<version> none;
    auto it = of_.find(key);
    return it == of_.end() ? none : it->second;
  }

 private:
  std::map<std::string, std::vector<version>> of_;
};

/// The error a coroutine's exception carries (io_error for one that is not a system_error).
inline error_code code_of(std::exception_ptr e) {
  try {
    if (e) std::rethrow_exception(e);
  } catch (const boost::system::system_error& se) {
    return se.code();
  } catch (...) {
    return make_error_code(boost::system::errc::io_error);
  }
  return {};
}

inline std::string text_of(const std::optional<std::string>& v) { return v ? "\"" + *v + "\"" : "(absent)"; }

inline std::string text_of(const std::optional<key_value>& kv) {
  if (!kv) return "(absent)";
  return "\"" + kv->value + "\" (mod " + std::to_string(kv->mod_revision) + ", create " +
         std::to_string(kv->create_revision) + ", version " + std::to_string(kv->version) + ")";
}

/// Whether two recorded keys are the same version of the same key.
inline bool same_version(const key_value& a, const key_value& b) {
  return a.key == b.key && a.value == b.value && a.mod_revision == b.mod_revision &&
         a.create_revision == b.create_revision && a.version == b.version && a.lease == b.lease;
}

/// The first difference between two states of a prefix, or "" when they are equal.
inline std::string state_difference(const std::map<std::string, key_value>& got,
                                    const std::map<std::string, key_value>& want) {
  for (auto& [k, kv] : want) {
    auto it = got.find(k);
    if (it == got.end()) return k + ": missing, etcd had " + text_of(std::optional<key_value>(kv));
    if (!same_version(it->second, kv))
      return k + ": " + text_of(std::optional<key_value>(it->second)) + ", etcd had " + text_of(std::optional<key_value>(kv));
  }
  for (auto& [k, kv] : got)
    if (!want.count(k)) return k + ": " + text_of(std::optional<key_value>(kv)) + ", absent in etcd";
  return "";
}

/// `n` distinct entries of `from`, drawn by `c`.
inline std::vector<std::string> pick_distinct(chooser& c, std::vector<std::string> from, int n) {
  for (int i = 0; i < n && i < static_cast<int>(from.size()); ++i)
    std::swap(from[static_cast<std::size_t>(i)], from[static_cast<std::size_t>(c.between(i, static_cast<int>(from.size()) - 1))]);
  from.resize(std::min(from.size(), static_cast<std::size_t>(n)));
  return from;
}

/// The case's one-line summary, printed by the runner.
inline void summary(world& w, const std::string& text) { w.h.note(-1, "summary", "", -1, -1, 0, text); }

}  // namespace coetcd::test::explore
