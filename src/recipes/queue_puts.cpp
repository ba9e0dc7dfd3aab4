// queue and priority_queue: the put side. Batches of enqueues, each one txn of the put chain,
// and the put-back of items claimed for a dequeue that no longer wants them.
#include "recipes/item_queue.hpp"
#include "recipes/held_key.hpp"
#include "recipes/queue_ops.hpp"
#include "recipes/write_outcome.hpp"

#include <coetcd/client.hpp>
#include <coetcd/lease.hpp>

#include <boost/asio/steady_timer.hpp>

#include <charconv>
#include <cstdio>
#include <limits>
#include <map>
#include <set>

namespace coetcd::detail {

namespace {

std::string fixed(long long n, int width) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%0*lld", width, n);
  return buf;
}

// The puts of a FIFO batch: keys of rising nanoseconds, each created only if absent.
txn fifo_puts(queue_state& s, std::vector<queued_put>& batch) {
  txn t;
  for (auto& p : batch) {
    auto now = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    s.last_nanos = std::max<std::int64_t>(now, s.last_nanos + 1);
    p.key = s.name + "/" + std::to_string(s.last_nanos);
    t.when(compare::version(p.key) == 0);
    t.then(txn_op::put(p.key, p.value));
  }
  return t;
}

// The puts of a priority batch, as Go's newSequentialKV: per priority, the key after the last one
// under `name/PPPPP`, guarded by the mod revision of `__name/PPPPP` as of that read.
asio::awaitable<std::tuple<error_code, txn>> priority_puts(queue_state& s, std::vector<queued_put>& batch) {
  std::map<int, std::vector<queued_put*>> by_priority;
  for (auto& p : batch) by_priority[p.priority].push_back(&p);
  txn t;
  error_code failed;
  for (auto& [priority, items] : by_priority) {
    const auto prefix = s.prefix + fixed(priority, 5);
    get_options o;
    o.prefix = true;
    o.order = sort_order::descend;
    o.target = sort_target::key;
    o.limit = 1;
    auto [ec, r] = co_await get_on(s.impl, prefix, o);
    if (ec) {
      failed = ec;
      break;
    }
    std::int64_t next = 0;
    if (!r.kvs.empty()) {
      // A last key with no number, or one that leaves no room for this batch's, takes no puts.
      auto after = next_sequence(r.kvs.front().key);
      if (!after || *after > std::numeric_limits<std::int64_t>::max() - static_cast<std::int64_t>(items.size())) {
        failed = error::foreign_key;
        break;
      }
      next = *after;
    }
    const auto base = "__" + prefix;
    t.when(compare::mod_revision(base) < r.header.revision + 1);
    t.then(txn_op::put(base, ""));
    for (auto* p : items) {
      p->key = prefix + "/" + fixed(next++, 16);
      t.then(txn_op::put(p->key, p->value));
    }
  }
  co_return std::tuple{failed, std::move(t)};
}

// One batch of puts, to its outcome.
asio::awaitable<error_code> put_batch(queue_state& s, std::vector<queued_put>& batch) {
  error_code out = co_await make_receipt(s, s.puts);
  const auto batch_no = ++s.put_batches;
  for (int attempt = 0; !out; ++attempt) {
    txn t;
    if (s.priority) {
      auto [ec, built] = co_await priority_puts(s, batch);
      // foreign_key: the last key of a priority holds no sequence number; read again, it would still.
      if (ec && (fatal(ec) || ec == error::foreign_key || s.session->lost)) {
        out = s.session->lost ? make_error_code(error::session_lost) : ec;
        break;
      }
      if (ec) {
        co_await pause_for(s, attempt);
        continue;
      }
      t = std::move(built);
    } else {
      t = fifo_puts(s, batch);
    }
    t.otherwise(txn_op::get(s.puts.receipt));
    const auto tag = s.puts.next_tag();
    auto& mine = s.put_attempts.emplace_back(put_attempt{tag, batch_no, {}});
    for (auto& p : batch) mine.keys.push_back(p.key);
    auto linked = s.puts.link(std::move(t), tag, s.session->lease);
    auto sent = co_await send_chained(s, s.puts, linked, tag);
    if (sent.what == sent_outcome::applied) {
      s.put_attempts.clear();
      break;
    }
    if (sent.what == sent_outcome::applied_other) {
      // An earlier attempt's copy landed. One of this batch: its keys are where the items are.
      // One of a batch that ended without an answer (its callers were told outcome_unknown):
      // the chain has moved on, and this batch goes again as the next step. Either way no older
      // attempt can land any more (the receipt moved past the tag they compare).
      const put_attempt* landed = nullptr;
      for (auto& at : s.put_attempts)
        if (at.tag == sent.tag && at.batch == batch_no) landed = &at;
      if (landed)
        for (std::size_t i = 0; i < batch.size() && i < landed->keys.size(); ++i) batch[i].key = landed->keys[i];
      s.put_attempts.clear();
      if (landed) break;
      continue;
    }
    if (sent.what == sent_outcome::failed) out = sent.ec;
    // Refused: a key taken meanwhile (FIFO: the same nanoseconds elsewhere; priority: another put
    // at that priority since our read): choose the keys again.
  }
  co_return out;
}

}  // namespace

