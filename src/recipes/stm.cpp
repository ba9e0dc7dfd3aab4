// coetcd::stm: the read set, write set and commit of a transaction (after Go's
// concurrency/stm.go), and the commit groups in which the runs of one client take turns.
#include <coetcd/stm.hpp>

#include "core/coro.hpp"
#include "write_outcome.hpp"

#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <deque>
#include <limits>

namespace coetcd {
namespace {

bool is_serializable(isolation level) {
  return level == isolation::serializable_snapshot || level == isolation::serializable;
}

void check_key(std::string_view key, const char* what) {
  if (key.empty()) throw boost::system::system_error(make_error_code(error::empty_key), what);
}

std::shared_ptr<detail::client_impl> lock_client(const std::weak_ptr<detail::client_impl>& c) {
  auto impl = c.lock();
  if (!impl) throw boost::system::system_error(make_error_code(error::client_closed), "coetcd::stm");
  return impl;
}

// How long what the last commit wrote and validated stays known without a read: a group that
// starts later reads again (its compares would catch a stale value, but read committed has none,
// and a snapshot that old may be compacted away).
constexpr auto known_for = std::chrono::seconds(1);

// The mod revision a read saw (0: the key did not exist), what its compare expects.
std::int64_t mod_revision_of(const detail::stm_read& r) { return r.kv ? r.kv->mod_revision : 0; }

}  // namespace

// ---- stm_tx ----

asio::awaitable<const detail::stm_read*> stm_tx::read(std::string_view key) {
  check_key(key, "coetcd::stm_tx: a read");
  if (auto it = reads_.find(key); it != reads_.end()) co_return note_read(it);
  const bool serializable = is_serializable(level_);
  if (auto it = known_.find(key); it != known_.end()) {
    auto node = known_.extract(it);
    if (serializable && snapshot_ == 0) snapshot_ = node.mapped().revision;
    co_return note_read(reads_.insert(std::move(node)).position);
  }
  get_options o;
  if (!serializable) o.serializable = true;  // any member: the commit's compares catch a stale read (Go's choice)
  else o.revision = snapshot_;  // linearizable: a member behind the snapshot waits instead of failing
  // Arguments named first: g++ 12 mishandles temporaries with destructors inside a co_await.
  auto c = lock_client(client_);
  std::string k(key);
  auto [ec, r] = co_await detail::get_on(c, std::move(k), o);
  if (ec) throw boost::system::system_error(ec, "coetcd::stm_tx: a read");
  if (serializable && snapshot_ == 0) snapshot_ = r.header.revision;
  detail::stm_read got{r.kvs.empty() ? std::nullopt : std::optional(std::move(r.kvs.front())), r.header.revision};
  co_return note_read(reads_.emplace(std::string(key), std::move(got)).first);
}

// The body read this key of the read set: its compare is this body's, should the group's fail.
const detail::stm_read* stm_tx::note_read(read_set::iterator it) {
  body_.reads.insert(it->first);
  return &it->second;
}

asio::awaitable<void> stm_tx::prefetch(const std::vector<std::string>& keys) {
  for (auto& k : keys) check_key(k, "coetcd::stm: a prefetch key");
  // Only into an empty group: what it knows is all of one revision, and so stays.
  if (keys.empty() || !reads_.empty() || !known_.empty()) co_return;
  txn t;
  for (auto& k : keys) t.then(txn_op::get(k));  // one txn: every key at one revision
  auto c = lock_client(client_);
  auto [ec, r] = co_await detail::txn_on(c, std::move(t));
  if (ec) throw boost::system::system_error(ec, "coetcd::stm: the prefetch");
  for (std::size_t i = 0; i < keys.size() && i < r.responses.size(); ++i) {
    auto& got = r.responses[i].get();
    known_[keys[i]] = {got.kvs.empty() ? std::nullopt : std::optional(got.kvs.front()), r.header.revision};
  }
  known_at_ = std::chrono::steady_clock::now();
}

asio::awaitable<std::optional<std::string>> stm_tx::get(std::string_view key) {
  if (auto it = body_.writes.find(key); it != body_.writes.end()) co_return it->second.value;
  if (auto it = writes_.find(key); it != writes_.end()) {
    body_.saw.insert(it->second.member);  // this body stands or falls with that member
    co_return it->second.value;
  }
  auto r = co_await read(key);
  if (!r->kv) co_return std::nullopt;
  co_return r->kv->value;
}

asio::awaitable<std::int64_t> stm_tx::mod_revision(std::string_view key) {
  // Another body of the group wrote it: its revision is the commit's, not known yet. The run
  // leaves, the group commits, and the run goes again in the next group, which knows it.
  if (writes_.count(key)) throw detail::stm_regroup{};
  auto r = co_await read(key);
  co_return r->kv ? r->kv->mod_revision : 0;
}

void stm_tx::put(std::string_view key, std::string_view value, std::int64_t lease) {
  check_key(key, "coetcd::stm_tx: a put");
  body_.writes.insert_or_assign(std::string(key), detail::stm_write{.value = std::string(value), .lease = lease});
}

void stm_tx::del(std::string_view key) {
  check_key(key, "coetcd::stm_tx: a delete");
  body_.writes.insert_or_assign(std::string(key), detail::stm_write{});
}

std::int64_t stm_tx::first_revision() const {
  std::int64_t first = std::numeric_limits<std::int64_t>::max() - 1;
  for (auto& [k, r] : reads_) first = std::min(first, r.revision);
  return first;
}

// The group's writes in one txn if nothing read (or, for serializable_snapshot, written) changed;
// else the txn's else branch reads the keys read again (for the next runs) and, in a group, the
// mod revisions of the keys written blind. Members whose compares failed there, and members that
// read their writes, are marked stale (they run again); the others commit without them in a txn
// of their own, and so on until one applies or none is left: a conflict fails only the runs whose
// reads went stale. A txn whose compares failed applied nothing, so no run's writes go twice.
asio::awaitable<void> stm_tx::commit() {
  if (writes_.empty() && (reads_.empty() || level_ == isolation::read_committed)) {
    known_.clear();
    co_return;
  }
  const auto first = first_revision();
  write_set live_writes;  // from the second txn on: the writes of the members left, in turn order
  std::set<std::string_view> live_reads;  // and the keys they read
  bool whole = true;
  for (;;) {  // nothing but a bool in the loop: g++ 12 destroys loop-scoped objects twice at a co_return
    const bool done = co_await commit_once(whole, live_writes, live_reads, first);
    if (done) break;
    whole = false;
    live_writes.clear();
    live_reads.clear();
    for (std::size_t m = 0; m < members_.size(); ++m) {
      if (members_[m].stale) continue;
      live_reads.insert(members_[m].reads.begin(), members_[m].reads.end());
      for (auto& [k, w] : members_[m].writes) live_writes.insert_or_assign(k, w);
    }
  }
}

// One txn of commit(): of the whole group, or (not `whole`) of the members left. True when the
// commit is over: applied, or no member with writes is left.
asio::awaitable<bool> stm_tx::commit_once(bool whole, const write_set& live_writes,
                                          const std::set<std::string_view>& live_reads, std::int64_t first) {
  const write_set& writes = whole ? writes_ : live_writes;
  const bool compared = level_ != isolation::read_committed;
  const bool snapshot = level_ == isolation::serializable_snapshot && !reads_.empty();
  txn t;
  if (compared)
    for (auto& [k, r] : reads_)
      if (whole || live_reads.count(k)) t.when(compare::mod_revision(k) == mod_revision_of(r));
  if (snapshot)
    for (auto& [k, w] : writes) t.when(compare::mod_revision(k) < first + 1);  // Go: wset.cmps(rset.first()+1)
  for (auto& [k, w] : writes) {
    if (w.value) t.then(txn_op::put(k, *w.value, put_options{.lease = w.lease}));
    else t.then(txn_op::del(k));
  }
  // Keys only stale members read: read at the commit, so that what is known after it is of its
  // revision, as the rest.
  std::vector<const std::string*> reread;
  if (!whole)
    for (auto& [k, r] : reads_)
      if (!live_reads.count(k) && !writes.count(k)) {
        t.then(txn_op::get(k));
        reread.push_back(&k);
      }
  if (compared) {
    for (auto& [k, r] : reads_) t.otherwise(txn_op::get(k));
    // A lone member whose reads are the whole read set needs no more: if its txn failed, its
    // reads or its writes went stale.
    if (snapshot && compares_shared())
      for (auto& [k, w] : writes)
        if (!reads_.count(k)) t.otherwise(txn_op::get(k, get_options{.keys_only = true}));
  }

  auto c = lock_client(client_);
  auto [ec, r] = co_await detail::txn_on(c, std::move(t));
  known_.clear();
  if (ec) {
    if (detail::surely_not_applied(ec)) throw boost::system::system_error(ec, "coetcd::stm: commit");
    throw boost::system::system_error(make_error_code(error::outcome_unknown), "coetcd::stm: commit (" + ec.message() + ")");
  }
  if (r.succeeded) {
    if (compared) {
      carry_over(r.header.revision, writes, whole ? nullptr : &live_reads);
      for (std::size_t i = 0; i < reread.size() && writes.size() + i < r.responses.size(); ++i) {
        auto& got = r.responses[writes.size() + i].get();
        known_[*reread[i]] = {got.kvs.empty() ? std::nullopt : std::optional(got.kvs.front()), r.header.revision};
      }
    }
    co_return true;
  }
  std::size_t i = 0;  // the else branch's gets, in the read set's order
  for (auto& [k, old] : reads_) {
    if (i >= r.responses.size()) break;
    auto& got = r.responses[i++].get();
    known_[k] = {got.kvs.empty() ? std::nullopt : std::optional(got.kvs.front()), r.header.revision};
  }
  known_at_ = std::chrono::steady_clock::now();
  co_return !mark_stale(r, writes, first, whole);
}

// After a failed txn of `writes`: marks stale each member left whose compares failed (by what
// the else branch read: the read set in known_, then the blind writes' mod revisions) or that read
// the writes of a stale one. True when members with writes are left to commit without them; the
// members left without writes had their reads checked current by this txn.
bool stm_tx::mark_stale(const txn_result& r, const write_set& writes, std::int64_t first, bool whole) {
  const bool snapshot = level_ == isolation::serializable_snapshot && !reads_.empty();
  std::map<std::string_view, std::int64_t> blind;  // the else branch's gets after the read set's
  if (snapshot && compares_shared()) {
    std::size_t i = reads_.size();
    for (auto& [k, w] : writes) {
      if (reads_.count(k)) continue;
      if (i >= r.responses.size()) break;
      auto& got = r.responses[i++].get();
      blind[k] = got.kvs.empty() ? 0 : got.kvs.front().mod_revision;
    }
  }
  bool marked = false, left = false;
  for (auto& m : members_) {
    if (m.stale) continue;
    bool stale = false;
    for (auto& k : m.reads) {  // all in reads_, and read again by the else branch into known_
      auto now = known_.find(k);
      stale = stale || now == known_.end() || mod_revision_of(now->second) != mod_revision_of(reads_.find(k)->second);
    }
    if (snapshot)
      for (auto& [k, w] : m.writes) {
        auto now = known_.find(k);
        auto b = blind.find(k);
        if (reads_.count(k) && now != known_.end()) stale = stale || mod_revision_of(now->second) >= first + 1;
        else stale = stale || b == blind.end() || b->second >= first + 1;  // not read back: every compare was its own
      }
    for (auto j : m.saw) stale = stale || members_[j].stale;
    if (stale) m.stale = marked = true;
    else left = left || !m.writes.empty();
  }
  // From the second txn on, every compare is a member's: one failed. Should none show, no member
  // is committed rather than loop.
  if (!marked && !whole) {
    for (auto& m : members_) m.stale = true;
    return false;
  }
  return left;
}

// Whether a failed txn of the group may have failed for a compare that is not its only
// member's: it has more members, or bodies that left it (they threw, or read a key an earlier body
// wrote) left their reads in the read set.
bool stm_tx::compares_shared() const {
  if (members_.size() != 1) return true;
  const auto& own = members_.front().reads;
  return std::any_of(reads_.begin(), reads_.end(), [&own](auto& r) { return !own.count(r.first); });
}

// After a commit at `revision`: every key read whose compare held (`compared`; all when null) and
// every key written is known as of it.
void stm_tx::carry_over(std::int64_t revision, const write_set& writes, const std::set<std::string_view>* compared) {
  for (auto& [k, r] : reads_)
    if (!writes.count(k) && (!compared || compared->count(k))) known_[k] = {r.kv, revision};
  for (auto& [k, w] : writes) {
    if (!w.value) {
      known_[k] = {std::nullopt, revision};
      continue;
    }
    key_value kv;
    kv.key = k;
    kv.value = *w.value;
    kv.mod_revision = revision;
    kv.lease = w.lease;
    known_[k] = {std::move(kv), revision};
  }
  known_at_ = std::chrono::steady_clock::now();
}

// The group starts afresh.
void stm_tx::clear_group() {
  reads_.clear();
  writes_.clear();
  members_.clear();
  snapshot_ = 0;
}

// ---- commit groups ----

namespace detail {

class stm_group : public std::enable_shared_from_this<stm_group> {
 public:
  stm_group(const std::shared_ptr<client_impl>& c, isolation level)
      : io_ex_(c->io_ex_), strand_(asio::make_strand(c->io_ex_)), overtime_(strand_), tx_(c, level) {}

