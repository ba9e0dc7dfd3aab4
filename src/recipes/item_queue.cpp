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

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <limits>
#include <map>

namespace coetcd::detail {

txn txn_chain::link(txn t, const std::string& tag, std::int64_t lease) const {
  t.when(compare::value(receipt) == applied);
  put_options po;
  po.lease = lease;
  t.then(txn_op::put(receipt, tag, po));
  return t;
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
  for (auto& t : takers) complete(t.h, ec, {});
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

void queue_state::dequeue(taker t) {
  if (failed || closed) return complete(t.h, failed ? failed : make_error_code(asio::error::operation_aborted), {});
  takers.push_back(std::move(t));
  if (!takes.running) {
    takes.running = true;
    asio::co_spawn(impl->strand_, run_takes(shared_from_this()), asio::detached);
  }
}

void queue_state::close() {
  if (closed) return;
  closed = true;
  for (auto& p : waiting_puts) complete(p.h, asio::error::operation_aborted, {});
  waiting_puts.clear();
  for (auto& t : takers) complete(t.h, asio::error::operation_aborted, {});
  takers.clear();
  if (wake) wake->cancel();
  cleanup_if_idle();
}

void queue_state::cleanup_if_idle() {
  if (!closed || puts.running || takes.running) return;
  session->unlisten(listener);
  // The receipts go with the lease anyway; deleting them now keeps a long session's keys few.
  // A late copy of a chained txn then finds no receipt to compare with, and does nothing.
  auto t = txn().then(txn_op::del(puts.receipt)).then(txn_op::del(takes.receipt));
  asio::co_spawn(impl->strand_, [](std::shared_ptr<client_impl> c, txn t) -> asio::awaitable<void> {
    auto [ec, r] = co_await txn_on(c, std::move(t));
    (void)ec;
  }(impl, std::move(t)), asio::detached);
}

std::optional<std::int64_t> next_sequence(std::string_view last_key) {
  // Go: fmt.Sscanf(last segment, "%d"), an error when it finds no number or one past 64 bits.
  auto seq = last_key.substr(last_key.rfind('/') + 1);  // no '/': npos + 1, the whole key
  if (seq.size() > 1 && seq[0] == '+' && seq[1] != '-') seq.remove_prefix(1);  // from_chars takes no '+'
  std::int64_t n = 0;
  auto [end, ec] = std::from_chars(seq.data(), seq.data() + seq.size(), n);
  // Go then adds 1 as it is; past the largest int64 that wraps to a negative key.
  if (ec != std::errc() || n == std::numeric_limits<std::int64_t>::max()) return std::nullopt;
  return n + 1;
}

asio::awaitable<void> pause_for(queue_state& s, int attempt) {
  asio::steady_timer pause(s.impl->strand_, retry_pause(std::min(attempt, 4)));
  co_await pause.async_wait(as_result);
}

namespace {

// The chain is broken (its receipt is gone with the lease): the step's outcome is known only if
// every attempt of it was answered.
error_code broken(const txn_chain& chain) {
  return chain.unanswered ? make_error_code(error::outcome_unknown) : make_error_code(error::session_lost);
}

}  // namespace

asio::awaitable<error_code> make_receipt(queue_state& s, txn_chain& chain) {
  error_code out;
  put_options po;
  po.lease = s.session->lease;
  for (int attempt = 0; !chain.ready; ++attempt) {
    auto t = txn().when(compare::version(chain.receipt) == 0).then(txn_op::put(chain.receipt, "0", po));
    auto [ec, r] = co_await txn_on(s.impl, std::move(t));
    if (!ec) {
      chain.ready = true;  // made now, or by an earlier copy of this txn
    } else if (ec == error::lease_not_found || s.session->lost) {
      out = error::session_lost;
    } else if (surely_not_applied(ec) && ec != error::endpoints_unreachable) {
      out = ec;
    }
    if (out) break;
    if (!chain.ready) co_await pause_for(s, attempt);
  }
  co_return out;
}

asio::awaitable<chain_result> send_chained(queue_state& s, txn_chain& chain, const txn& t, const std::string& tag) {
  chain_result out;
  for (int attempt = 0;; ++attempt) {
    auto [ec, r] = co_await txn_on(s.impl, t);
    if (!ec && r.succeeded) {
      out.what = sent_outcome::applied;
      chain.applied_as(tag);
      break;
    }
    if (!ec) {
      const auto& kvs = r.responses.front().get().kvs;
      const std::string receipt = kvs.empty() ? std::string() : kvs.front().value;
      const std::string step = std::to_string(chain.step + 1) + ".";
      if (receipt == tag) {
        out.what = sent_outcome::applied;  // a copy of this one
        chain.applied_as(tag);
      } else if (!receipt.empty() && receipt.rfind(step, 0) == 0) {
        out.what = sent_outcome::applied_other;  // a late copy of an earlier attempt
        out.tag = receipt;
        chain.applied_as(receipt);
      } else if (!receipt.empty() && receipt == chain.applied) {
        out.what = sent_outcome::refused;
        out.r = std::move(r);
      } else {
        out.ec = broken(chain);
      }
      break;
    }
    if (ec == error::lease_not_found || s.session->lost) {
      out.ec = broken(chain);
      break;
    }
    // Refused for what it is (too large, not permitted): every copy would be. After an
    // unanswered send, that earlier copy may still land: the outcome is unknown, and the chain's
    // next txn learns from the receipt whether it did (see claim_attempts and put_attempts).
    // A token refused is resent as an outage is: the client authenticates again.
    if (surely_not_applied(ec) && ec != error::endpoints_unreachable && ec != error::invalid_auth_token) {
      out.ec = chain.unanswered ? make_error_code(error::outcome_unknown) : ec;
      break;
    }
    if (!surely_not_applied(ec)) chain.unanswered = true;
    co_await pause_for(s, attempt);
  }
  co_return out;
}

namespace {

using namespace asio::experimental::awaitable_operators;

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
    co_await pause_for(s, attempt);
    co_return;
  }
  for (auto& kv : r.kvs) s.candidates.push_back({kv.key, kv.value, kv.mod_revision, kv.create_revision});
  // Items put in one txn share a create revision; etcd's sort leaves their order open. Our keys
  // rise within a txn, so (create revision, key) is the order they were enqueued in.
  if (!s.priority)
    std::stable_sort(s.candidates.begin(), s.candidates.end(), [](const candidate& a, const candidate& b) {
      return a.create_revision != b.create_revision ? a.create_revision < b.create_revision : a.key < b.key;
    });
  if (!s.candidates.empty() || s.takers.empty()) co_return;
  watch_options wo;
  wo.prefix = true;
  wo.start_revision = r.header.revision + 1;
  wo.no_delete = true;
  auto [wec, w] = co_await watch_on(s.impl, s.prefix, wo);
  if (wec) {
    co_await pause_for(s, attempt);
    co_return;
  }
  // Checked in the same strand turn as the wait starts: a close, a loss or the last taker's
  // cancel that came while the watch was being made would have found no wait to cut short.
  if (s.takers.empty() || s.failed || s.closed) co_return;
  auto wake = s.wake;
  wake->expires_at(asio::steady_timer::time_point::max());
  auto got = co_await (w.async_next(as_result) || wake->async_wait(as_result));
  if (got.index() != 0) co_return;
  auto& [nec, batch] = std::get<0>(got);
  if (nec) {
    co_await pause_for(s, attempt);
    co_return;
  }
  // A watch batch is in revision order, and within one revision in key order: enqueue order.
  // Priority order is by key, not by arrival: more than one put is read again in order.
  for (auto& e : batch.events)
    if (e.type == watch_event::kind::put && e.kv.version == 1)
      s.candidates.push_back({e.kv.key, e.kv.value, e.kv.mod_revision, e.kv.create_revision});
  if (s.priority && s.candidates.size() > 1) s.candidates.clear();
}

// Claims `batch` in one txn: each deleted only at the mod revision we saw. When another consumer
// took one first, the txn takes none: those still there go back to the candidates. Returns the
// items claimed, in order: this batch's, or an earlier attempt's whose late copy landed.
asio::awaitable<std::tuple<error_code, std::vector<candidate>>> claim(queue_state& s, std::vector<candidate>& batch) {
  std::vector<candidate> values;
  error_code ec = co_await make_receipt(s, s.takes);
  if (!ec) {
    txn t;
    for (auto& c : batch) {
      t.when(compare::mod_revision(c.key) == c.mod_revision);
      t.then(txn_op::del(c.key));
    }
    t.otherwise(txn_op::get(s.takes.receipt));
    for (auto& c : batch) t.otherwise(txn_op::get(c.key));
    const auto tag = s.takes.next_tag();
    s.claim_attempts.emplace_back(tag, batch);
    auto linked = s.takes.link(std::move(t), tag, s.session->lease);
    auto sent = co_await send_chained(s, s.takes, linked, tag);
    if (sent.what == sent_outcome::applied || sent.what == sent_outcome::applied_other) {
      const auto& won = sent.what == sent_outcome::applied ? tag : sent.tag;
      std::vector<candidate>* taken = nullptr;
      for (auto& [t2, b] : s.claim_attempts)
        if (t2 == won) taken = &b;
      if (taken) {
        values = *taken;
        // What this attempt held but did not take goes back, unless the winner took it too.
        if (taken != &s.claim_attempts.back().second)
          for (std::size_t i = batch.size(); i-- > 0;)
            if (std::none_of(taken->begin(), taken->end(), [&](const candidate& c) { return c.key == batch[i].key; }))
              s.candidates.push_front(std::move(batch[i]));
      } else {
        ec = error::outcome_unknown;  // not ours to tell (never seen: every attempt of a step is kept)
      }
      s.claim_attempts.clear();
    } else if (sent.what == sent_outcome::failed) {
      ec = sent.ec;
    } else {
      // Refused: an item's mod revision moved, for good, so no copy of this attempt can land.
      s.claim_attempts.pop_back();
      for (std::size_t i = batch.size(); i-- > 0;) {
        const auto& kvs = sent.r.responses.at(i + 1).get().kvs;
        if (!kvs.empty() && kvs.front().mod_revision == batch[i].mod_revision) s.candidates.push_front(std::move(batch[i]));
      }
    }
  }
  co_return std::tuple{ec, std::move(values)};
}

}  // namespace

