// queue and priority_queue: batches of puts and claims, each one txn of a receipt chain, resent
// until answered; the candidates a Range or a watch showed, claimed by mod revision.
#include "recipes/item_queue.hpp"
#include "recipes/held_key.hpp"
#include "recipes/queue_ops.hpp"
#include "recipes/write_outcome.hpp"

#include <coetcd/priority_queue.hpp>
#include <coetcd/watcher.hpp>

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>

#include <cstdio>
#include <map>

namespace coetcd::detail {

txn txn_chain::link(txn t, std::int64_t lease) const {
  if (applied == 0) t.when(compare::version(receipt) == 0);
  else t.when(compare::value(receipt) == std::to_string(applied));
  put_options po;
  po.lease = lease;
  t.then(txn_op::put(receipt, std::to_string(applied + 1), po));
  return t;
}

bool txn_chain::was_applied(const txn_result& r) const {
  if (r.responses.empty()) return false;
  const auto& kvs = r.responses.front().get().kvs;
  return !kvs.empty() && kvs.front().value == std::to_string(applied + 1);
}

void queue_state::complete(std::shared_ptr<handler<std::string>>& h, error_code ec, std::string v) {
  if (h && *h) impl->complete(std::move(*h), ec, std::move(v));
  h.reset();
}

void queue_state::start() {
  wake = std::make_shared<asio::steady_timer>(impl->strand_, asio::steady_timer::time_point::max());
  if (session->lost) return fail_all(error::session_lost);
  listener = session->listen([w = weak_from_this()] {
    if (auto s = w.lock()) s->fail_all(error::session_lost);
  });
}

void queue_state::fail_all(error_code ec) {
  if (!failed) failed = ec;
  for (auto& p : waiting_puts) complete(p.h, ec, {});
  waiting_puts.clear();
  for (auto& h : takers) complete(h, ec, {});
  takers.clear();
  if (wake) wake->cancel();
}

void queue_state::enqueue(queued_put p) {
  if (failed || closed) return complete(p.h, failed ? failed : make_error_code(asio::error::operation_aborted), {});
  waiting_puts.push_back(std::move(p));
  if (!puts.running) {
    puts.running = true;
    asio::co_spawn(impl->strand_, run_puts(shared_from_this()), asio::detached);
  }
}

void queue_state::dequeue(std::shared_ptr<handler<std::string>> h) {
  if (failed || closed) return complete(h, failed ? failed : make_error_code(asio::error::operation_aborted), {});
  takers.push_back(std::move(h));
  if (!takes.running) {
    takes.running = true;
    asio::co_spawn(impl->strand_, run_takes(shared_from_this()), asio::detached);
  }
}

void queue_state::close() {
  closed = true;
  for (auto& p : waiting_puts) complete(p.h, asio::error::operation_aborted, {});
  waiting_puts.clear();
  for (auto& h : takers) complete(h, asio::error::operation_aborted, {});
  takers.clear();
  if (wake) wake->cancel();
  cleanup_if_idle();
}

void queue_state::cleanup_if_idle() {
  if (!closed || puts.running || takes.running) return;
  session->unlisten(listener);
  // The receipts go with the lease anyway; deleting them now keeps a long session's keys few.
  auto t = txn().then(txn_op::del(puts.receipt)).then(txn_op::del(takes.receipt));
  asio::co_spawn(impl->strand_, [](std::shared_ptr<client_impl> c, txn t) -> asio::awaitable<void> {
    auto [ec, r] = co_await txn_on(c, std::move(t));
    (void)ec;
  }(impl, std::move(t)), asio::detached);
}

namespace {

using namespace asio::experimental::awaitable_operators;

std::string fixed(long long n, int width) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%0*lld", width, n);
  return buf;
}

// What a txn of a chain came to after any number of sends.
enum class sent_outcome { applied, refused_compare, failed };

struct chain_result {
  sent_outcome what = sent_outcome::failed;
  error_code ec;
  txn_result r;  // for refused_compare: the `otherwise` reads (the receipt's first)
};

// Sends the chain's txn until it is answered: an unanswered send is sent again (the chain's
// compare makes the copies apply once) while the session lives. A compare refused because the
// receipt is gone (the session ended) after an unanswered send cannot tell: outcome_unknown.
asio::awaitable<chain_result> send_chained(queue_state& s, txn_chain& chain, txn t) {
  chain_result out;
  bool unanswered = false;
  for (int attempt = 0;; ++attempt) {
    auto [ec, r] = co_await txn_on(s.impl, t);
    if (!ec && (r.succeeded || chain.was_applied(r))) {
      ++chain.applied;
      out.what = sent_outcome::applied;
      break;
    }
    if (!ec) {
      const auto& receipt = r.responses.front().get().kvs;
      bool chain_intact = chain.applied == 0 ? receipt.empty() : (!receipt.empty() && receipt.front().value == std::to_string(chain.applied));
      if (chain_intact) {
        out.what = sent_outcome::refused_compare;
        out.r = std::move(r);
      } else {
        out.ec = unanswered ? make_error_code(error::outcome_unknown) : make_error_code(error::session_lost);
      }
      break;
    }
    if (ec == error::lease_not_found || s.session->lost) {
      out.ec = unanswered ? make_error_code(error::outcome_unknown) : make_error_code(error::session_lost);
      break;
    }
    if (surely_not_applied(ec) && ec != error::endpoints_unreachable && !unanswered) {
      out.ec = ec;
      break;
    }
    if (!surely_not_applied(ec)) unanswered = true;
    asio::steady_timer pause(s.impl->strand_, retry_pause(std::min(attempt, 4)));
    co_await pause.async_wait(as_result);
  }
  co_return out;
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
    long long next = 0;
    if (!r.kvs.empty()) {
      const auto& last = r.kvs.front().key;
      next = std::atoll(last.c_str() + last.rfind('/') + 1) + 1;
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
  error_code out;
  for (int attempt = 0;; ++attempt) {
    txn t;
    if (s.priority) {
      auto [ec, built] = co_await priority_puts(s, batch);
      if (ec && (fatal(ec) || s.session->lost)) {
        out = s.session->lost ? make_error_code(error::session_lost) : ec;
        break;
      }
      if (ec) {
        asio::steady_timer pause(s.impl->strand_, retry_pause(std::min(attempt, 4)));
        co_await pause.async_wait(as_result);
        continue;
      }
      t = std::move(built);
    } else {
      t = fifo_puts(s, batch);
    }
    t.otherwise(txn_op::get(s.puts.receipt));
    auto sent = co_await send_chained(s, s.puts, s.puts.link(std::move(t), s.session->lease));
    if (sent.what == sent_outcome::applied) break;
    if (sent.what == sent_outcome::failed) {
      out = sent.ec;
      break;
    }
    // A key taken meanwhile (FIFO: the same nanoseconds elsewhere; priority: another put at that
    // priority since our read): choose the keys again.
  }
  co_return out;
}

}  // namespace

asio::awaitable<void> run_puts(std::shared_ptr<queue_state> s) {
  while (!s->waiting_puts.empty() && !s->failed) {
    std::vector<queued_put> batch;
    std::size_t priorities = 0;
    std::map<int, int> seen;
    while (!s->waiting_puts.empty() && batch.size() < s->options.max_batch) {
      auto& p = s->waiting_puts.front();
      // etcd takes 128 operations per branch: items, one base key per priority, the receipt.
      if (s->priority && !seen.count(p.priority) && batch.size() + priorities + 2 > 120) break;
      if (p.h && *p.h) {
        if (s->priority && seen.emplace(p.priority, 0).second) ++priorities;
        asio::get_associated_cancellation_slot(*p.h).clear();  // it leaves now: it runs to its outcome
        batch.push_back(std::move(p));
      }
      s->waiting_puts.pop_front();
    }
    if (batch.empty()) continue;
    auto ec = co_await put_batch(*s, batch);
    for (auto& p : batch) s->complete(p.h, ec, ec ? std::string() : p.key);
  }
  s->puts.running = false;
  s->cleanup_if_idle();
}

namespace {

// Reads the first items (by create revision, or by key for priorities); with none, waits for a
// put under the prefix and takes the puts it shows.
asio::awaitable<void> fetch(queue_state& s, int attempt) {
  get_options o;
  o.prefix = true;
  o.order = sort_order::ascend;
  o.target = s.priority ? sort_target::key : sort_target::create_revision;
  o.limit = static_cast<std::int64_t>(std::max(s.options.max_batch, s.takers.size()));
  auto [ec, r] = co_await get_on(s.impl, s.prefix, o);
  if (ec) {
    if (fatal(ec)) s.fail_all(ec);
    asio::steady_timer pause(s.impl->strand_, retry_pause(std::min(attempt, 4)));
    co_await pause.async_wait(as_result);
    co_return;
  }
  for (auto& kv : r.kvs) s.candidates.push_back({kv.key, kv.value, kv.mod_revision});
  if (!s.candidates.empty() || s.takers.empty()) co_return;
  watch_options wo;
  wo.prefix = true;
  wo.start_revision = r.header.revision + 1;
  wo.no_delete = true;
  auto [wec, w] = co_await watch_on(s.impl, s.prefix, wo);
  if (wec) co_return;
  auto wake = s.wake;
  wake->expires_at(asio::steady_timer::time_point::max());
  auto got = co_await (w.async_next(as_result) || wake->async_wait(as_result));
  if (got.index() != 0) co_return;
  auto& [nec, batch] = std::get<0>(got);
  if (nec) co_return;
  for (auto& e : batch.events)
    if (e.type == watch_event::kind::put && e.kv.version == 1) s.candidates.push_back({e.kv.key, e.kv.value, e.kv.mod_revision});
  // Priority order is by key, not by arrival: a batch of puts is read again in order.
  if (s.priority && s.candidates.size() > 1) s.candidates.clear();
}

struct claim_result {
  error_code ec;
  bool claimed = false;
};

// Claims `batch` in one txn: each deleted only at the mod revision we saw. When another consumer
// took one first, the txn takes none: those still there go back to the candidates.
asio::awaitable<claim_result> claim(queue_state& s, std::vector<candidate>& batch) {
  claim_result out;
  txn t;
  for (auto& c : batch) {
    t.when(compare::mod_revision(c.key) == c.mod_revision);
    t.then(txn_op::del(c.key));
  }
  t.otherwise(txn_op::get(s.takes.receipt));
  for (auto& c : batch) t.otherwise(txn_op::get(c.key));
  auto sent = co_await send_chained(s, s.takes, s.takes.link(std::move(t), s.session->lease));
  if (sent.what == sent_outcome::applied) {
    out.claimed = true;
  } else if (sent.what == sent_outcome::failed) {
    out.ec = sent.ec;
  } else {
    for (std::size_t i = batch.size(); i-- > 0;) {
      const auto& kvs = sent.r.responses.at(i + 1).get().kvs;
      if (!kvs.empty() && kvs.front().mod_revision == batch[i].mod_revision) s.candidates.push_front(std::move(batch[i]));
    }
  }
  co_return out;
}

}  // namespace

asio::awaitable<void> run_takes(std::shared_ptr<queue_state> s) {
  int attempt = 0;
  for (;;) {
    std::erase_if(s->takers, [](auto& h) { return !h || !*h; });
    while (!s->claimed.empty() && !s->takers.empty()) {
      s->complete(s->takers.front(), {}, std::move(s->claimed.front()));
      s->takers.pop_front();
      s->claimed.pop_front();
    }
    if (s->takers.empty() || s->failed) break;
    if (s->candidates.empty()) {
      co_await fetch(*s, attempt++);
      continue;
    }
    attempt = 0;
    const auto n = std::min({s->takers.size(), s->candidates.size(), s->options.max_batch});
    std::vector<candidate> batch;
    std::vector<std::shared_ptr<handler<std::string>>> assigned;
    for (std::size_t i = 0; i < n; ++i) {
      batch.push_back(std::move(s->candidates.front()));
      s->candidates.pop_front();
      assigned.push_back(std::move(s->takers.front()));
      s->takers.pop_front();
    }
    auto out = co_await claim(*s, batch);
    if (out.claimed) {
      // A taker cancelled while its claim was on the wire gets its item all the same; one whose
      // handler is gone (the queue closed) leaves it to the next taker.
      for (std::size_t i = 0; i < n; ++i) {
        if (assigned[i] && *assigned[i]) s->complete(assigned[i], {}, std::move(batch[i].value));
        else s->claimed.push_back(std::move(batch[i].value));
      }
    } else if (out.ec) {
      for (auto& h : assigned) s->complete(h, out.ec, {});
      if (out.ec == error::session_lost || out.ec == error::outcome_unknown) s->fail_all(error::session_lost);
    } else {
      for (std::size_t i = n; i-- > 0;) s->takers.push_front(std::move(assigned[i]));
    }
  }
  s->takes.running = false;
  s->cleanup_if_idle();
}

}  // namespace coetcd::detail
