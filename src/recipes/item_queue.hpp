// The engine of queue and priority_queue: puts and claims in batches, each batch one txn chained
// to the last by a receipt key, so a resent txn is never applied twice. Not API.
#pragma once

#include "core/coro.hpp"
#include "core/session_state.hpp"

#include <coetcd/queue.hpp>

#include <atomic>
#include <deque>
#include <optional>
#include <random>
#include <string_view>

namespace coetcd::detail {

/// A chain of txns that apply once each, however often they are sent: each compares the chain's
/// receipt key (under the session's lease) with the tag of the last txn applied and puts its own
/// tag, "<step>.<attempt>". An unanswered txn is sent again as it is; one rebuilt after a refusal
/// (another consumer took an item, another producer a key) is a new attempt of the same step. A
/// refused txn reads the receipt: its own tag means a copy of it was applied; another attempt's
/// tag of the same step means that attempt's late copy was (the caller then takes its outcome);
/// the last step's tag means nothing was. The receipt is made ("0") before the first step, so an
/// absent receipt always means the lease is gone.
struct txn_chain {
  std::string receipt;
  bool ready = false;          // the receipt exists
  std::uint64_t step = 0;      // the last step applied
  std::string applied = "0";   // its tag
  int attempt = 0;             // attempts of the next step so far
  bool unanswered = false;     // an attempt of the next step went without an answer
  bool running = false;        // a coroutine works through the chain's queue

  std::string next_tag() { return std::to_string(step + 1) + "." + std::to_string(++attempt); }
  /// `t` with the chain's compare and the receipt put tagged `tag` added.
  txn link(txn t, const std::string& tag, std::int64_t lease) const;
  void applied_as(std::string tag) {
    applied = std::move(tag);
    ++step;
    attempt = 0;
    unanswered = false;
  }
};

struct queued_put {
  std::string value;
  int priority = -1;  // -1: the FIFO queue
  std::string key;    // chosen when its batch is built
  std::shared_ptr<handler<std::string>> h;
};

struct candidate {
  std::string key, value;
  std::int64_t mod_revision = 0, create_revision = 0;
};

struct put_attempt {
  std::string tag;
  std::uint64_t batch = 0;
  std::vector<std::string> keys;
};

struct taker {
  std::shared_ptr<handler<std::string>> h;
  std::shared_ptr<std::atomic<bool>> cancelled;  // set by its slot, read on the strand
};

struct queue_state : std::enable_shared_from_this<queue_state> {
  std::shared_ptr<session_state> session;
  std::shared_ptr<client_impl> impl;
  std::string name, prefix;  // prefix: name + "/"
  bool priority = false;
  queue_options options;
  std::minstd_rand spread{std::random_device{}()};
  std::int64_t last_nanos = 0;  // FIFO keys rise strictly within this object

  txn_chain puts, takes;
  std::deque<queued_put> waiting_puts;
  std::deque<taker> takers;          // waiting dequeues, oldest first
  std::deque<candidate> candidates;  // items seen, in dequeue order, not yet claimed by us
  /// Items claimed with no taker for them (its taker was cancelled with the claim on the wire, or
  /// a late copy of an earlier attempt claimed more): dequeues waiting here take these first,
  /// and those left go back into the queue (put_back) before the takes go on.
  std::deque<candidate> claimed;
  std::uint64_t put_backs = 0;  // names each put_back's receipt
  /// The candidates of each attempt of the claim chain's next step, by tag (see txn_chain); kept
  /// across claims that failed, since a copy of theirs may still land.
  std::vector<std::pair<std::string, std::vector<candidate>>> claim_attempts;
  /// The keys of each attempt of the put chain's next step, with the batch it put.
  std::vector<put_attempt> put_attempts;
  std::uint64_t put_batches = 0;
  std::shared_ptr<asio::steady_timer> wake;  // cut short when a taker arrives or the session ends
  bool closed = false;
  error_code failed;  // the session's end: every later operation fails with it
  std::uint64_t listener = 0;

  // All on the client's strand.
  void start();  // listens for the session's end
  void enqueue(queued_put p);
  void dequeue(taker t);
  void close();  // the object is gone: nothing new; the receipts go once the chains are idle
  void fail_all(error_code ec);
  void complete(std::shared_ptr<handler<std::string>>& h, error_code ec, std::string v);
  void cleanup_if_idle();
};

/// The sequence number after `last_key`, the last item key of one priority: its last segment
/// read as Go's newSequentialKV reads it (fmt.Sscanf "%d": a sign, digits, then anything), plus
/// 1. Nothing when that segment starts with no number, or the next does not fit in 64 bits
/// (where Go fails the put too, or wraps to a negative key).
std::optional<std::int64_t> next_sequence(std::string_view last_key);

/// What a txn of a chain came to.
enum class sent_outcome { applied, applied_other, refused, failed };

struct chain_result {
  sent_outcome what = sent_outcome::failed;
  std::string tag;  // applied_other: the attempt whose copy was applied
  error_code ec;    // failed
  txn_result r;     // refused: the `otherwise` reads (the receipt's first)
};

/// Makes the chain's receipt ("0", under the lease) if it is not there yet; resent until answered.
asio::awaitable<error_code> make_receipt(queue_state& s, txn_chain& chain);
/// Sends one attempt of the chain's next step until it is answered (an unanswered send goes again
/// as it is: the chain's compare makes its copies apply once) while the session lives.
asio::awaitable<chain_result> send_chained(queue_state& s, txn_chain& chain, const txn& t, const std::string& tag);
/// The pause before retry `attempt` of a queue's request.
asio::awaitable<void> pause_for(queue_state& s, int attempt);

asio::awaitable<void> run_puts(std::shared_ptr<queue_state> s);
asio::awaitable<void> run_takes(std::shared_ptr<queue_state> s);

/// Puts items claimed for nobody back into the queue: each at its old key if that is free (for
/// a priority, bumping the priority's guard key so a producer that read before does not
/// overwrite it), else at a new key as an enqueue would choose. Exactly once, also when the
/// session is gone: the txn puts a receipt under a lease of its own and requires it absent, so
/// a copy that lands late finds the receipt, or, once the lease is revoked or expired, fails as
/// a whole. In txns within etcd's limits (60 items, 1 MiB), a lease and receipt each. Items are
/// lost only when the put-back is refused for good (the client closed, permission denied: a
/// priority put-back writes the guard key, a new key is refused as foreign) or cannot learn its
/// outcome before its lease's 60 s run out. On the strand; awaited by run_takes.
asio::awaitable<void> put_back(queue_state& s, std::vector<candidate> items);

}  // namespace coetcd::detail
