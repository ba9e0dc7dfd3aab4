// Lock and election writes from all of a client's sessions, sent together. etcd pays per request
// (a gRPC call, a raft proposal, a Txn apply that copies its backend's read buffer) far more than
// per operation, and with a thousand sessions that work, not the disk, sets the lock rate. So
// while a few of these writes are on the wire the next ones wait, and leave in one Txn whose
// operations each keep their own compare as a nested txn. A write that finds the wire free
// leaves at once and as itself: a lone delete is still a DeleteRange.
#pragma once

#include "coro.hpp"

#include <boost/asio/any_completion_handler.hpp>

#include <list>
#include <set>
#include <string>
#include <vector>

namespace coetcd::detail {

/// Where a write may create a lock or election key (see txn_batcher::submit): the name's
/// prefix, or empty for writes that create none. `shared`: keys that may share a create
/// revision with each other (the read keys of an rw_mutex, which hold together anyway, and a
/// semaphore's acquisitions, which a batch sends in key order: see order_ties), but never with
/// a key of an exclusive write of the same prefix.
struct write_queue {
  std::string prefix;
  bool shared = false;
  /// A copy of this write applied late, after later writes, undoes nothing: a delete guarded by
  /// the key's create revision, or of a key never made again. Only such writes (and reads) are
  /// also resent when slow (client_options::resend_after), since the copy cancelled then may
  /// still be on its way (held in a partition, it arrives up to rafthttp's 5 s read timeout
  /// later). A put is never: a late one re-creates a key after its release, under a live lease.
  bool late_copy_safe = false;
  write_queue() = default;
  write_queue(std::string p, bool s = false) : prefix(std::move(p)), shared(s) {}
};

class txn_batcher : public std::enable_shared_from_this<txn_batcher> {
 public:
  struct outcome {
    error_code ec;
    response_header header;
    std::vector<op_result> results;  ///< one per op submitted; nested txns carry `header`
    bool resent = false;             ///< sent again after a failure that may have been applied
  };

  /// Owned by `c`; everything it starts keeps `c` alive.
  explicit txn_batcher(client_impl& c) : client_(c) {}

  /// Queues `ops`, which must have the same effect applied once or twice: they are resent on
  /// UNAVAILABLE, "no leader" or a leader change within the request deadline, so an election
  /// shows as a delay, not an error. `queue`: the prefix under which the ops may create a lock
  /// or election key, or empty. Two such keys created by one txn would share a create revision,
  /// and both would count as the oldest, so a batch holds one write per queue, and one per key.
  /// A shared write may join a batch with other shared writes of its queue.
  /// Not cancellable: `done` always gets the outcome. On strand.
  void submit(std::vector<txn_op> ops, write_queue queue, asio::any_completion_handler<void(outcome)> done);
  /// submit() of one txn: `done(error_code, txn_result, bool resent)` with the txn's own result.
  template <class Done>
  void submit_txn(txn t, write_queue queue, Done done) {
    std::vector<txn_op> ops;
    ops.push_back(txn_op::nested(std::move(t)));
    submit(std::move(ops), std::move(queue), [done = std::move(done)](outcome o) mutable {
      txn_result r;
      if (!o.ec) r = std::get<txn_result>(std::move(o.results.at(0).value));
      std::move(done)(o.ec, std::move(r), o.resent);
    });
  }
  /// The client is closing: every write not yet sent fails with client_closed (posted, so a
  /// stopped event loop destroys them with its queue instead of leaving them to hold the client).
  void close();

  /// One batch on the wire at a time, so the next writes gather behind it (besides a lone write
  /// sent at once: the writes of the same turn go beside it); more only while a full batch is
  /// waiting, up to this many, so a thousand sessions are not held to one batch per round trip.
  /// A write never goes while a batch on the wire writes one of its keys.
  static constexpr std::size_t max_in_flight = 16;
  /// Operations per batch, well under etcd's default --max-txn-ops (128), which also bounds
  /// each nested txn by what the outer one leaves.
  static constexpr std::size_t max_ops = 64;

 private:
  struct item {
    std::vector<txn_op> ops;
    write_queue queue;
    std::vector<std::string> keys;  // every key the ops may write
    asio::any_completion_handler<void(outcome)> done;
    bool alone = false;  // sent by itself: it writes a range, or its batch failed as a whole
  };

  bool may_send() const {
    return !waiting_.empty() &&
           (in_flight_ == eager_in_flight_ || (waiting_ops_ >= max_ops && in_flight_ < max_in_flight));
  }
  void fail(asio::any_completion_handler<void(outcome)> done);
  /// Puts each queue's shared writes in key order, where they stood in the batch. Their keys
  /// share the batch's create revision, and the rules order such a tie by key; the read of a
  /// nested txn sees the puts of the ops before it, not after. In key order, an acquisition's
  /// read shows every key of its tie that goes before its own, so a semaphore can decide from
  /// it; in arrival order, two could each count the other out and both hold. Items of a batch
  /// write disjoint keys, so the order changes nothing else.
  static void order_ties(std::vector<item>& batch);
  void schedule();
  void flush();
  void send(std::vector<item> batch, bool eager = false);
  void finish(std::vector<item>& batch, error_code ec, txn_result r, bool resent, bool eager);

  client_impl& client_;
  // A list: Asio 1.81's any_completion_handler recurses on move-assignment, which a deque's
  // erase does; a list only move-constructs.
  std::list<item> waiting_;
  std::size_t waiting_ops_ = 0;
  std::size_t in_flight_ = 0;
  // A lone write sent at once, without waiting for the end of the strand's turn (at most one):
  // it does not hold back the writes that come after it in the same turn.
  std::size_t eager_in_flight_ = 0;
  std::multiset<std::string> keys_in_flight_;  // every key the batches on the wire may write
  bool flush_posted_ = false;
};

/// One txn through the client's batcher (same effect applied twice, as for submit). `resent`,
/// when given, is set if it was sent more than once.
asio::awaitable<std::tuple<error_code, txn_result>> batched_txn(const std::shared_ptr<client_impl>& c, txn t, write_queue queue,
                                                                std::shared_ptr<bool> resent = {});
/// One delete of a key of our own through the batcher: completes with whether the key was there.
/// Only for keys never made again (a semaphore's acquisitions): it is a plain delete.
asio::awaitable<std::tuple<error_code, bool>> batched_delete(const std::shared_ptr<client_impl>& c, std::string key,
                                                             std::shared_ptr<bool> resent = {});
/// The delete that releases our `key` created at `rev`: a txn guarded by that create revision,
/// so a copy applied late (resent after a silence or an error while the first copy was held in
/// a partition) cannot delete a newer key of the same name, made by the same session for its
/// next lock. rev 0: a plain delete, for keys never made twice (a semaphore's acquisitions).
txn_op delete_op_of(const std::string& key, std::int64_t rev);
/// Whether the result of delete_op_of deleted the key.
bool deleted_by(const op_result& r);
/// delete_op_of through the batcher: completes with whether the key was there. Late-copy safe.
asio::awaitable<std::tuple<error_code, bool>> guarded_delete(const std::shared_ptr<client_impl>& c, std::string key,
                                                             std::int64_t rev, std::shared_ptr<bool> resent = {});
/// Several ops through the batcher, applied at one revision. `resent` as for batched_txn.
asio::awaitable<txn_batcher::outcome> batched_write(const std::shared_ptr<client_impl>& c, std::vector<txn_op> ops, write_queue queue,
                                                    std::shared_ptr<bool> resent = {});

}  // namespace coetcd::detail
