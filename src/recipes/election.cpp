// Election: campaign, proclaim, resign and the observer, on queue_ops' keys like etcd's Go package.
#include "queue_ops.hpp"
#include "leadership.hpp"

#include "core/loss_waits.hpp"

#include <coetcd/election.hpp>
#include <coetcd/election_observer.hpp>

#include <deque>

namespace coetcd::detail {

struct election_state {
  std::shared_ptr<session_state> session;
  std::string name;
  std::string prefix;  // name + "/"
  std::string key;     // prefix + hex(lease)
  pending_ops pending;  // campaigns in flight, aborted when the object goes
  std::shared_ptr<lock_view> view;
};

/// One leadership, owned by its election::hold. Keeps the object's state (name, key, session),
/// not the object. Atomics (and a seqlock for the header): written on the strand, read by the
/// hold's accessors from any thread.
struct leadership_state {
  std::shared_ptr<election_state> e;
  std::atomic<bool> leader{true};
  bool released = false;  // on the strand: its owner resigned it (or began to)
  std::int64_t rev = 0;   // the key's create revision: never changes
  published_header header;
  std::shared_ptr<loss_waits> losses;  // on the strand, made at the first async_wait_lost
};

constexpr get_options first_create{.prefix = true, .limit = 1, .order = sort_order::ascend,
                                   .target = sort_target::create_revision};

namespace {

/// No longer the leader: the key is not ours to keep any more, and the name is free for the
/// session's next campaign. Once only. `lost`: how, when the leadership was lost rather than given up.
void step_down(leadership_state& l, std::optional<loss_reason> lost = std::nullopt) {
  if (!l.leader.exchange(false)) return;
  auto& s = *l.e->session;
  s.candidates.erase(l.e->key);
  if (auto it = s.key_users.find(l.e->key); it != s.key_users.end() && --it->second <= 0) s.key_users.erase(it);
  if (lost) {
    if (!l.losses) l.losses = std::make_shared<loss_waits>(l.e->session);  // later waits hear it too
    l.losses->lose(*lost);
  } else if (l.losses) {
    l.losses->end();
  }
}

/// Puts `value` on our key while it is still the one we campaigned with (`rev`).
asio::awaitable<std::tuple<error_code, response_header>> put_value(election_state& e, std::int64_t rev,
                                                                   const std::string& value) {
  auto t = txn()
               .when(compare::create_revision(e.key) == rev)
               .then(txn_op::put(e.key, value, put_options{.lease = e.session->lease}));
  auto [ec, r] = co_await batched_txn(e.session->impl, std::move(t), {});
  if (ec) co_return std::make_tuple(ec, response_header{});
  if (!r.succeeded) co_return std::make_tuple(make_error_code(error::not_leader), response_header{});
  key_rewritten(*e.session, e.prefix, e.key, r.header.revision);
  co_return std::make_tuple(error_code{}, r.header);
}

asio::awaitable<error_code> campaign(std::shared_ptr<election_state> ep, std::string value, std::int64_t& won,
                                     response_header& header) {
  co_await handle_cancellation_manually();
  auto& e = *ep;
  auto& s = *e.session;
  if (s.lost) co_return error::session_lost;
  // One candidate per session and name (one key): a second would lead on the first one's key.
  if (!s.candidates.insert(e.key).second) co_return asio::error::already_started;
  ++s.key_users[e.key];  // counted like a mutex's, so a clean-up never removes a newer campaign's key
  auto give_up = [&](std::int64_t rev) {
    s.candidates.erase(e.key);
    release_key_later(s, e.key, rev);  // nobody waits for it: see release_key_later
  };
  const std::shared_ptr<lock_view> no_view;  // named: see mutex.cpp on g++ 12.2 and temporaries
  const turn_rule oldest_first;
  const bool cancellable = co_await can_be_cancelled();
  auto a = co_await acquire_or_abandon(e.session, e.prefix, e.key, value, no_view, cancellable, oldest_first);
  if (a.ec) {
    if (a.abandoned) s.candidates.erase(e.key);
    else give_up(0);  // the txn may have been applied
    co_return a.ec;
  }
  error_code ec;
  header = a.txn.header;
  if (!a.txn.succeeded && a.rev != 0) {
    // Our key was there already (a campaign of an earlier session on this lease, or a mutex of
    // this session): make it say `value`.
    const auto& mine = a.txn.responses.at(0).get().kvs;
    if (mine.empty() || mine.front().value != value) {
      auto [pec, h] = co_await put_value(e, a.rev, value);
      ec = pec;
      if (!ec) header = h;
    }
  }
  // Lost while the txn was on the wire (orphaned, or its keepalive deadline passed): the loss
  // was told before anything of ours listened, and a txn that showed us oldest would lead on it.
  if (!ec && s.lost_by_now()) ec = error::session_lost;
  if (!ec && !a.owner) {
    if (co_await cancellation_requested()) ec = asio::error::operation_aborted;
    else if (a.rev == 0) ec = error::session_lost;
    // Not a holder the view parks locks for: a resign never goes through the view's release.
    else ec = co_await wait_turn(s, e.view, e.prefix, e.key, a.rev, oldest_first, false);
  }
  // Cancelled after the txn showed us oldest, or the object is gone: nobody would ever resign.
  if (!ec && (e.pending.gone() || co_await cancellation_requested())) ec = asio::error::operation_aborted;
  if (ec) {
    give_up(a.rev);
    co_return ec == error::not_leader ? make_error_code(error::session_lost) : ec;
  }
  won = a.rev;
  if (s.impl->wants_events())
    s.impl->emit({.kind = event_kind::leader_changed, .name = e.name, .key = e.key, .detail = "this session won",
                  .lease = s.lease, .revision = a.rev});
  co_return error_code{};
}

asio::awaitable<std::tuple<error_code, election::hold>> win(std::shared_ptr<election_state> e, std::string value) {
  std::int64_t rev = 0;
  response_header header;
  auto ec = co_await campaign(e, std::move(value), rev, header);
  if (ec) co_return std::make_tuple(ec, election::hold());
  auto l = std::make_shared<leadership_state>();
  l->e = std::move(e);
  l->rev = rev;
  l->header = header;
  co_return std::make_tuple(error_code{}, election::hold(std::move(l)));
}

asio::awaitable<error_code> proclaim(std::shared_ptr<leadership_state> lp, std::string value) {
  auto& l = *lp;
  if (!l.leader) co_return error::not_leader;
  auto [ec, h] = co_await put_value(*l.e, l.rev, value);
  if (!ec) l.header = h;
  if (ec == error::not_leader) step_down(l, loss_reason{loss_reason::kind::key_gone, ec});
  co_return ec;
}

asio::awaitable<error_code> resign(std::shared_ptr<leadership_state> lp) {
  auto& l = *lp;
  auto& e = *l.e;
  if (std::exchange(l.released, true)) co_return error::not_locked;
  if (!l.leader) co_return error::session_lost;  // lost before: the key was gone
  if (e.session->lost) {  // the lease takes the key (or has): nothing to send
    step_down(l);
    co_return error::session_lost;
  }
  // A mutex of this session on the same name holds the same key (its txn adopted ours, or ours
  // adopted its): then leave the key to it and only step down.
  if (auto it = e.session->key_users.find(e.key); it != e.session->key_users.end() && it->second > 1) {
    step_down(l);
    co_return error_code{};
  }
  auto t = txn().when(compare::create_revision(e.key) == l.rev).then(txn_op::del(e.key));
  delete_in_flight deleting(*e.session, e.key);
  write_queue guarded;  // a copy applied late cannot remove a newer key: resent when slow too
  guarded.late_copy_safe = true;
  auto [ec, r] = co_await batched_txn(e.session->impl, std::move(t), std::move(guarded));
  if (ec && may_pass(ec)) {
    // Timed out or unreachable: the delete may have landed, and a leader that still believed it
    // led would act on a leadership nobody holds. So stop leading here, as a failed release of a
    // lock stops holding, and keep deleting in the background until the delete lands or the
    // session ends (the lease then takes the key).
    step_down(l);
    release_key_later(*e.session, e.key, l.rev);
  }
  if (ec) {
    if (l.leader) l.released = false;  // refused (not an outage): still leader, the caller may retry
    co_return ec;
  }
  step_down(l);
  l.header = r.header;
  co_return error_code{};
}

asio::awaitable<void> resign_in_background(std::shared_ptr<leadership_state> l) { co_await resign(std::move(l)); }

}  // namespace

void lose_leadership(const election::hold& h, loss_reason why) {
  auto l = detail::access::state(h);
  if (!l) return;
  asio::dispatch(l->e->session->impl->strand_, [l, why] { step_down(*l, why); });
}

// ---- observer ----

/// Reports each change of the oldest candidate's key or value, as seen by the name's shared view.
class observer_core : public std::enable_shared_from_this<observer_core> {
 public:
  observer_core(std::shared_ptr<client_impl> c, std::string prefix) : client_(std::move(c)), prefix_(std::move(prefix)) {}