asio::awaitable<void> run_puts(std::shared_ptr<queue_state> s) {
  while (!s->waiting_puts.empty() && !s->failed) {
    std::vector<queued_put> batch;
    std::size_t bytes = 0;
    std::map<int, int> seen;
    while (!s->waiting_puts.empty() && batch.size() < s->options.max_batch) {
      auto& p = s->waiting_puts.front();
      // etcd takes 128 operations per branch (items, one base key per priority, the receipt) and
      // 1.5 MiB per request: a batch stops short of either.
      const bool new_priority = s->priority && !seen.count(p.priority);
      if (!batch.empty() && (batch.size() + seen.size() + (new_priority ? 1 : 0) + 2 > 120 ||
                             bytes + p.value.size() + 200 > 1024 * 1024))
        break;
      if (p.h && *p.h) {
        if (new_priority) seen.emplace(p.priority, 0);
        bytes += p.value.size() + 200;
        asio::get_associated_cancellation_slot(*p.h).clear();  // it leaves now: it runs to its outcome
        batch.push_back(std::move(p));
      }
      s->waiting_puts.pop_front();
    }
    if (batch.empty()) continue;
    auto ec = co_await put_batch(*s, batch);
    for (auto& p : batch) s->complete(p.h, ec, ec ? std::string() : p.key);
    if (ec == error::session_lost || s->session->lost) s->fail_all(error::session_lost);
  }
  s->puts.running = false;
  s->cleanup_if_idle();
}


namespace {

auto grant_on(const std::shared_ptr<client_impl>& c, std::int64_t ttl) {
  auto init = [c](handler<lease_grant_result> h, std::int64_t ttl) { start_lease_grant(c, ttl, 0, std::move(h)); };
  return asio::async_initiate<decltype(as_result), void(error_code, lease_grant_result)>(init, as_result, ttl);
}

// The priority of a priority queue's item key (`name/PPPPP/...`); an item of another layout
// goes back last.
int priority_of(const queue_state& s, const std::string& key) {
  int p = 0;
  auto digits = std::string_view(key).substr(s.prefix.size(), 5);
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), p);
  return ec == std::errc() && end == digits.data() + digits.size() && digits.size() == 5 ? p : 65535;
}

// The put-back at the items' old keys, each required free.
txn at_old_keys(const queue_state& s, const std::vector<candidate>& items) {
  txn t;
  std::set<std::string> guards;
  for (auto& c : items) {
    t.when(compare::version(c.key) == 0);
    t.then(txn_op::put(c.key, c.value));
    if (s.priority) guards.insert("__" + c.key.substr(0, s.prefix.size() + 5));
  }
  for (auto& g : guards) t.then(txn_op::put(g, ""));
  return t;
}

}  // namespace

