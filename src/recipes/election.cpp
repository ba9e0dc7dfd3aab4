// Election: campaign, proclaim, resign and the observer, on queue_ops' keys like etcd's Go package.
#include "queue_ops.hpp"

#include <coetcd/election.hpp>
#include <coetcd/election_observer.hpp>

#include <deque>

namespace coetcd::detail {

struct election_state {
  std::shared_ptr<session_state> session;
  std::string name;
  std::string prefix;  // name + "/"
  std::string key;     // prefix + hex(lease)
  // Read by the accessors from any thread: atomics, and a seqlock for the header.
  std::atomic<bool> leader{false};
  bool led_before_campaign = false;  // a campaign of a sitting leader only proclaims
  bool orphaned = false;  // the election object is gone: a leadership won now is given up at once
  pending_ops pending;    // campaigns in flight, aborted when the object goes
  std::atomic<std::int64_t> rev{0};
  published_header header;
  std::shared_ptr<lock_view> view;
};

constexpr get_options first_create{.prefix = true, .limit = 1, .order = sort_order::ascend,
                                   .target = sort_target::create_revision};

namespace {

/// No longer the leader: the key is not ours to keep any more. Once only: a resign still on the
/// wire when the object is destroyed must not give up a count that the destructor gave up.
void step_down(election_state& e) {
  if (!e.leader) return;
  e.leader = false;
  e.rev = 0;
  auto& users = e.session->key_users;
  if (auto it = users.find(e.key); it != users.end() && --it->second <= 0) users.erase(it);
}

/// Puts `value` on our key while it is still the one we campaigned with.
asio::awaitable<error_code> put_value(election_state& e, const std::string& value) {
  auto t = txn()
               .when(compare::create_revision(e.key) == e.rev.load())
               .then(txn_op::put(e.key, value, put_options{.lease = e.session->lease}));
  auto [ec, r] = co_await batched_txn(e.session->impl, std::move(t), {});
  if (ec) co_return ec;
  if (!r.succeeded) co_return error::not_leader;
  e.header = r.header;
  key_rewritten(*e.session, e.prefix, e.key, r.header.revision);
  co_return error_code{};
}

asio::awaitable<error_code> campaign(std::shared_ptr<election_state> ep, std::string value) {
  co_await handle_cancellation_manually();
  auto& e = *ep;
  auto& s = *e.session;
  e.led_before_campaign = e.leader;
  if (s.lost) co_return error::session_lost;
  if (e.leader) {
    // Our key is gone (deleted by hand, or with the lease): the leadership is lost. Say so as for
    // a proposal that vanished while waiting, and start the next campaign from scratch.
    auto ec = co_await put_value(e, value);
    if (ec != error::not_leader) co_return ec;
    step_down(e);
    co_return error::session_lost;
  }
  ++s.key_users[e.key];  // counted like a mutex's, so a clean-up never removes a newer campaign's key
  const std::shared_ptr<lock_view> no_view;  // named: see mutex.cpp on g++ 12.2 and temporaries
  const turn_rule oldest_first;
  const bool cancellable = co_await can_be_cancelled();
  auto a = co_await acquire_or_abandon(e.session, e.prefix, e.key, value, no_view, cancellable, oldest_first);
  if (a.ec) {
    if (!a.abandoned) release_key_later(s, e.key, 0);  // the txn may have been applied
    co_return a.ec;
  }
  e.rev = a.rev;
  error_code ec;
  if (!a.txn.succeeded && a.rev != 0) {
    // Our key was there already (an earlier campaign of this session): make it say `value`.
    const auto& mine = a.txn.responses.at(0).get().kvs;
    if (mine.empty() || mine.front().value != value) ec = co_await put_value(e, value);
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
  if (!ec && (e.orphaned || co_await cancellation_requested())) ec = asio::error::operation_aborted;
  if (ec) {
    release_key_later(s, e.key, a.rev);  // nobody waits for it: see release_key_later
    e.rev = 0;
    co_return ec == error::not_leader ? make_error_code(error::session_lost) : ec;
  }
  e.leader = true;
  e.header = a.txn.header;
  if (s.impl->wants_events())
    s.impl->emit({.kind = event_kind::leader_changed, .name = e.name, .key = e.key, .detail = "this session won",
                  .lease = s.lease, .revision = e.rev});
  co_return error_code{};
}

asio::awaitable<error_code> proclaim(std::shared_ptr<election_state> ep, std::string value) {
  auto& e = *ep;
  if (!e.leader) co_return error::not_leader;
  auto ec = co_await put_value(e, value);
  if (ec == error::not_leader) step_down(e);
  co_return ec;
}

asio::awaitable<error_code> resign(std::shared_ptr<election_state> ep) {
  auto& e = *ep;
  if (!e.leader) co_return error_code{};
  // A mutex of this session on the same name holds the same key (its txn adopted ours, or ours
  // adopted its): then leave the key to it and only step down.
  if (auto it = e.session->key_users.find(e.key); it != e.session->key_users.end() && it->second > 1) {
    step_down(e);
    co_return error_code{};
  }
  auto t = txn().when(compare::create_revision(e.key) == e.rev.load()).then(txn_op::del(e.key));
  delete_in_flight deleting(*e.session, e.key);
  write_queue guarded;  // a copy applied late cannot remove a newer key: resent when slow too
  guarded.late_copy_safe = true;
  auto [ec, r] = co_await batched_txn(e.session->impl, std::move(t), std::move(guarded));
  if (ec && may_pass(ec) && e.leader) {
    // Timed out or unreachable: the delete may have landed, and a leader that still believed it
    // led would act on a leadership nobody holds. So stop leading here, as a failed unlock stops
    // holding, and keep deleting in the background until the delete lands or the session ends
    // (the lease then takes the key). Not when the object was destroyed meanwhile: its
    // resign_later took the key over.
    e.leader = false;
    release_key_later(*e.session, e.key, e.rev.exchange(0));
  }
  if (ec) co_return ec;  // refused (not an outage): still leader, the caller may retry
  step_down(e);  // a no-op if the object was destroyed meanwhile (it gave the key up)
  e.header = r.header;
  co_return error_code{};
}

/// Gives the leadership up in the background: for a caller that has moved on, or an object gone.
void resign_later(const std::shared_ptr<election_state>& e) {
  if (!e->leader) return;
  e->leader = false;
  auto resign = [](std::shared_ptr<election_state> e, std::int64_t rev) -> asio::awaitable<void> {
    co_await release_key(*e->session, e->key, rev);
  };
  asio::co_spawn(e->session->impl->strand_, resign(e, e->rev.exchange(0)), asio::detached);
}

}  // namespace

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
  if (!s.state()) throw boost::system::system_error(make_error_code(error::session_lost), "coetcd: election session");
  state_->session = s.state();
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
  // As a mutex unlocks and a semaphore gives its permits back: a leadership nobody can resign
  // would block the name, and its key's count would make the session's next election or mutex
  // on the name adopt the key and never delete it.
  auto e = std::move(state_);
  e->pending.mark_gone();
  auto& strand = e->session->impl->strand_;
  asio::dispatch(strand, [e = std::move(e)] {
    e->orphaned = true;
    e->pending.abort_all();
    detail::resign_later(e);
  });
}

void election::start_campaign(const std::shared_ptr<detail::election_state>& e, std::string v,
                              asio::any_completion_handler<void(error_code)> h) {
  if (!e) return detail::fail_empty(std::move(h));
  // Leadership won for a caller that has moved on is resigned, or nobody would ever resign it.
  auto give_back = [e] {
    if (!e->led_before_campaign) detail::resign_later(e);
  };
  detail::spawn_grant_op(e->session->impl, detail::campaign(e, std::move(v)), std::move(h), std::move(give_back),
                         std::shared_ptr<detail::pending_ops>(e, &e->pending));
}

void election::start_proclaim(const std::shared_ptr<detail::election_state>& e, std::string v,
                              asio::any_completion_handler<void(error_code)> h) {
  if (!e) return detail::fail_empty(std::move(h));
  detail::spawn_op(e->session->impl, detail::proclaim(e, std::move(v)), std::move(h));
}

void election::start_resign(const std::shared_ptr<detail::election_state>& e,
                            asio::any_completion_handler<void(error_code)> h) {
  if (!e) return detail::fail_empty(std::move(h));
  detail::spawn_op(e->session->impl, detail::resign(e), std::move(h));
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
bool election::is_leader() const noexcept {
  // As mutex::held(): past the lease's deadline another campaign may already have won.
  return state_ && state_->leader && !state_->session->counts_as_lost();
}
std::int64_t election::revision() const noexcept { return state_ && state_->leader ? state_->rev.load() : 0; }
response_header election::header() const noexcept { return state_ ? state_->header.load() : response_header{}; }

election_observer::election_observer(client& c, std::string_view name) {
  if (name.empty()) throw boost::system::system_error(make_error_code(error::empty_key), "coetcd: election name");
  core_ = std::make_shared<detail::observer_core>(c.impl(), std::string(name) + "/");
  auto core = core_;
  asio::dispatch(c.impl()->strand_, [core] { core->start(); });
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
