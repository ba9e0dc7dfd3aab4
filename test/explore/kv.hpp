// The explorer's KV callers (test_explore): actors that put, get, delete, compare-and-set and
// write two keys in one txn on a few keys, through clients with short request deadlines behind
// held, cut and slowed links and one direct client in a namespace; every call recorded as a
// kv_op for the checkers of kv_model.hpp.
#pragma once

#include "kv_model.hpp"
#include "world.hpp"

// The checkers judge a failed write as the library tells its recipes to: "surely not applied"
// only for the errors this says so of; a test of that claim too (such a write must never show).
#include "../../src/recipes/write_outcome.hpp"

namespace coetcd::test::explore {

/// What the clients of a KV case told their event hooks; shared with the hooks, which may run
/// after the case's coroutine has ended.
struct kv_events {
  history* h = nullptr;  // null once the case is over
  std::vector<int> watch_resumed, streams_reopened, resent;
};

struct kv_world {
  explicit kv_world(world& w_) : w(w_), prefix(w_.name("kv/")), sentinel(prefix + "end") {
    for (int i = 0; i < 4; ++i) keys.push_back(prefix + "k" + std::to_string(i));
    events->h = &w.h;
  }
  kv_world(const kv_world&) = delete;
  kv_world& operator=(const kv_world&) = delete;
  ~kv_world() { events->h = nullptr; }

  world& w;
  std::string prefix;    // every key of the case is under it
  std::string sentinel;  // the last write of the case: a watch has seen everything once it sees it
  std::vector<std::string> keys;
  std::vector<client*> clients;     // the case's own (in w.clients, so an abandoned case closes them)
  std::vector<std::string> spaces;  // each one's key_prefix
  std::vector<kv_op> ops;           // every operation, in the order of their calls
  long values = 0, groups = 0;
  int writing = 0;  // actors still running
  std::array<int, 2> holds{}, cuts{};  // faults begun on each proxied link
  std::map<std::string, std::vector<std::string>> recent;  // per key: the last values seen, for cas
  std::shared_ptr<kv_events> events = std::make_shared<kv_events>();

  std::string fresh() { return "v" + std::to_string(++values); }
  /// `key` as client `ci` names it (without its namespace).
  std::string local(int ci, const std::string& key) const { return key.substr(spaces[static_cast<std::size_t>(ci)].size()); }
  void saw(const std::string& key, const std::optional<std::string>& v) {
    if (!v) return;
    auto& r = recent[key];
    r.push_back(*v);
    if (r.size() > 4) r.erase(r.begin());
  }