  asio::awaitable<stm_turn> wait_turn();
  asio::awaitable<stm_tx*> begin_turn(int attempt, const std::vector<std::string>& prefetch);
  void leave(std::uint64_t turn, bool commit_now);
  asio::awaitable<stm_outcome> finish(std::uint64_t turn);

 private:
  using turn_handler = asio::any_completion_handler<void(error_code, stm_turn)>;
  using outcome_handler = asio::any_completion_handler<void(std::exception_ptr, stm_outcome)>;

  // On strand_.
  bool holds(std::uint64_t turn) const { return turn_taken_ && turn_ == turn; }
  void pass_turn();  // to the next run, or commit when none waits
  void grant(turn_handler h, bool alone = false);
  asio::awaitable<void> commit_group();
  // Kept well under etcd's 128 compares, puts and gets per txn (--max-txn-ops).
  bool full() const { return members_.size() >= 256 || tx_.reads_.size() + tx_.writes_.size() >= 64; }

  asio::any_io_executor io_ex_;
  asio::strand<asio::any_io_executor> strand_;
  asio::steady_timer overtime_;
  stm_tx tx_;  // touched by the run holding the turn, or on the strand while no run holds it
  std::deque<turn_handler> waiting_;
  std::vector<outcome_handler> members_;
  bool turn_taken_ = false;
  bool committing_ = false;
  bool commit_now_ = false;  // a run left to let the group commit before it runs again
  std::uint64_t turn_ = 0;   // numbers the turns: a late leave, finish or timer knows its turn is over
  bool overtime_passed_ = false;
};

// A body holding its turn this long (it waits on something else, or on stm() itself) lets the
// runs waiting behind it go ahead, each alone.
constexpr auto overtime = std::chrono::milliseconds(100);

void stm_group::grant(turn_handler h, bool alone) {
  stm_turn t;
  if (alone) t.alone = true;
  else {
    turn_taken_ = true;
    overtime_passed_ = false;
    t.number = ++turn_;
    overtime_.expires_after(overtime);
    overtime_.async_wait([self = shared_from_this(), turn = t.number](error_code ec) {
      if (ec || !self->holds(turn)) return;
      self->overtime_passed_ = true;
      for (auto& w : std::exchange(self->waiting_, {})) self->grant(std::move(w), true);
    });
  }
  // Posted through the client's executor, run on the handler's (as client_impl::complete does).
  asio::post(io_ex_, asio::append(std::move(h), error_code{}, t));
}

void stm_group::pass_turn() {
  turn_taken_ = false;
  overtime_.cancel();
  if (committing_) return;
  if (!waiting_.empty() && !full() && !commit_now_) {
    auto h = std::move(waiting_.front());
    waiting_.pop_front();
    return grant(std::move(h));
  }
  if (members_.empty()) {
    // Nothing to commit (every body threw or left): the next group starts afresh.
    tx_.clear_group();
    commit_now_ = false;
    if (!waiting_.empty()) pass_turn();
    return;
  }
  committing_ = true;
  asio::co_spawn(strand_, commit_group(), asio::detached);
}

asio::awaitable<void> stm_group::commit_group() {
  auto self = shared_from_this();  // the members' runs may end, and drop the group, meanwhile
  commit_now_ = false;
  std::exception_ptr error;
  bool alone = false;
  try {
    co_await tx_.commit();
  } catch (const boost::system::system_error& e) {
    // Refused as a whole for what one member brought (too many keys, a lease gone, a value too
    // large): nothing was applied, and each member in that txn runs again alone, to meet its own
    // error.
    const auto in_txn = std::count_if(tx_.members_.begin(), tx_.members_.end(), [](auto& m) { return !m.stale; });
    alone = in_txn > 1 && surely_not_applied(e.code());
    error = std::current_exception();
  } catch (...) {
    error = std::current_exception();
  }
  for (std::size_t i = 0; i < members_.size(); ++i) {
    // A stale member's conflict is its own, whatever came of the txn it was left out of.
    const bool stale = i < tx_.members_.size() && tx_.members_[i].stale;
    std::exception_ptr e = stale || alone ? nullptr : error;
    const auto outcome = stale || (error && !alone) ? stm_outcome::conflict : alone ? stm_outcome::alone : stm_outcome::applied;
    asio::post(io_ex_, asio::append(std::move(members_[i]), std::move(e), outcome));
  }
  members_.clear();
  tx_.clear_group();
  committing_ = false;
  if (!waiting_.empty()) {
    auto h = std::move(waiting_.front());
    waiting_.pop_front();
    grant(std::move(h));
  }
}

asio::awaitable<stm_turn> stm_group::wait_turn() {
  // Named, not written inside the co_await: g++ 12 destroys such a closure (and its shared_ptr)
  // twice, which freed groups under their runs (docs/how-it-works.md).
  auto start = [self = shared_from_this()](auto h) {
    asio::dispatch(self->strand_, [self, h = turn_handler(std::move(h))]() mutable {
      if (self->turn_taken_ && self->overtime_passed_) return self->grant(std::move(h), true);
      if (self->turn_taken_ || self->committing_) return self->waiting_.push_back(std::move(h));
      self->grant(std::move(h));
    });
  };
  auto [ec, turn] = co_await asio::async_initiate<decltype(as_result), void(error_code, stm_turn)>(std::move(start), as_result);
  if (ec) throw boost::system::system_error(ec, "coetcd::stm");
  co_return turn;
}

asio::awaitable<stm_tx*> stm_group::begin_turn(int attempt, const std::vector<std::string>& prefetch) {
  tx_.attempt_ = attempt;
  tx_.body_ = {};
  if (tx_.reads_.empty() && tx_.writes_.empty()) {
    if (std::chrono::steady_clock::now() - tx_.known_at_ > known_for) tx_.known_.clear();
    // A snapshot is one revision: a group that starts from known keys reads at theirs.
    if (is_serializable(tx_.level_) && !tx_.known_.empty()) tx_.snapshot_ = tx_.known_.begin()->second.revision;
  }
  if (!prefetch.empty()) co_await tx_.prefetch(prefetch);  // a failure: the run's guard leaves
  co_return &tx_;
}

void stm_group::leave(std::uint64_t turn, bool commit_now) {
  asio::dispatch(strand_, [self = shared_from_this(), turn, commit_now] {
    if (!self->holds(turn)) return;  // passed on already (a finish that joined)
    self->tx_.body_ = {};
    if (commit_now) self->commit_now_ = true;
    self->pass_turn();
  });
}

asio::awaitable<stm_outcome> stm_group::finish(std::uint64_t turn) {
  // The group's txn is everyone's: once joined, a run waits for its outcome, cancelled or not.
  auto uncancellable = asio::bind_cancellation_slot(asio::cancellation_slot(), as_result);
  auto join = [self = shared_from_this(), turn](auto h) {  // named: see wait_turn
    asio::dispatch(self->strand_, [self, turn, h = outcome_handler(std::move(h))]() mutable {
      if (!self->holds(turn)) {
        auto gone = std::make_exception_ptr(boost::system::system_error(make_error_code(asio::error::operation_aborted), "coetcd::stm"));
        return asio::post(self->io_ex_, asio::append(std::move(h), gone, stm_outcome::conflict));
      }
      // Merged here, past the point where a cancel could still stop this run.
      // Its writes join the group's, marked as its own, and what it read and saw is kept for
      // the case the group's txn fails.
      auto& tx = self->tx_;
      const std::size_t member = tx.members_.size();
      for (auto& [k, w] : tx.body_.writes) tx.writes_.insert_or_assign(k, w).first->second.member = member;
      tx.members_.push_back(std::exchange(tx.body_, {}));
      self->members_.push_back(std::move(h));
      self->pass_turn();
    });
  };
  auto [error, outcome] =
      co_await asio::async_initiate<decltype(uncancellable), void(std::exception_ptr, stm_outcome)>(std::move(join), uncancellable);
  if (error) std::rethrow_exception(error);
  co_return outcome;
}

// The groups of one client, one per isolation level, kept in the client's recipe slot 0.
struct stm_groups {
  std::array<std::shared_ptr<stm_group>, 4> by_level;
};

std::shared_ptr<stm_group> stm_group_for(client& c, const stm_options& options) {
  const auto& impl = detail::access::impl(c);
  if (!impl) throw boost::system::system_error(make_error_code(asio::error::bad_descriptor), "coetcd::stm: an empty client");
  if (!options.group_commit) return std::make_shared<stm_group>(impl, options.level);
  auto state = impl->recipe_state(0, [&impl] {
    auto groups = std::make_shared<stm_groups>();
    for (int l = 0; l < 4; ++l) groups->by_level[l] = std::make_shared<stm_group>(impl, static_cast<isolation>(l));
    return std::shared_ptr<void>(groups);
  });
  return static_cast<stm_groups*>(state.get())->by_level.at(static_cast<std::size_t>(options.level));
}

asio::awaitable<stm_turn> stm_wait_turn(const std::shared_ptr<stm_group>& g) {
  const stm_turn t = co_await g->wait_turn();
  co_return t;
}

asio::awaitable<stm_tx*> stm_begin_turn(const std::shared_ptr<stm_group>& g, int attempt,
                                        const std::vector<std::string>& prefetch) {
  stm_tx* tx = co_await g->begin_turn(attempt, prefetch);
  co_return tx;
}

void stm_leave(const std::shared_ptr<stm_group>& g, std::uint64_t turn, bool commit_now) { g->leave(turn, commit_now); }

asio::awaitable<stm_outcome> stm_finish(const std::shared_ptr<stm_group>& g, std::uint64_t turn) {
  // By reference, and nothing but locals across the co_await (g++ 12: see wait_turn).
  const stm_outcome o = co_await g->finish(turn);
  co_return o;
}

}  // namespace detail
}  // namespace coetcd