  void start() {
    view_ = lock_view_for(client_, prefix_);
    listener_ = view_->core().listen([w = weak_from_this()](error_code ec) {
      if (auto self = w.lock()) ec ? self->end(ec) : self->report();
    });
  }
  void stop() {
    if (view_) view_->core().unlisten(listener_);
    view_.reset();
    // The observer is gone: a pending next completes now, as a destroyed Asio object's
    // operations do, instead of never.
    final_ = asio::error::operation_aborted;
    ready_.clear();
    deliver();
  }
  void next(asio::any_completion_handler<void(error_code, std::optional<key_value>)> h,
            std::shared_ptr<early_cancel> cancel);
  const strand_type& strand() const { return client_->strand_; }
  const asio::any_io_executor& io_executor() const { return client_->io_ex_; }

 private:
  void report();
  void end(error_code ec);
  void deliver();

  std::shared_ptr<client_impl> client_;
  std::string prefix_;
  std::shared_ptr<lock_view> view_;
  std::uint64_t listener_ = 0;
  bool reported_any_ = false;
  std::optional<std::pair<std::string, std::int64_t>> last_;  // key and mod revision reported
  std::deque<std::optional<key_value>> ready_;
  error_code final_;
  std::optional<asio::any_completion_handler<void(error_code, std::optional<key_value>)>> waiter_;
  std::uint64_t wait_seq_ = 0;
};

void observer_core::report() {
  const key_value* leader = view_ ? view_->core().oldest() : nullptr;
  std::optional<std::pair<std::string, std::int64_t>> now;
  if (leader) now.emplace(leader->key, leader->mod_revision);
  if (reported_any_ && now == last_) return;
  if (client_->wants_events() && (!last_ || !now || last_->first != now->first))
    client_->emit({.kind = event_kind::leader_changed, .name = prefix_.substr(0, prefix_.size() - 1),
                   .key = leader ? leader->key : std::string(), .detail = leader ? "" : "no leader",
                   .lease = leader ? leader->lease : 0, .revision = leader ? leader->create_revision : 0});
  reported_any_ = true;
  last_ = now;
  if (leader) ready_.push_back(*leader);
  else ready_.push_back(std::nullopt);
  deliver();
}

void observer_core::end(error_code ec) {
  final_ = ec;
  deliver();
}

void observer_core::deliver() {
  if (!waiter_) return;
  if (ready_.empty() && !final_) return;
  auto h = std::move(*waiter_);
  waiter_.reset();
  if (!ready_.empty()) {
    auto v = std::move(ready_.front());
    ready_.pop_front();
    return client_->complete(std::move(h), error_code{}, std::move(v));
  }
  client_->complete(std::move(h), final_, std::optional<key_value>());
}

void observer_core::next(asio::any_completion_handler<void(error_code, std::optional<key_value>)> h,
                         std::shared_ptr<early_cancel> cancel) {
  if (waiter_) return client_->complete(std::move(h), asio::error::already_started, std::optional<key_value>());
  auto seq = ++wait_seq_;
  bool cancelled = cancel->registered([w = weak_from_this(), seq] {
    auto self = w.lock();
    if (!self || !self->waiter_ || self->wait_seq_ != seq) return;
    auto h = std::move(*self->waiter_);
    self->waiter_.reset();
    self->client_->complete(std::move(h), asio::error::operation_aborted, std::optional<key_value>());
  });
  if (cancelled) return client_->complete(std::move(h), asio::error::operation_aborted, std::optional<key_value>());
  waiter_.emplace(std::move(h));
  deliver();
}

}  // namespace coetcd::detail

