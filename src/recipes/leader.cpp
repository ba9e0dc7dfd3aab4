// coetcd::leader: the campaign loop (a fresh session per term), the race that ends a term, and
// the queue of events its reader takes. All state lives on the leader's strand.
#include "recipes/held_key.hpp"
#include "recipes/leadership.hpp"

#include <coetcd/election.hpp>
#include <coetcd/leader.hpp>
#include <coetcd/watcher.hpp>

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include <atomic>
#include <deque>
#include <random>

namespace coetcd {
namespace detail {

struct leader_state : std::enable_shared_from_this<leader_state> {
  asio::any_io_executor ex;  // a strand of the client's executor
  std::shared_ptr<client_impl> impl;
  std::string name;
  leader_options options;
  std::atomic<bool> leading{false};
  // The term's session, for is_leader() on any thread: past its lease's deadline the term may
  // be over at etcd before the loop has run the timer that ends it here.
  std::atomic<std::shared_ptr<session_state>> term_session;
  std::atomic<std::int64_t> term_revision{0};
  std::atomic<std::uint64_t> terms{0};
  bool running = false;
  bool stopped = false;
  asio::steady_timer stop_timer;  // never expires: stop() cancels it
  std::deque<leader_event> events;
  std::shared_ptr<handler<leader_event>> reader;
  std::shared_ptr<std::atomic<bool>> reader_cancelled;
  bool delivering = false;  // an event is on its way to the reader: the next waits for it
  std::minstd_rand spread{std::random_device{}()};

  explicit leader_state(asio::any_io_executor strand) : ex(strand), stop_timer(strand) {
    stop_timer.expires_at(asio::steady_timer::time_point::max());
  }