asio::awaitable<void> run_takes(std::shared_ptr<queue_state> s) {
  int attempt = 0;
  for (;;) {
    std::erase_if(s->takers, [](auto& t) { return !t.h || !*t.h; });
    while (!s->claimed.empty() && !s->takers.empty()) {
      // A taker cancelled whose removal has not reached the strand yet is told so, as a claim's.
      auto& t = s->takers.front();
      if (t.cancelled && *t.cancelled) {
        s->complete(t.h, asio::error::operation_aborted, {});
      } else {
        s->complete(t.h, {}, std::move(s->claimed.front().value));
        s->claimed.pop_front();
      }
      s->takers.pop_front();
    }
    if (!s->claimed.empty()) {
      // Claimed for nobody now: back into the queue, for any consumer. Kept here, they would
      // wait for a dequeue of this object that may never come, and go with it.
      std::vector<candidate> back(std::make_move_iterator(s->claimed.begin()), std::make_move_iterator(s->claimed.end()));
      s->claimed.clear();
      co_await put_back(*s, std::move(back));
      continue;
    }
    if (s->takers.empty() || s->failed || s->closed) break;
    if (s->candidates.empty()) {
      co_await fetch(*s, attempt++);
      continue;
    }
    attempt = 0;
    const auto n = std::min({s->takers.size(), s->candidates.size(), s->options.max_batch});
    std::vector<candidate> batch;
    std::vector<taker> assigned;
    for (std::size_t i = 0; i < n; ++i) {
      batch.push_back(std::move(s->candidates.front()));
      s->candidates.pop_front();
      assigned.push_back(std::move(s->takers.front()));
      s->takers.pop_front();
    }
    auto [ec, values] = co_await claim(*s, batch);
    // A priority queue reads again before each claim: a more urgent item may have come.
    if (s->priority) s->candidates.clear();
    if (ec) {
      for (auto& t : assigned) s->complete(t.h, ec, {});
      if (ec == error::session_lost || s->session->lost) s->fail_all(error::session_lost);
      continue;
    }
    // Items claimed go to the takers in order; a taker cancelled while its claim was on the wire
    // is told so and its item goes to the next taker (or back into the queue); takers left over
    // wait again in front.
    std::deque<candidate> items(std::make_move_iterator(values.begin()), std::make_move_iterator(values.end()));
    for (auto& t : assigned) {
      if (!t.h || !*t.h) continue;
      if (t.cancelled && *t.cancelled) s->complete(t.h, asio::error::operation_aborted, {});
      else if (!items.empty()) {
        s->complete(t.h, {}, std::move(items.front().value));
        items.pop_front();
      }
    }
    for (auto it = items.rbegin(); it != items.rend(); ++it) s->claimed.push_front(std::move(*it));
    for (std::size_t i = assigned.size(); i-- > 0;)
      if (assigned[i].h && *assigned[i].h) s->takers.push_front(std::move(assigned[i]));
  }
  // Takers still here when the loop ends on a loss or a close are told so, never left waiting.
  for (auto& t : s->takers) s->complete(t.h, s->failed ? s->failed : make_error_code(asio::error::operation_aborted), {});
  s->takers.clear();
  s->takes.running = false;
  s->cleanup_if_idle();
}

}  // namespace coetcd::detail
