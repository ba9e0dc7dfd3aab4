// coetcd::stm: software transactional memory over etcd, with Go's four isolation levels.
#pragma once

#include <coetcd/client.hpp>
#include <coetcd/detail/spawn_body.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/system/system_error.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace coetcd {

/// How much of the world an stm body may see change under it, as Go's `concurrency.Isolation`.
enum class isolation {
  /// Reads see one snapshot (the first read's revision); the commit fails if a key read, or a
  /// key written, changed since that snapshot. Go's SerializableSnapshot (its default).
  serializable_snapshot,
  /// Reads see one snapshot; the commit fails if a key read changed. Go's Serializable.
  serializable,
  /// Each key is read once (later reads see the same value, from any member); the commit fails
  /// if a key read changed. Reads of different keys may come from different revisions. Go's
  /// RepeatableReads.
  repeatable_reads,
  /// Each key is read once, from any member; the commit never fails on a conflict. Go's
  /// ReadCommitted.
  read_committed,
};

/// Options of stm().
struct stm_options {
  isolation level = isolation::serializable_snapshot;  ///< see isolation
  /// Runs of the body before stm gives up with error::conflict (Go's STM retries forever).
  int max_attempts = 64;
  /// Keys read in one request before the first run, at one revision (Go's WithPrefetch). Copied
  /// when stm() is called.
  std::span<const std::string> prefetch{};
};

namespace detail {
struct stm_read {
  std::optional<key_value> kv;  // none: the key did not exist
  std::int64_t revision = 0;    // the store revision of the read
};
struct stm_write {
  std::optional<std::string> value;  // none: a delete
  std::int64_t lease = 0;
};
}  // namespace detail

/// The transaction an stm body reads and writes through. Reads go to etcd (once per key per run:
/// later reads are answered from the read set); writes are kept until the commit, and read back
/// by this body. One body runs on it at a time; not for use outside the body.
class stm_tx {
 public:
  /// The key's value: what this run wrote, else what it read, else etcd's (at the snapshot for
  /// the serializable levels). Empty when the key does not exist (or this run deleted it).
  /// Throws boost::system::system_error on a failed read; stm() then writes nothing.
  asio::awaitable<std::optional<std::string>> get(std::string_view key);
  /// The key's mod revision as read (0 when it does not exist), as Go's STM.Rev.
  asio::awaitable<std::int64_t> mod_revision(std::string_view key);
  /// Writes `value` at the commit (under `lease`, if not 0).
  void put(std::string_view key, std::string_view value, std::int64_t lease = 0);
  /// Deletes the key at the commit.
  void del(std::string_view key);

  /// The run of the body, from 1.
  int attempt() const noexcept { return attempt_; }
  /// The isolation level.
  isolation level() const noexcept { return options_.level; }
  /// The revision of the last commit (0 before one succeeded).
  std::int64_t committed_revision() const noexcept { return committed_revision_; }

  /// Not for users: stm() makes one (`prefetch`: the keys of options.prefetch).
  stm_tx(client& c, const stm_options& options, std::vector<std::string> prefetch);
  /// Not for users: reads the prefetch keys, once.
  asio::awaitable<void> prefetch();
  /// Not for users: empties the read and write sets before a run (keeping what a failed commit
  /// read for the next run).
  void begin();
  /// Not for users: one txn that writes the write set if nothing read (or written) changed.
  /// True when it was applied; false on a conflict. Throws system_error: error::outcome_unknown
  /// when the txn may or may not have been applied, else the error (nothing applied).
  asio::awaitable<bool> commit();

 private:
  asio::awaitable<const detail::stm_read*> read(std::string_view key);
  std::int64_t first_revision() const;

  client& client_;
  stm_options options_;
  std::vector<std::string> prefetch_keys_;
  std::map<std::string, detail::stm_read, std::less<>> reads_;
  std::map<std::string, detail::stm_read, std::less<>> next_reads_;  // from a failed commit
  std::map<std::string, detail::stm_write, std::less<>> writes_;
  std::int64_t snapshot_ = 0;  // serializable levels: the revision every read is made at
  int attempt_ = 0;
  std::int64_t committed_revision_ = 0;
};

namespace detail {
template <class Body>
auto run_stm(client& c, Body body, stm_options options, std::vector<std::string> prefetch)
    -> asio::awaitable<body_value_t<Body, stm_tx&>> {
  using value_type = body_value_t<Body, stm_tx&>;
  stm_tx tx(c, options, std::move(prefetch));
  co_await tx.prefetch();
  for (;;) {
    tx.begin();
    if constexpr (std::is_void_v<value_type>) {
      co_await body(tx);
      if (co_await tx.commit()) co_return;
    } else {
      auto value = co_await body(tx);
      if (co_await tx.commit()) co_return value;
    }
    if (tx.attempt() >= options.max_attempts)
      throw boost::system::system_error(make_error_code(error::conflict), "coetcd::stm");
  }
}

template <class Token>
concept not_stm_options = !std::is_same_v<std::decay_t<Token>, stm_options>;
}  // namespace detail

/// Runs `body(tx)` (returning asio::awaitable<T>, with `tx` a stm_tx&) and commits what it wrote
/// in one txn if nothing it read changed meanwhile (see isolation); on a conflict the body runs
/// again, with what the failed commit read (no extra round trip), up to options.max_attempts
/// times. Returns what the last run returned. As Go's concurrency.NewSTM.
///
/// A body that throws writes nothing, and its exception comes out of stm(). A commit whose outcome
/// is unknown (the connection or the deadline went while it was on the wire, or it was
/// cancelled then) is not run again: stm() throws boost::system::system_error with
/// error::outcome_unknown, its what() naming the cause. Other errors are thrown as they are.
/// More than max_attempts conflicts: error::conflict. The body may run more than once: its only
/// effects should be its writes through `tx`.
///
/// Without a token, stm returns an asio::awaitable<T> that runs on the awaiting coroutine's
/// executor. With a completion token:
/// @par Handler signature
/// `void(std::exception_ptr, T)` (or `void(std::exception_ptr)` for void), as asio::co_spawn's.
/// @par Cancellation
/// Terminal: a read in the body fails with operation_aborted (nothing written); during the
/// commit, error::outcome_unknown.
/// @par Executor
/// The body runs on a new strand of the handler's associated executor (default: the client's);
/// never inside this call.
/// @par Lifetimes
/// The client must outlive the operation; options.prefetch is copied.
///
/// g++ 12: name a lambda with by-value captures before passing it (see docs/how-it-works.md).
template <class Body>
auto stm(client& c, Body body, stm_options options = {}) {
  return detail::run_stm(c, std::move(body), options, {options.prefetch.begin(), options.prefetch.end()});
}

/// stm with a completion token (see above).
template <class Body, detail::not_stm_options CompletionToken>
auto stm(client& c, Body body, stm_options options, CompletionToken&& token) {
  return detail::spawn_on_strand<detail::body_value_t<Body, stm_tx&>>(
      std::forward<CompletionToken>(token), c.get_executor(),
      [&c, body = std::move(body), options,
       keys = std::vector<std::string>(options.prefetch.begin(), options.prefetch.end())]() mutable {
        return detail::run_stm(c, std::move(body), options, std::move(keys));
      });
}

}  // namespace coetcd