  void tell(leader_event e) {
    events.push_back(e);
    if (events.size() > 1000) events.pop_front();
    feed();
  }
  // The term `rev` is over: said at once, even while its body is still winding down.
  void end_term(std::int64_t rev, error_code why) {
    if (!leading || term_revision != rev) return;
    leading = false;
    term_session.store(nullptr);
    term_revision = 0;
    tell({leader_event::kind::lost, rev, why});
  }
  // Gives the oldest event to a waiting reader. A reader cancelled before the event reaches it
  // (the other branch of an `||` won) puts it back first in line: no event is lost.
  void feed() {
    if (delivering || !reader || !*reader || events.empty()) return;
    delivering = true;
    auto h = std::move(*reader);
    reader.reset();
    auto cancelled = std::exchange(reader_cancelled, nullptr);
    auto e = events.front();
    events.pop_front();
    asio::post(ex, [self = shared_from_this(), h = std::move(h), cancelled, e]() mutable {
      self->delivering = false;
      asio::get_associated_cancellation_slot(h).clear();
      if (cancelled && *cancelled) {
        self->events.push_front(e);
        asio::dispatch(asio::append(std::move(h), make_error_code(asio::error::operation_aborted), leader_event{}));
      } else {
        asio::dispatch(asio::append(std::move(h), error_code{}, e));
      }
      self->feed();
    });
  }
  void abort_reader() {
    if (!reader || !*reader) return;
    auto h = std::move(*reader);
    reader.reset();
    reader_cancelled.reset();
    asio::get_associated_cancellation_slot(h).clear();
    asio::post(ex, asio::append(std::move(h), make_error_code(asio::error::operation_aborted), leader_event{}));
  }
  std::chrono::milliseconds pause(int attempt) { return backoff(options.retry_min, options.retry_max, attempt, spread); }
};

namespace {

using namespace asio::experimental::awaitable_operators;

struct body_outcome {
  std::exception_ptr error;
};

// The body's exception travels as a value: Asio's || waits for the first operation that
// succeeds, and a body that threw must end the race as well.
asio::awaitable<body_outcome> run_body(leader_body& body, election::hold& term) {
  body_outcome out;
  try {
    auto run = body(term);  // called in here: a body that throws before its first await is caught too
    co_await std::move(run);
  } catch (...) {
    out.error = std::current_exception();
  }
  co_return out;
}

// The two ends of a term that are not the body's: each ends the term at once (is_leader() false,
// `lost` told) and then lets the race cancel the body.
asio::awaitable<error_code> session_ends(leader_state& s, session& sess, std::int64_t rev) {
  auto why = co_await wait_lost(sess);
  s.end_term(rev, why);
  co_return why;
}
asio::awaitable<error_code> key_goes(leader_state& s, const std::string& key, std::int64_t rev, std::int64_t lease) {
  auto why = co_await wait_key_gone(s.impl, key, rev, lease, rev, make_error_code(error::not_leader));
  if (why != asio::error::operation_aborted) s.end_term(rev, why);
  co_return why;
}

struct term_outcome {
  error_code failed;          // the attempt failed before leading (session or campaign)
  bool body_returned = false;
  std::exception_ptr body_error;
};

// One attempt: a fresh session, a campaign, and the term until it ends. Runs with
// throw_if_cancelled off: a cancel (the run stopped) shows as operation_aborted results, and the
// session is closed before this returns them.
asio::awaitable<term_outcome> one_term(leader_state& s, leader_body& body) {
  term_outcome out;
  session_options so;
  so.ttl = s.options.ttl;
  auto [sec, sess] = co_await create_session_on(s.impl, so);
  if (sec) {
    out.failed = sec;
    co_return out;
  }
  election e(sess, s.name);
  // With throw_if_cancelled off, a cancel that the session's grant absorbed is seen only by
  // asking: the campaign could otherwise wait for ever behind another leader.
  error_code cec;
  election::hold term;
  if (cancelled(co_await asio::this_coro::cancellation_state)) cec = asio::error::operation_aborted;
  else std::tie(cec, term) = co_await e.async_campaign(s.options.value, as_result);
  if (!cec && cancelled(co_await asio::this_coro::cancellation_state)) cec = asio::error::operation_aborted;
  if (!cec && sess.lost()) cec = error::session_lost;  // lost between the win and now: no term
  if (!cec) {
    const auto rev = term.fencing_token();
    const auto key = term.key();
    s.term_revision = rev;
    s.term_session.store(detail::access::state(sess));
    s.leading = true;
    ++s.terms;
    s.tell({leader_event::kind::elected, rev, {}});
    auto raced = co_await (run_body(body, term) || session_ends(s, sess, rev) || key_goes(s, key, rev, sess.lease()));
    error_code why;
    if (raced.index() == 0) {
      out.body_error = std::get<0>(raced).error;
      out.body_returned = !out.body_error;
      if (out.body_error) why = exception_to_error(out.body_error);
    } else {
      why = raced.index() == 1 ? std::get<1>(raced) : std::get<2>(raced);
      // The key went while the lease lives: the hold lent to the body says so too.
      if (raced.index() == 2 && why != asio::error::operation_aborted)
        lose_leadership(term, loss_reason{loss_reason::kind::key_gone, why});
    }
    if (cancelled(co_await asio::this_coro::cancellation_state)) why = asio::error::operation_aborted;
    s.end_term(rev, why);
  } else {
    out.failed = cec;
  }
  // Revoking the lease deletes our key too. The close runs to its end; a cancel that came
  // meanwhile is answered after it.
  const bool was_cancelled = cancelled(co_await asio::this_coro::cancellation_state);
  co_await asio::this_coro::reset_cancellation_state();
  co_await close_whatever_happens(sess);
  if (was_cancelled) out.failed = asio::error::operation_aborted;
  co_return out;
}

asio::awaitable<void> terms_loop(const std::shared_ptr<leader_state>& s, leader_body& body, bool& was_cancelled) {
  int attempt = 0;
  asio::steady_timer pause(s->ex);
  for (;;) {
    auto out = co_await one_term(*s, body);
    if (out.failed == asio::error::operation_aborted || was_cancelled) {
      was_cancelled = true;
      throw boost::system::system_error(make_error_code(asio::error::operation_aborted), "coetcd::leader");
    }
    if (out.failed && fatal(out.failed)) throw boost::system::system_error(out.failed, "coetcd::leader");
    if (out.body_error) std::rethrow_exception(out.body_error);
    if (out.body_returned && !s->options.requeue) break;
    if (out.failed) {
      s->tell({leader_event::kind::failed, 0, out.failed});
      pause.expires_after(s->pause(attempt++));
    } else {
      attempt = 0;
      // A term that ended: campaign again at once when the body returned; after retry_min when
      // it was lost (an outage may be under way: the next session would fail, or lose again).
      pause.expires_after(out.body_returned ? std::chrono::milliseconds(0) : s->pause(0));
    }
    error_code pec = asio::error::operation_aborted;
    if (!cancelled(co_await asio::this_coro::cancellation_state)) std::tie(pec) = co_await pause.async_wait(as_result);
    if (pec || cancelled(co_await asio::this_coro::cancellation_state)) {
      was_cancelled = true;
      throw boost::system::system_error(make_error_code(asio::error::operation_aborted), "coetcd::leader");
    }
  }
}

// terms_loop with its exception as a value (see run_body), and cancellation answered by results
// rather than by exceptions thrown from any co_await (the session must be closed first).
asio::awaitable<std::exception_ptr> capture_terms(const std::shared_ptr<leader_state>& s, leader_body& body) {
  co_await asio::this_coro::throw_if_cancelled(false);
  bool was_cancelled = false;
  try {
    co_await terms_loop(s, body, was_cancelled);
  } catch (...) {
    co_return std::current_exception();
  }
  co_return nullptr;
}

asio::awaitable<void> wait_stopped(const std::shared_ptr<leader_state>& s) {
  if (!s->stopped) co_await s->stop_timer.async_wait(as_result);
}

}  // namespace

asio::any_io_executor leader_executor(const std::shared_ptr<leader_state>& s) { return s->ex; }

asio::awaitable<void> run_leader(std::shared_ptr<leader_state> s, leader_body body) {
  if (s->running)
    throw boost::system::system_error(make_error_code(asio::error::already_started), "coetcd::leader::async_run");
  if (s->stopped)
    throw boost::system::system_error(make_error_code(asio::error::operation_aborted), "coetcd::leader: stopped");
  s->running = true;
  auto outcome = co_await (capture_terms(s, body) || wait_stopped(s));
  s->running = false;
  // No ?: with temporaries in a coroutine: g++ 12 destroys them wrongly (docs/how-it-works.md).
  std::exception_ptr error;
  if (outcome.index() == 1)
    error = std::make_exception_ptr(boost::system::system_error(make_error_code(asio::error::operation_aborted), "coetcd::leader: stopped"));
  else
    error = std::get<0>(outcome);
  error_code why;
  if (error) why = exception_to_error(error);
  s->tell({leader_event::kind::stopped, 0, why});
  if (error) std::rethrow_exception(error);
}

void start_leader_next(const std::shared_ptr<leader_state>& s, handler<leader_event> h) {
  if (!s) return fail_empty(std::move(h));
  auto slot = asio::get_associated_cancellation_slot(h);
  auto shared = std::make_shared<handler<leader_event>>(std::move(h));
  auto cancelled = std::make_shared<std::atomic<bool>>(false);
  if (slot.is_connected())
    slot.assign([s, w = std::weak_ptr<handler<leader_event>>(shared), cancelled](asio::cancellation_type) {
      *cancelled = true;  // an event already on its way is put back (see feed)
      asio::dispatch(s->ex, [s, w] {
        auto h = w.lock();
        if (!h || !*h || s->reader != h) return;
        s->abort_reader();
      });
    });
  asio::dispatch(s->ex, [s, shared, cancelled] {
    if (!*shared) return;
    if (*cancelled) {  // cancelled before it got here
      asio::get_associated_cancellation_slot(*shared).clear();
      return asio::post(s->ex, asio::append(std::move(*shared), make_error_code(asio::error::operation_aborted), leader_event{}));
    }
    if (s->reader && *s->reader) {
      asio::get_associated_cancellation_slot(*shared).clear();
      return asio::post(s->ex, asio::append(std::move(*shared), make_error_code(asio::error::already_started), leader_event{}));
    }
    if (s->stopped) {
      asio::get_associated_cancellation_slot(*shared).clear();
      return asio::post(s->ex, asio::append(std::move(*shared), make_error_code(asio::error::operation_aborted), leader_event{}));
    }
    s->reader = shared;
    s->reader_cancelled = cancelled;
    s->feed();
  });
}

}  // namespace detail

leader::leader(client& c, std::string_view name, leader_options options) {
  auto fail = [](error e) { throw boost::system::system_error(make_error_code(e), "coetcd::leader"); };
  if (name.empty()) fail(error::empty_key);
  if (options.ttl < std::chrono::seconds(1) || options.retry_min.count() < 1 || options.retry_min > options.retry_max)
    fail(error::invalid_argument);
  if (!detail::access::impl(c)) fail(error::client_closed);
  state_ = std::make_shared<detail::leader_state>(asio::make_strand(c.get_executor()));
  state_->impl = detail::access::impl(c);
  state_->name = std::string(name);
  state_->options = std::move(options);
}

leader& leader::operator=(leader&& other) noexcept {
  if (this != &other) {
    stop();
    state_ = std::move(other.state_);
  }
  return *this;
}

leader::~leader() { stop(); }

void leader::stop() noexcept {
  if (!state_) return;
  auto s = std::move(state_);
  asio::dispatch(s->ex, [s] {
    s->stopped = true;
    s->stop_timer.cancel();
    s->abort_reader();
  });
}

leader::executor_type leader::get_executor() const noexcept { return state_ ? state_->ex : executor_type(); }
const std::string& leader::name() const noexcept { return state_ ? state_->name : detail::empty_string(); }
bool leader::is_leader() const noexcept {
  if (!state_ || !state_->leading) return false;
  const auto s = state_->term_session.load();
  return s && !s->counts_as_lost();  // as election::is_leader()
}
std::int64_t leader::fencing_token() const noexcept { return state_ ? state_->term_revision.load() : 0; }
std::uint64_t leader::terms() const noexcept { return state_ ? state_->terms.load() : 0; }

}  // namespace coetcd