namespace {

// Ends a put-back's lease, and its receipt with it: resent until answered (a revoke applies once
// however often it is sent), so the receipt does not outlive the put-back by the lease's TTL.
asio::awaitable<void> end_lease(std::shared_ptr<client_impl> c, std::int64_t lease) {
  for (int attempt = 0; attempt < 12; ++attempt) {
    auto [ec, r] = co_await lease_revoke_on(c, lease);
    if (!ec || ec == error::lease_not_found || fatal(ec)) break;
    asio::steady_timer pause(c->strand_, retry_pause(std::min(attempt, 4)));
    co_await pause.async_wait(as_result);
  }
}

// True when the error says the request was refused for good (resending it would not help).
bool refused_for_good(const error_code& ec) {
  return fatal(ec) || (surely_not_applied(ec) && ec != error::endpoints_unreachable && ec != error::invalid_auth_token &&
                       ec != error::lease_not_found);
}

// One txn's worth of put-back (see put_back).
asio::awaitable<void> put_back_chunk(queue_state& s, std::vector<candidate> items) {
  std::int64_t lease = 0;
  for (int attempt = 0; !lease; ++attempt) {
    // A grant resent after no answer may leave a second lease: it holds nothing and expires.
    auto [ec, g] = co_await grant_on(s.impl, 60);
    if (!ec) lease = g.id;
    else if (refused_for_good(ec)) co_return;
    else co_await pause_for(s, attempt);
  }
  const auto receipt = s.takes.receipt + "/back." + std::to_string(++s.put_backs);
  std::vector<queued_put> fresh;  // the items at new keys, once an old key was taken
  bool unanswered = false;
  for (int attempt = 0;; ++attempt) {
    txn t;
    if (fresh.empty()) {
      t = at_old_keys(s, items);
    } else if (s.priority) {
      auto [ec, built] = co_await priority_puts(s, fresh);
      if (ec && (fatal(ec) || ec == error::foreign_key)) break;
      if (ec) {
        co_await pause_for(s, attempt);
        continue;
      }
      t = std::move(built);
    } else {
      t = fifo_puts(s, fresh);
    }
    put_options po;
    po.lease = lease;
    t.when(compare::version(receipt) == 0).then(txn_op::put(receipt, "", po)).otherwise(txn_op::get(receipt));
    auto [ec, r] = co_await txn_on(s.impl, std::move(t));
    if (!ec && (r.succeeded || !r.responses.front().get().kvs.empty())) break;  // applied, or a copy was
    if (!ec) {
      // A key taken meanwhile: new keys, as an enqueue chooses them (at the back).
      if (fresh.empty())
        for (auto& c : items) fresh.push_back(queued_put{c.value, s.priority ? priority_of(s, c.key) : -1, {}, nullptr});
      continue;
    }
    // The lease is gone: a copy that landed before could not be told from none.
    if (ec == error::lease_not_found && unanswered) break;
    if (refused_for_good(ec)) break;
    if (ec == error::lease_not_found) {
      auto [gec, g] = co_await grant_on(s.impl, 60);
      if (!gec) lease = g.id;
    }
    if (!surely_not_applied(ec)) unanswered = true;
    co_await pause_for(s, attempt);
  }
  // The receipt goes with the lease; a copy still on its way then fails as a whole. The next
  // dequeue need not wait for that.
  asio::co_spawn(s.impl->strand_, end_lease(s.impl, lease), asio::detached);
}

}  // namespace

asio::awaitable<void> put_back(queue_state& s, std::vector<candidate> items) {
  // Within etcd's limits, as run_puts' batches: 128 operations (each item, a guard key per
  // priority, the receipt) and 1.5 MiB a request.
  while (!items.empty()) {
    std::vector<candidate> chunk;
    std::size_t bytes = 0, n = 0;
    for (; n < items.size() && n < 60; ++n) {
      const auto size = items[n].key.size() + items[n].value.size() + 200;
      if (n > 0 && bytes + size > 1024 * 1024) break;
      bytes += size;
    }
    chunk.assign(std::make_move_iterator(items.begin()), std::make_move_iterator(items.begin() + static_cast<std::ptrdiff_t>(n)));
    items.erase(items.begin(), items.begin() + static_cast<std::ptrdiff_t>(n));
    co_await put_back_chunk(s, std::move(chunk));
  }
}

}  // namespace coetcd::detail