namespace coetcd {

election::election(session& s, std::string_view name) : state_(std::make_shared<detail::election_state>()) {
  if (name.empty()) throw boost::system::system_error(make_error_code(error::empty_key), "coetcd: election name");
  if (!detail::access::state(s)) throw boost::system::system_error(make_error_code(error::session_lost), "coetcd: election session");
  state_->session = detail::access::state(s);
  state_->name = std::string(name);
  state_->prefix = state_->name + "/";
  state_->key = state_->prefix + detail::lease_hex(s.lease());
}

election::~election() { abandon(); }

election& election::operator=(election&& other) noexcept {
  if (this != &other) {
    abandon();
    state_ = std::move(other.state_);
  }
  return *this;
}

void election::abandon() noexcept {
  if (!state_) return;  // moved from
  auto e = std::move(state_);
  e->pending.mark_gone();
  auto& strand = e->session->impl->strand_;  // before the move: arguments have no order
  asio::dispatch(strand, [e = std::move(e)] { e->pending.abort_all(); });
}

void election::start_campaign(const std::shared_ptr<detail::election_state>& e, std::string v,
                              asio::any_completion_handler<void(error_code, hold)> h) {
  if (!e) return detail::fail_empty(std::move(h));
  detail::spawn_hold_op<hold>(e->session->impl, detail::win(e, std::move(v)), std::move(h),
                              std::shared_ptr<detail::pending_ops>(e, &e->pending));
}

void election::start_leader(const std::shared_ptr<detail::election_state>& e,
                            asio::any_completion_handler<void(error_code, key_value)> h) {
  if (!e) return detail::fail_empty(std::move(h));
  auto impl = e->session->impl;
  auto slot = asio::get_associated_cancellation_slot(h);
  asio::co_spawn(
      impl->strand_,
      [](std::shared_ptr<detail::election_state> e) -> asio::awaitable<std::tuple<error_code, key_value>> {
        co_await detail::honour_every_cancellation();
        auto [ec, r] = co_await detail::get_on(e->session->impl, e->prefix, detail::first_create);
        if (ec) co_return std::make_tuple(ec, key_value());
        if (!r.kvs.empty() && !detail::is_own_key(e->prefix, r.kvs.front().key)) {
          // The oldest key is a longer name's, which no candidate of ours waits for: the leader
          // is the oldest of the name's own keys. Read the queue (rare: names nested in others).
          auto all = detail::first_create;
          all.limit = 0;
          std::tie(ec, r) = co_await detail::get_on(e->session->impl, e->prefix, all);
          if (ec) co_return std::make_tuple(ec, key_value());
          std::erase_if(r.kvs, [&](const key_value& kv) { return !detail::is_own_key(e->prefix, kv.key); });
        }
        if (r.kvs.empty()) co_return std::make_tuple(make_error_code(error::no_leader), key_value());
        co_return std::make_tuple(error_code(), std::move(r.kvs.front()));
      }(e),
      asio::bind_cancellation_slot(slot, [impl, h = std::move(h)](std::exception_ptr ex,
                                                                  std::tuple<error_code, key_value> r) mutable {
        if (ex) return impl->complete(std::move(h), detail::exception_to_error(ex), key_value());
        impl->complete(std::move(h), std::get<0>(r), std::move(std::get<1>(r)));
      }));
}

election::executor_type election::get_executor() const noexcept {
  return state_ ? state_->session->impl->io_ex_ : executor_type();
}
const std::string& election::name() const noexcept { return state_ ? state_->name : detail::empty_string(); }
const std::string& election::key() const noexcept { return state_ ? state_->key : detail::empty_string(); }

election::hold& election::hold::operator=(hold&& other) noexcept {
  if (this != &other) {
    hold dying(std::move(*this));
    state_ = std::move(other.state_);
  }
  return *this;
}

election::hold::~hold() {
  if (!state_ || !state_->leader.load()) return;
  auto& strand = state_->e->session->impl->strand_;
  asio::dispatch(strand, [l = std::move(state_)]() mutable {
    if (l->released || !l->leader) return;
    auto& strand = l->e->session->impl->strand_;
    asio::co_spawn(strand, detail::resign_in_background(std::move(l)), asio::detached);
  });
}

election::hold::operator bool() const noexcept {
  // Past the lease's deadline another campaign may already have won.
  return state_ && state_->leader && !state_->e->session->counts_as_lost();
}
std::int64_t election::hold::fencing_token() const noexcept { return state_ && state_->leader ? state_->rev : 0; }
compare election::hold::fence() const {
  if (!state_) detail::throw_empty("coetcd: fence() of an empty election hold");
  return compare::create_revision(state_->e->key) == (state_->leader ? state_->rev : -1);
}
const std::string& election::hold::key() const noexcept { return state_ ? state_->e->key : detail::empty_string(); }
std::int64_t election::hold::lease() const noexcept { return state_ ? state_->e->session->lease : 0; }
response_header election::hold::header() const noexcept { return state_ ? state_->header.load() : response_header{}; }
election::hold::executor_type election::hold::get_executor() const noexcept {
  return state_ ? state_->e->session->impl->io_ex_ : executor_type();
}

void election::hold::start_proclaim(const std::shared_ptr<detail::leadership_state>& l, std::string v,
                                    asio::any_completion_handler<void(error_code)> h) {
  if (!l) return detail::fail_empty(std::move(h));
  detail::spawn_op(l->e->session->impl, detail::proclaim(l, std::move(v)), std::move(h));
}

void election::hold::start_release(const std::shared_ptr<detail::leadership_state>& l,
                                   asio::any_completion_handler<void(error_code)> h) {
  if (!l) return detail::fail_empty(std::move(h));
  detail::spawn_op(l->e->session->impl, detail::resign(l), std::move(h));
}

void election::hold::start_wait_lost(const std::shared_ptr<detail::leadership_state>& l,
                                     asio::any_completion_handler<void(error_code, loss_reason)> h) {
  if (!l) return detail::fail_empty(std::move(h));
  detail::wait_hold_lost(l->e->session, l->losses, [l] { return l->released; }, std::move(h), l);
}

election_observer::election_observer(client& c, std::string_view name) {
  if (name.empty()) throw boost::system::system_error(make_error_code(error::empty_key), "coetcd: election name");
  core_ = std::make_shared<detail::observer_core>(detail::access::impl(c), std::string(name) + "/");
  auto core = core_;
  asio::dispatch(detail::access::impl(c)->strand_, [core] { core->start(); });
}

election_observer::executor_type election_observer::get_executor() const noexcept {
  return core_ ? core_->io_executor() : executor_type();
}

election_observer::~election_observer() { abandon(); }

election_observer& election_observer::operator=(election_observer&& other) noexcept {
  if (this != &other) {
    abandon();
    core_ = std::move(other.core_);
  }
  return *this;
}

void election_observer::abandon() noexcept {
  if (!core_) return;
  auto core = std::move(core_);
  asio::dispatch(core->strand(), [core] { core->stop(); });
}

void election_observer::start_next(const std::shared_ptr<detail::observer_core>& c,
                                   asio::any_completion_handler<void(error_code, std::optional<key_value>)> h) {
  if (!c) return detail::fail_empty(std::move(h));
  auto cancel = detail::early_cancel::take(asio::get_associated_cancellation_slot(h), c->strand());
  asio::dispatch(c->strand(), [c, cancel, h = std::move(h)]() mutable { c->next(std::move(h), std::move(cancel)); });
}

}  // namespace coetcd
