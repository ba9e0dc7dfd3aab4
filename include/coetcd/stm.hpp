// coetcd::stm: software transactional memory over etcd, with Go's four isolation levels.
#pragma once

#include <coetcd/client.hpp>
#include <coetcd/detail/spawn_body.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/system/system_error.hpp>

#include <chrono>
#include <cstdint>
#include <utility>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <set>
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
  /// Run in the client's commit group of this level: runs of stm() on one client take turns,
  /// each seeing the writes of those before it, and commit together in one txn (see stm()).
  /// false: this call runs and commits alone, concurrently with others, as Go's STM does.
  bool group_commit = true;
};

namespace detail {
struct stm_read {
  std::optional<key_value> kv;  // none: the key did not exist
  std::int64_t revision = 0;    // the store revision of the read
};
struct stm_write {
  std::optional<std::string> value;  // none: a delete
  std::int64_t lease = 0;
  std::size_t member = 0;  // in the group's writes: the member that wrote it last
};
// What one member (a run whose body finished) of a commit group read and wrote: when the group's
// txn fails, which members its else branch shows stale.
struct stm_member {
  std::set<std::string, std::less<>> reads;  // keys it read from etcd or the group's read set
  std::set<std::size_t> saw;                 // earlier members whose writes it read
  std::map<std::string, stm_write, std::less<>> writes;
  bool stale = false;  // left out of the commit: a read of it went stale, or a member it saw did
};
}  // namespace detail

namespace detail {
class stm_group;
}

/// The transaction an stm body reads and writes through. Reads go to etcd once per key (later
/// reads, and reads of keys the commit group knows, are answered locally); writes are kept until
/// the commit, and read back by this body and by the group's later bodies. Not for use outside
/// the body.
class stm_tx {
 public:
  /// The key's value: what this run (or an earlier body of its commit group) wrote, else what
  /// was read, else etcd's (at the snapshot for the serializable levels). Empty when the key
  /// does not exist or was deleted. Throws boost::system::system_error on a failed read; stm()
  /// then writes nothing of this run.
  asio::awaitable<std::optional<std::string>> get(std::string_view key);
  /// The key's mod revision as read (0 when it does not exist), as Go's STM.Rev: a write of
  /// this run or group does not change it.
  asio::awaitable<std::int64_t> mod_revision(std::string_view key);
  /// Writes `value` at the commit (under `lease`, if not 0).
  void put(std::string_view key, std::string_view value, std::int64_t lease = 0);
  /// Deletes the key at the commit.
  void del(std::string_view key);

  /// The run of the body, from 1.
  int attempt() const noexcept { return attempt_; }
  /// The isolation level.
  isolation level() const noexcept { return level_; }

 private:
  friend class detail::stm_group;
  stm_tx(std::weak_ptr<detail::client_impl> c, isolation level) : client_(std::move(c)), level_(level) {}
  using read_set = std::map<std::string, detail::stm_read, std::less<>>;
  using write_set = std::map<std::string, detail::stm_write, std::less<>>;
  asio::awaitable<const detail::stm_read*> read(std::string_view key);
  const detail::stm_read* note_read(read_set::iterator it);
  asio::awaitable<void> prefetch(const std::vector<std::string>& keys);
  std::int64_t first_revision() const;
  asio::awaitable<void> commit();
  asio::awaitable<bool> commit_once(bool whole, const write_set& live_writes,
                                    const std::set<std::string_view>& live_reads, std::int64_t first);
  bool mark_stale(const txn_result& r, const write_set& writes, std::int64_t first, bool whole);
  bool compares_shared() const;
  void carry_over(std::int64_t revision, const write_set& writes, const std::set<std::string_view>* compared);
  void clear_group();

  std::weak_ptr<detail::client_impl> client_;
  isolation level_;
  read_set reads_;                        // the group's read set
  write_set writes_;                      // its earlier bodies' writes
  std::vector<detail::stm_member> members_;  // its bodies that finished, in turn order
  detail::stm_member body_;               // this body's reads and writes
  // Keys known without a read: what the last commit wrote and validated, or what a failed one
  // read again; they enter the read set when a body reads them.
  std::map<std::string, detail::stm_read, std::less<>> known_;
  std::chrono::steady_clock::time_point known_at_{};
  std::int64_t snapshot_ = 0;  // serializable levels: the revision every read is made at
  int attempt_ = 0;
};

namespace detail {
/// The commit group of `c` for options.level (made on first use), or, without group_commit, a
/// group of one for this call.
std::shared_ptr<stm_group> stm_group_for(client& c, const stm_options& options);

/// A turn in a group: its number, or `alone` when the turn before ran too long and this run
/// goes ahead in a group of its own.
struct stm_turn {
  std::uint64_t number = 0;
  bool alone = false;
};
/// What a group's txn did for a run: conflict (run again), applied, or alone (refused for
/// what another member brought: run again alone).
enum class stm_outcome { conflict, applied, alone };
/// Thrown by stm_tx::mod_revision for a key another body of the group wrote.
struct stm_regroup {};

/// Waits for a turn in `g`.
asio::awaitable<stm_turn> stm_wait_turn(const std::shared_ptr<stm_group>& g);
/// The turn is this run's: readies the group's transaction for the body (reading the prefetch
/// keys, when given) and returns it. Throws as stm_tx::get.
asio::awaitable<stm_tx*> stm_begin_turn(const std::shared_ptr<stm_group>& g, int attempt,
                                        const std::vector<std::string>& prefetch);
/// The run gives its turn up: its writes are dropped; `commit_now`: the group commits before
/// any other run joins it. Nothing when the turn has passed already.
void stm_leave(const std::shared_ptr<stm_group>& g, std::uint64_t turn, bool commit_now = false);
/// The body returned: its writes join the group, the turn passes on, and this completes with
/// the group txn's outcome for the run; throws its error.
asio::awaitable<stm_outcome> stm_finish(const std::shared_ptr<stm_group>& g, std::uint64_t turn);

/// Gives a run's turn up when the run ends by an exception (a cancel at a co_await included)
/// while holding it.
struct stm_turn_guard {
  const std::shared_ptr<stm_group>* group = nullptr;
  std::uint64_t turn = 0;
  ~stm_turn_guard() {
    if (turn) stm_leave(*group, turn);
  }
};
}  // namespace detail

