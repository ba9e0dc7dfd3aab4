// Lock and election writes of a client's sessions sent together in one txn (see txn_batcher.hpp).
#include "txn_batcher.hpp"
#include "key_prefix.hpp"

#include "convert.hpp"
#include "coro.hpp"

#include <boost/asio/post.hpp>

#include <algorithm>
#include <map>

namespace coetcd::detail {
namespace {

/// Keys `op` may write; false if it writes a range, which the batch cannot check for overlap.
bool written_keys(const txn_op& op, std::vector<std::string>& out) {
  struct visitor {
    std::vector<std::string>& out;
    bool operator()(const txn_op::get_op&) const { return true; }
    bool operator()(const txn_op::put_op& p) const {
      out.push_back(p.key);
      return true;
    }
    bool operator()(const txn_op::delete_op& d) const {
      out.push_back(d.key);
      return d.range_end.empty();
    }
    bool operator()(const std::shared_ptr<const txn>& t) const {
      bool ok = true;
      for (const auto& o : t->success()) ok = written_keys(o, out) && ok;
      for (const auto& o : t->failure()) ok = written_keys(o, out) && ok;
      return ok;
    }
  };
  return std::visit(visitor{out}, op.value());
}

/// Errors one operation of a batch can cause for all of it: each item is then sent alone.
bool caused_by_one_op(error_code ec) {
  return ec == error::lease_not_found || ec == error::duplicate_key_in_txn || ec == error::too_many_txn_ops ||
         ec == error::request_too_large || ec == error::invalid_argument || ec == error::empty_key ||
         ec == error::permission_denied;
}

}  // namespace

void txn_batcher::order_ties(std::vector<item>& batch) {
  std::map<std::string, std::vector<std::size_t>> shared;  // queue -> where its shared writes are
  for (std::size_t i = 0; i < batch.size(); ++i)
    if (batch[i].queue.shared && !batch[i].queue.prefix.empty() && !batch[i].keys.empty())
      shared[batch[i].queue.prefix].push_back(i);
  std::vector<std::size_t> order(batch.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  bool moved = false;
  for (auto& [prefix, at] : shared) {
    if (at.size() < 2) continue;
    auto by_key = at;
    std::stable_sort(by_key.begin(), by_key.end(), [&](std::size_t a, std::size_t b) {
      return *std::min_element(batch[a].keys.begin(), batch[a].keys.end()) <
             *std::min_element(batch[b].keys.begin(), batch[b].keys.end());
    });
    for (std::size_t k = 0; k < at.size(); ++k) order[at[k]] = by_key[k];
    moved = moved || by_key != at;
  }
  if (!moved) return;
  // Move-constructed into a new vector: Asio 1.81's any_completion_handler recurses on
  // move-assignment, which an in-place sort would do.
  std::vector<item> sorted;
  sorted.reserve(batch.size());
  for (auto i : order) sorted.push_back(std::move(batch[i]));
  batch = std::move(sorted);
}

void txn_batcher::submit(std::vector<txn_op> ops, write_queue queue, asio::any_completion_handler<void(outcome)> done) {
  if (client_.closed()) return fail(std::move(done));
  item it{std::move(ops), std::move(queue), {}, std::move(done), false};
  for (const auto& op : it.ops)
    if (!written_keys(op, it.keys)) it.alone = true;
  waiting_ops_ += it.ops.size();
  waiting_.push_back(std::move(it));
  schedule();
}

void txn_batcher::fail(asio::any_completion_handler<void(outcome)> done) {
  asio::post(client_.strand_, [done = std::move(done)]() mutable {
    std::move(done)(outcome{make_error_code(error::client_closed), {}, {}, false});
  });
}

void txn_batcher::close() {
  for (auto& i : waiting_) fail(std::move(i.done));
  waiting_.clear();
  waiting_ops_ = 0;
}

void txn_batcher::schedule() {
  if (flush_posted_ || !may_send()) return;
  // The wire is free and this write is the only one: it leaves now, as itself. A post costs a
  // turn of the event loop per request (a lone mutex, one worker, 8 interleaved runs: 949 -> 983
  // acq/s with completion_mode::thread, 1040 -> 1041 with poll). The writes that come after it in
  // this turn still leave together, beside it (see may_send).
  if (in_flight_ == 0 && waiting_.size() == 1 && !waiting_.front().alone &&
      client_.strand_.running_in_this_thread()) {
    auto batch = std::vector<item>();
    waiting_ops_ -= waiting_.front().ops.size();
    batch.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    return send(std::move(batch), true);
  }
  // Posted, not run now: writes made in this turn of the strand (a batch of completions
  // resuming many coroutines) leave together.
  flush_posted_ = true;
  asio::post(client_.strand_, [self = shared_from_this(), c = client_.shared_from_this()] {
    self->flush_posted_ = false;
    self->flush();
  });
}

void txn_batcher::flush() {
  while (may_send()) {
    std::vector<item> batch;
    std::size_t ops = 0;
    // Keys and queues used by the batch or by an item passed over: a later item touching one
    // waits too, so writes to one key leave in the order they came.
    std::set<std::string> keys;
    std::map<std::string, bool> queues;  // prefix -> an exclusive write claimed it
    auto touches = [&](const item& i) {
      if (!i.queue.prefix.empty())
        if (auto q = queues.find(i.queue.prefix); q != queues.end() && (q->second || !i.queue.shared)) return true;
      for (const auto& k : i.keys)
        if (keys.count(k)) return true;
      return false;
    };
    auto claim = [&](const item& i) {
      if (!i.queue.prefix.empty()) queues[i.queue.prefix] |= !i.queue.shared;
      keys.insert(i.keys.begin(), i.keys.end());
    };
    for (auto it = waiting_.begin(); it != waiting_.end() && ops < max_ops;) {
      // A key written by a batch still on the wire: etcd may apply two requests in either order.
      const bool on_wire = std::any_of(it->keys.begin(), it->keys.end(),
                                       [this](const std::string& k) { return keys_in_flight_.contains(k); });
      // An item passed over has claimed its keys and queue, also ahead of an empty batch; one
      // sent alone (a range, or a retry of a failed batch) waits for an empty wire, since its
      // keys do not say all it writes.
      bool take = !on_wire && !touches(*it) && (!it->alone || in_flight_ == 0) &&
                  (batch.empty() || (!it->alone && ops + it->ops.size() <= max_ops));
      claim(*it);
      if (!take) {
        ++it;
        continue;
      }
      ops += it->ops.size();
      waiting_ops_ -= it->ops.size();
      bool alone = it->alone;
      batch.push_back(std::move(*it));
      it = waiting_.erase(it);
      if (alone) break;
    }
    if (batch.empty()) return;  // each waits for a write on the wire; its end flushes again
    order_ties(batch);
    send(std::move(batch));
  }
}

void txn_batcher::send(std::vector<item> batch, bool eager) {
  ++in_flight_;
  eager_in_flight_ += eager;
  for (const auto& i : batch) keys_in_flight_.insert(i.keys.begin(), i.keys.end());
  auto resent = std::make_shared<bool>(false);
  // Every write here has the same effect applied twice in a row; those whose copy may also come
  // late (see write_queue) are resent when silent too.
  const bool late_safe =
      std::all_of(batch.begin(), batch.end(), [](const item& i) { return i.queue.late_copy_safe; });
  call_options o{.idempotent = true, .resend_when_silent = late_safe, .needs_token = true, .resent = resent};
  auto self = shared_from_this();
  auto c = client_.shared_from_this();
  const auto& first = batch.front().ops;
  if (batch.size() == 1 && first.size() == 1 && std::holds_alternative<txn_op::delete_op>(first.front().value())) {
    // A lone delete stays a DeleteRange: etcd applies it without a Txn's read-buffer copy.
    const auto& d = std::get<txn_op::delete_op>(first.front().value());
    start_unary<pb::DeleteRangeRequest, pb::DeleteRangeResponse>(
        c,
        [c](grpc::ClientContext* ctx, const pb::DeleteRangeRequest& r,
                                    grpc::CompletionQueue* q) { return c->kv_->PrepareAsyncDeleteRange(ctx, r, q); },
        prefixed(to_pb(d.key, d.range_end, d.options), c->key_prefix()), o,
        [self, c, batch = std::move(batch), resent, eager](error_code ec, pb::DeleteRangeResponse& resp) mutable {
          txn_result r;
          if (!ec) {
            auto del = from_pb(stripped(resp, c->key_prefix()));
            r.header = del.header;
            r.responses.push_back(op_result{std::move(del)});
          }
          self->finish(batch, ec, std::move(r), *resent, eager);
        });
    return;
  }
  // A lone nested txn goes as itself; anything else as the operations of one txn without a
  // compare, so each nested txn succeeds or fails by its own.
  bool unwrap = batch.size() == 1 && first.size() == 1 &&
                std::holds_alternative<std::shared_ptr<const txn>>(first.front().value());
  pb::TxnRequest req;
  if (unwrap) {
    req = to_pb(*std::get<std::shared_ptr<const txn>>(first.front().value()));
  } else {
    txn all;
    for (auto& i : batch)
      for (auto& op : i.ops) all.then(op);
    req = to_pb(all);
  }
  add_prefix(req, c->key_prefix());
  start_unary<pb::TxnRequest, pb::TxnResponse>(
      c,
      [c](grpc::ClientContext* ctx, const pb::TxnRequest& r, grpc::CompletionQueue* q) {
        return c->kv_->PrepareAsyncTxn(ctx, r, q);
      },
      std::move(req), o,
      [self, c, batch = std::move(batch), resent, unwrap, eager](error_code ec, pb::TxnResponse& resp) mutable {
        txn_result r;
        if (!ec) {
          r = from_pb(stripped(resp, c->key_prefix()));
          if (unwrap) {
            txn_result outer{r.header, true, {}};
            outer.responses.push_back(op_result{std::move(r)});
            r = std::move(outer);
          }
        }
        self->finish(batch, ec, std::move(r), *resent, eager);
      });
}

void txn_batcher::finish(std::vector<item>& batch, error_code ec, txn_result r, bool resent, bool eager) {
  --in_flight_;
  eager_in_flight_ -= eager;
  for (const auto& i : batch)
    for (const auto& k : i.keys) keys_in_flight_.erase(keys_in_flight_.find(k));
  if (ec && batch.size() > 1 && caused_by_one_op(ec)) {
    // Back to the front, each alone, in their order.
    for (auto it = batch.rbegin(); it != batch.rend(); ++it) {
      it->alone = true;
      waiting_ops_ += it->ops.size();
      waiting_.push_front(std::move(*it));
    }
  } else {
    std::size_t next = 0;
    for (auto& i : batch) {
      outcome out{ec, r.header, {}, resent};
      if (!ec) {
        for (std::size_t k = 0; k < i.ops.size(); ++k) {
          auto& res = r.responses.at(next++);
          // etcd leaves a nested txn's header empty: the batch's revision is its revision.
          if (auto* t = std::get_if<txn_result>(&res.value)) t->header = r.header;
          out.results.push_back(std::move(res));
        }
      }
      std::move(i.done)(std::move(out));
    }
  }
  schedule();
}

asio::awaitable<txn_batcher::outcome> batched_write(const std::shared_ptr<client_impl>& c, std::vector<txn_op> ops, write_queue queue,
                                                    std::shared_ptr<bool> resent) {
  // Named, not a temporary in the co_await: g++ 12.2 would destroy its shared_ptr twice.
  auto initiation = [impl = c](auto h, std::vector<txn_op> ops, write_queue queue) {
    impl->batcher().submit(std::move(ops), std::move(queue), std::move(h));
  };
  auto out = co_await asio::async_initiate<const asio::use_awaitable_t<>, void(txn_batcher::outcome)>(
      initiation, asio::use_awaitable, std::move(ops), std::move(queue));
  if (resent && out.resent) *resent = true;
  co_return out;
}

asio::awaitable<std::tuple<error_code, txn_result>> batched_txn(const std::shared_ptr<client_impl>& c, txn t, write_queue queue,
                                                                std::shared_ptr<bool> resent) {
  // Not a coroutine: the caller waits on the batcher with no frame of ours in between.
  auto initiation = [impl = c, resent = std::move(resent)](auto h, txn t, write_queue queue) {
    impl->batcher().submit_txn(std::move(t), std::move(queue),
                               [h = std::move(h), resent](error_code ec, txn_result r, bool was_resent) mutable {
                                 if (resent && was_resent) *resent = true;
                                 std::move(h)(ec, std::move(r));
                               });
  };
  return asio::async_initiate<decltype(as_result), void(error_code, txn_result)>(initiation, as_result, std::move(t),
                                                                               std::move(queue));
}

asio::awaitable<std::tuple<error_code, bool>> batched_delete(const std::shared_ptr<client_impl>& c, std::string key, std::shared_ptr<bool> resent) {
  std::vector<txn_op> ops{txn_op::del(key)};
  write_queue never_made_again;
  never_made_again.late_copy_safe = true;
  auto out = co_await batched_write(c, std::move(ops), std::move(never_made_again), std::move(resent));
  co_return std::tuple(out.ec, !out.ec && out.results.at(0).del().deleted > 0);
}

txn_op delete_op_of(const std::string& key, std::int64_t rev) {
  if (rev <= 0) return txn_op::del(key);
  return txn_op::nested(txn().when(compare::create_revision(key) == rev).then(txn_op::del(key)));
}

bool deleted_by(const op_result& r) {
  if (std::holds_alternative<delete_result>(r.value)) return r.del().deleted > 0;
  const auto& t = r.nested();
  return t.succeeded && !t.responses.empty() && t.responses.front().del().deleted > 0;
}

asio::awaitable<std::tuple<error_code, bool>> guarded_delete(const std::shared_ptr<client_impl>& c, std::string key,
                                                             std::int64_t rev, std::shared_ptr<bool> resent) {
  std::vector<txn_op> ops{delete_op_of(key, rev)};
  write_queue guarded;
  guarded.late_copy_safe = true;
  auto out = co_await batched_write(c, std::move(ops), std::move(guarded), std::move(resent));
  co_return std::tuple(out.ec, !out.ec && deleted_by(out.results.at(0)));
}

}  // namespace coetcd::detail
