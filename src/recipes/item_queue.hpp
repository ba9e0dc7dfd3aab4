// The engine of queue and priority_queue: puts and claims in batches, each batch one txn chained
// to the last by a receipt key, so a resent txn is never applied twice. Not API.
#pragma once

#include "core/coro.hpp"
#include "core/session_state.hpp"

#include <coetcd/queue.hpp>

#include <deque>
#include <random>

namespace coetcd::detail {

/// A chain of txns that apply once each, however often they are sent: each compares the chain's
/// receipt key with the number of the last txn applied and puts its own number (under the
/// session's lease). A resend of an applied txn fails that compare and reads the receipt, which
/// then says it was applied; a copy that arrives late finds the receipt moved on.
struct txn_chain {
  std::string receipt;
  std::uint64_t applied = 0;  // the last txn of the chain known applied
  bool running = false;       // a coroutine works through the chain's queue

  /// `t` with the chain's compare and receipt put added (the receipt's get first in `otherwise`).
  txn link(txn t, std::int64_t lease) const;
  /// What the receipt read by link()'s `otherwise` says: the txn was applied (a resend of it).
  bool was_applied(const txn_result& r) const;
};

struct queued_put {
  std::string value;
  int priority = -1;  // -1: the FIFO queue
  std::string key;    // chosen when its batch is built
  std::shared_ptr<handler<std::string>> h;
};

struct candidate {
  std::string key, value;
  std::int64_t mod_revision = 0;
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
  std::deque<std::shared_ptr<handler<std::string>>> takers;  // waiting dequeues, oldest first
  std::deque<candidate> candidates;  // items seen, in dequeue order, not yet claimed by us
  std::deque<std::string> claimed;   // items we claimed whose taker went away: the next ones'
  std::shared_ptr<asio::steady_timer> wake;  // cut short when a taker arrives or the session ends
  bool closed = false;
  error_code failed;  // the session's end: every later operation fails with it
  std::uint64_t listener = 0;

  // All on the client's strand.
  void start();  // listens for the session's end
  void enqueue(queued_put p);
  void dequeue(std::shared_ptr<handler<std::string>> h);
  void close();  // the object is gone: nothing new; the receipts go once the chains are idle
  void fail_all(error_code ec);
  void complete(std::shared_ptr<handler<std::string>>& h, error_code ec, std::string v);
  void cleanup_if_idle();
};

asio::awaitable<void> run_puts(std::shared_ptr<queue_state> s);
asio::awaitable<void> run_takes(std::shared_ptr<queue_state> s);

}  // namespace coetcd::detail