namespace detail {
template <class Body>
auto run_stm(client& c, Body body, stm_options options, std::vector<std::string> prefetch)
    -> asio::awaitable<body_value_t<Body, stm_tx&>> {
  using value_type = body_value_t<Body, stm_tx&>;
  using stored = std::conditional_t<std::is_void_v<value_type>, bool, value_type>;
  if (options.max_attempts < 1)
    throw boost::system::system_error(make_error_code(error::invalid_argument), "coetcd::stm: max_attempts must be at least 1");
  auto group = stm_group_for(c, options);
  stm_options alone_options = options;
  alone_options.group_commit = false;
  // Declared outside the loop: g++ 12 destroys a coroutine's loop-scoped objects twice when it
  // leaves the loop by co_return (a shared_ptr released twice, seen by valgrind).
  std::shared_ptr<stm_group> joined;
  stm_turn_guard guard{&joined};
  std::optional<stored> value;
  std::exception_ptr failed;
  bool run_alone = false;
  for (int attempt = 1;; ++attempt) {
    joined = run_alone ? stm_group_for(c, alone_options) : group;
    stm_turn turn = co_await stm_wait_turn(joined);
    if (turn.alone) {
      joined = stm_group_for(c, alone_options);
      turn = co_await stm_wait_turn(joined);
    }
    guard.turn = turn.number;
    if (attempt == 2) prefetch.clear();  // named, not a ?: inside the co_await (g++ 12 again)
    stm_tx* tx = co_await stm_begin_turn(joined, attempt, prefetch);
    value.reset();
    bool regroup = false;
    try {
      if constexpr (std::is_void_v<value_type>) {
        co_await body(*tx);
        value.emplace(true);
      } else {
        value.emplace(co_await body(*tx));
      }
    } catch (const stm_regroup&) {
      regroup = true;
    } catch (...) {
      failed = std::current_exception();
    }
    if (regroup) {
      stm_leave(joined, std::exchange(guard.turn, 0), true);
    } else if (failed) {
      stm_leave(joined, std::exchange(guard.turn, 0));
      std::rethrow_exception(failed);
    } else {
      const stm_outcome outcome = co_await stm_finish(joined, guard.turn);
      guard.turn = 0;
      if (outcome == stm_outcome::applied) break;
      run_alone = outcome == stm_outcome::alone;
    }
    if (attempt >= options.max_attempts)
      throw boost::system::system_error(make_error_code(error::conflict), "coetcd::stm");
  }
  if constexpr (!std::is_void_v<value_type>) co_return std::move(*value);
}

template <class Token>
concept not_stm_options = !std::is_same_v<std::decay_t<Token>, stm_options>;
}  // namespace detail

/// Runs `body(tx)` (returning asio::awaitable<T>, with `tx` a stm_tx&) and commits what it wrote
/// in one txn if nothing it read changed meanwhile (see isolation); on a conflict the body runs
/// again, with what the failed commit read (no extra round trip), up to options.max_attempts
/// times. Returns what the last run returned. As Go's concurrency.NewSTM, with one addition:
///
/// **Commit groups** (options.group_commit, the default). The runs of stm() on one client at one
/// isolation level take turns: a body runs while no other body of the group runs, and sees the
/// writes of the bodies before it as if they were committed. When no body waits for its turn,
/// the group's writes go to etcd in one txn that compares every key any of them read. When it
/// fails, its else branch has read those keys again: the runs whose reads went stale (and the
/// runs that read their writes) run again in the next group, and the others commit without them
/// in one more txn, their bodies not run again; a run's attempts count its own conflicts only.
/// Keys the last commit wrote or read are known without a read for a second after it. So N callers incrementing one
/// key cost one txn per group instead of N txns, most of which would conflict. The price: the
/// bodies of a group do not run at once. A body that holds its turn past 100 ms (it waits on
/// something else, or calls stm() itself) lets the runs waiting behind it go ahead alone; the
/// runs that joined the group before it wait for it, so a body must not wait for another run
/// of its client to complete. A run whose body asks mod_revision() of a key an earlier body of
/// the group wrote leaves, lets the group commit, and runs again in the next. A group refused as
/// a whole for what one member brought (too many keys, a lease gone) runs each member again alone.
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
/// Terminal: a read in the body fails with operation_aborted (nothing written); a run waiting
/// for its turn stops when it gets it (at most the bodies before it, or 100 ms). A run whose
/// writes joined its group waits for the group's txn; cancelled then, it still gets the outcome.
/// @par Executor
/// The body runs on a new strand of the client's executor; the handler on its associated
/// executor; never inside this call.
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
/// stm(c, body, {}, token).
template <class Body, detail::not_stm_options CompletionToken>
auto stm(client& c, Body body, CompletionToken&& token) {
  return stm(c, std::move(body), stm_options{}, std::forward<CompletionToken>(token));
}

}  // namespace coetcd