  /// Records the call of `o`; its index in `ops` (ops grows: hold indices, not references).
  std::size_t begin(int actor, kv_op o, const std::string& what) {
    o.actor = actor;
    o.op = w.h.invoke(actor, what, o.key, -1, -1, 0);
    o.call = w.h.last_seq();
    ops.push_back(std::move(o));
    return ops.size() - 1;
  }
  /// Records the completion of ops[i], whose answer fields are filled in when `ec` is 0.
  void finish(std::size_t i, error_code ec) {
    auto& o = ops[i];
    o.outcome = !ec ? kv_op::ok : detail::surely_not_applied(ec) ? kv_op::failed : kv_op::maybe;
    std::string text = kv_answer(o);
    if (ec) text = ec.message() + (o.kind == kv_op::get ? std::string() : " (" + text + ")");
    o.ret = w.h.complete(o.op, text);
    if (o.outcome == kv_op::ok && o.kind != kv_op::del) saw(o.key, o.changed() ? std::optional(o.value) : o.read);
  }
};

/// The case's clients: two behind the world's proxies with short deadlines (0.5 s and 1 s) that
/// also send an unanswered read again (after 200 and 300 ms), so the faults make requests time
/// out and go again; one direct, in the case's namespace, sending its keys without the prefix.
inline void make_kv_clients(kv_world& k) {
  for (int i = 0; i < 3; ++i) {
    client_options o = i < 2 ? via(*k.w.proxies[static_cast<std::size_t>(i)], ms(i == 0 ? 500 : 1000)) : options_for(server());
    o.resend_after = ms(i == 0 ? 200 : 300);
    if (i == 2) {
      o.request_timeout = ms(1000);
      o.key_prefix = k.prefix;
    }
    o.completions = completion_mode::thread;  // a polling client would take CPU from etcd
    k.events->watch_resumed.push_back(0);
    k.events->streams_reopened.push_back(0);
    k.events->resent.push_back(0);
    o.on_event = [ev = k.events, i](const event& e) {
      auto n = static_cast<std::size_t>(i);
      if (e.kind == event_kind::request_resent) ++ev->resent[n];
      if (e.kind != event_kind::watch_resumed && e.kind != event_kind::stream_reopened) return;
      ++(e.kind == event_kind::watch_resumed ? ev->watch_resumed : ev->streams_reopened)[n];
      if (ev->h) ev->h->note(-1, "client." + std::string(to_string(e.kind)), "watch@client" + std::to_string(i), -1, -1, 0, to_string(e));
    };
    k.w.clients.push_back(std::make_unique<client>(k.w.ioc, o));
    k.clients.push_back(k.w.clients.back().get());
    k.spaces.push_back(o.key_prefix);
  }
}

inline asio::awaitable<void> kv_put(kv_world& k, int actor, int ci, std::string key) {
  kv_op o;
  o.kind = kv_op::put;
  o.key = key;
  o.value = k.fresh();
  const std::string v = o.value, lk = k.local(ci, key);
  auto i = k.begin(actor, std::move(o), "put " + v);
  auto putting = k.clients[static_cast<std::size_t>(ci)]->async_put(lk, v, asio::as_tuple(use_awaitable));
  auto [ec, r] = co_await std::move(putting);
  if (!ec) k.ops[i].revision = r.header.revision;
  k.finish(i, ec);
}

inline asio::awaitable<void> kv_get(kv_world& k, int actor, int ci, std::string key) {
  kv_op o;
  o.key = key;
  const std::string lk = k.local(ci, key);
  auto i = k.begin(actor, std::move(o), "get");
  auto getting = k.clients[static_cast<std::size_t>(ci)]->async_get(lk, asio::as_tuple(use_awaitable));
  auto [ec, r] = co_await std::move(getting);
  if (!ec) {
    k.ops[i].revision = r.header.revision;
    if (!r.kvs.empty()) {
      k.ops[i].read = r.kvs.front().value;
      k.ops[i].read_mod = r.kvs.front().mod_revision;
    }
  }
  k.finish(i, ec);
}

inline asio::awaitable<void> kv_del(kv_world& k, int actor, int ci, std::string key) {
  kv_op o;
  o.kind = kv_op::del;
  o.key = key;
  const std::string lk = k.local(ci, key);
  auto i = k.begin(actor, std::move(o), "del");
  auto deleting = k.clients[static_cast<std::size_t>(ci)]->async_delete(lk, asio::as_tuple(use_awaitable));
  auto [ec, r] = co_await std::move(deleting);
  if (!ec) {
    k.ops[i].revision = r.header.revision;
    k.ops[i].deleted = r.deleted;
  }
  k.finish(i, ec);
}

/// A compare-and-set: when the value is `expect` (none: the key is absent) put a new one, else read it.
inline asio::awaitable<void> kv_cas(kv_world& k, int actor, int ci, std::string key, std::optional<std::string> expect) {
  kv_op o;
  o.kind = kv_op::cas;
  o.key = key;
  o.value = k.fresh();
  o.expect = expect;
  const std::string v = o.value, lk = k.local(ci, key);
  auto i = k.begin(actor, std::move(o), "cas " + value_text(expect) + "->" + v);
  txn t;
  if (expect) t.when(compare::value(lk) == *expect);
  else t.when(compare::version(lk) == 0);
  t.then(txn_op::put(lk, v)).otherwise(txn_op::get(lk));
  auto running = k.clients[static_cast<std::size_t>(ci)]->async_txn(t, asio::as_tuple(use_awaitable));
  auto [ec, r] = co_await std::move(running);
  if (!ec) {
    auto& x = k.ops[i];
    x.revision = r.header.revision;
    x.succeeded = r.succeeded;
    if (!r.succeeded && !r.responses.empty() && !r.responses.front().get().kvs.empty()) {
      x.read = r.responses.front().get().kvs.front().value;
      x.read_mod = r.responses.front().get().kvs.front().mod_revision;
    }
  }
  k.finish(i, ec);
}

/// Two keys put in one txn: one revision, two events a watch must deliver together.
inline asio::awaitable<void> kv_put_two(kv_world& k, int actor, int ci, std::string a, std::string b) {
  const long group = ++k.groups;
  std::array<std::size_t, 2> idx{};
  std::array<std::string, 2> keys{a, b}, values;
  txn t;
  for (std::size_t j = 0; j < 2; ++j) {
    kv_op o;
    o.kind = kv_op::put;
    o.key = keys[j];
    o.value = values[j] = k.fresh();
    o.group = group;
    idx[j] = k.begin(actor, std::move(o), "put " + values[j] + " (one txn with " + keys[1 - j] + ")");
    t.then(txn_op::put(k.local(ci, keys[j]), values[j]));
  }
  auto running = k.clients[static_cast<std::size_t>(ci)]->async_txn(t, asio::as_tuple(use_awaitable));
  auto [ec, r] = co_await std::move(running);
  for (auto i : idx) {
    if (!ec) k.ops[i].revision = r.header.revision;
    k.finish(i, ec);
  }
}

/// One random operation: put, get, delete, compare-and-set (expecting a value seen lately, an
/// older one, or absence), or two keys in one txn. Every choice is drawn before the call.
inline asio::awaitable<void> kv_step(kv_world& k, int actor, int ci, chooser& c) {
  const int kind = c.weighted({30, 25, 10, 25, 10});
  const int nk = static_cast<int>(k.keys.size());
  const int a = c.between(0, nk - 1), b = (a + c.between(1, nk - 1)) % nk;
  const int pick = c.between(0, 99);
  const std::string key = k.keys[static_cast<std::size_t>(a)];
  if (kind == 0) co_await kv_put(k, actor, ci, key);
  else if (kind == 1) co_await kv_get(k, actor, ci, key);
  else if (kind == 2) co_await kv_del(k, actor, ci, key);
  else if (kind == 4) co_await kv_put_two(k, actor, ci, key, k.keys[static_cast<std::size_t>(b)]);
  else {
    const auto& seen = k.recent[key];
    std::optional<std::string> expect;
    if (pick >= 15 && !seen.empty())
      expect = pick < 75 ? seen.back() : seen[static_cast<std::size_t>(pick) % seen.size()];
    co_await kv_cas(k, actor, ci, key, expect);
  }
}

inline asio::awaitable<void> kv_actor(std::shared_ptr<kv_world> kp, int actor, int ci, std::uint64_t seed) {
  kv_world& k = *kp;
  struct leaving {
    int& n;
    ~leaving() { --n; }
  };
  ++k.writing;
  leaving guard{k.writing};
  chooser c(seed);
  while (!k.w.stopping && clock_type::now() < k.w.deadline) {
    co_await kv_step(k, actor, ci, c);
    co_await sleep_for(ms(c.between(0, 40)));
  }
}

/// Faults on the link of proxied client `p`: first a hold longer than every request deadline and
/// a cut (in either order), so that in every run requests time out and streams resume; then
/// slowed (50-400 ms each way), held (0.2-1.5 s) or cut (50-600 ms) links at random.
inline asio::awaitable<void> kv_faults(std::shared_ptr<kv_world> kp, int p, std::uint64_t seed) {
  world& w = kp->w;
  chooser c(seed);
  auto& proxy = *w.proxies[static_cast<std::size_t>(p)];
  for (int i = 0; !w.stopping && clock_type::now() < w.deadline - std::chrono::seconds(1); ++i) {
    co_await sleep_for(ms(c.between(300, 1500)));
    const int drawn = c.weighted({35, 35, 30});
    const int kind = i < 2 ? (i + p) % 2 + 1 : drawn;  // 0 delay, 1 hold, 2 cut
    const auto length = i < 2 ? ms(kind == 1 ? 1200 : 400)
                              : ms(kind == 0 ? c.between(300, 2000) : kind == 1 ? c.between(200, 1500) : c.between(50, 600));
    const auto d = ms(c.between(50, 400));
    if (w.stopping) break;
    const char* what = kind == 0 ? "fault.delay" : kind == 1 ? "fault.hold" : "fault.cut";
    w.h.note(-1, what, "", -1, -1, 0, "client " + std::to_string(p) + " for " + std::to_string(length.count()) + " ms" +
                                          (kind == 0 ? ", " + std::to_string(d.count()) + " ms each way" : ""));
    if (kind == 0) proxy.delay(d);
    else if (kind == 1) proxy.hold();
    else proxy.cut();
    ++(kind == 1 ? kp->holds : kp->cuts)[static_cast<std::size_t>(p)];
    co_await sleep_for(length);
    proxy.restore();
    proxy.delay(ms(0));
    w.h.note(-1, "fault.end", "", -1, -1, 0, "client " + std::to_string(p));
  }
}

}  // namespace coetcd::test::explore
