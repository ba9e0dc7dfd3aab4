// coetcd::leader: the campaign loop (a fresh session per term), the race that ends a term, and
// the queue of events its reader takes. All state lives on the leader's strand.
#include "recipes/held_key.hpp"

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
  std::atomic<std::int64_t> term_revision{0};
  std::atomic<std::uint64_t> terms{0};
  bool running = false;
  bool stopped = false;
  asio::steady_timer stop_timer;  // never expires: stop() cancels it
  std::deque<leader_event> events;
  std::shared_ptr<handler<leader_event>> reader;
  std::minstd_rand spread{std::random_device{}()};

  explicit leader_state(asio::any_io_executor strand) : ex(strand), stop_timer(strand) {
    stop_timer.expires_at(asio::steady_timer::time_point::max());
  }

  void tell(leader_event e) {
    events.push_back(e);
    if (events.size() > 1000) events.pop_front();
    feed();
  }
  // Gives the oldest event to a waiting reader. The event leaves the queue in the same strand
  // step that takes the handler out, so a cancellation that comes later finds nothing to abort.
  void feed() {
    if (!reader || !*reader || events.empty()) return;
    auto h = std::move(*reader);
    reader.reset();
    asio::get_associated_cancellation_slot(h).clear();
    auto e = events.front();
    events.pop_front();
    asio::post(ex, asio::append(std::move(h), error_code{}, e));
  }
  void abort_reader() {
    if (!reader || !*reader) return;
    auto h = std::move(*reader);
    reader.reset();
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
asio::awaitable<body_outcome> run_body(leader_body& body, const leader_term& term) {
  body_outcome out;
  try {
    auto run = body(term);  // called in here: a body that throws before its first await is caught too
    co_await std::move(run);
  } catch (...) {
    out.error = std::current_exception();
  }
  co_return out;
}

struct term_outcome {
  error_code failed;          // the attempt failed before leading (session or campaign)
  bool body_returned = false;
  std::exception_ptr body_error;
};

// One attempt: a fresh session, a campaign, and the term until it ends. Cancelled (the run
// stopped): the session is closed before this throws operation_aborted.
asio::awaitable<term_outcome> one_term(leader_state& s, leader_body& body) {
  term_outcome out;
  client* c = s.impl->closed() ? nullptr : s.impl->user_;
  if (!c) throw boost::system::system_error(make_error_code(error::client_closed), "coetcd::leader");
  session_options so;
  so.ttl = s.options.ttl;
  auto [sec, sess] = co_await session::async_create(*c, so, as_result);
  if (sec) {
    out.failed = sec;
    co_return out;
  }
  election e(sess, s.name);
  auto [cec] = co_await e.async_campaign(s.options.value, as_result);
  auto state = co_await asio::this_coro::cancellation_state;
  if (!cec && state.cancelled() == asio::cancellation_type::none) {
    leader_term term{e.key(), e.revision(), sess.lease(), &sess};
    s.term_revision = term.revision;
    s.leading = true;
    ++s.terms;
    s.tell({leader_event::kind::elected, term.revision, {}});
    auto key = term.key;
    auto raced = co_await (run_body(body, term) || wait_lost(sess) || wait_key_gone(*c, key, term.revision, term.lease, make_error_code(error::not_leader)));
    s.leading = false;
    s.term_revision = 0;
    error_code why;
    if (raced.index() == 0) {
      out.body_error = std::get<0>(raced).error;
      out.body_returned = !out.body_error;
    } else {
      why = raced.index() == 1 ? std::get<1>(raced) : std::get<2>(raced);
    }
    state = co_await asio::this_coro::cancellation_state;
    if (state.cancelled() != asio::cancellation_type::none) why = asio::error::operation_aborted;
    if (out.body_error && !why) why = exception_to_error(out.body_error);
    s.tell({leader_event::kind::lost, term.revision, why});
  } else {
    out.failed = cec ? cec : make_error_code(asio::error::operation_aborted);
  }
  // Revoking the lease deletes our key too.
  bool was_cancelled = co_await close_whatever_happens(sess);
  if (was_cancelled) throw boost::system::system_error(make_error_code(asio::error::operation_aborted), "coetcd::leader");
  co_return out;
}

asio::awaitable<void> terms_loop(const std::shared_ptr<leader_state>& s, leader_body& body) {
  int attempt = 0;
  asio::steady_timer pause(s->ex);
  for (;;) {
    auto out = co_await one_term(*s, body);
    if (out.failed == asio::error::operation_aborted)
      throw boost::system::system_error(out.failed, "coetcd::leader");
    if (out.failed && fatal(out.failed)) throw boost::system::system_error(out.failed, "coetcd::leader");
    if (out.body_error) std::rethrow_exception(out.body_error);
    if (out.body_returned && !s->options.requeue) break;
    if (out.failed) {
      s->tell({leader_event::kind::failed, 0, out.failed});
      pause.expires_after(s->pause(attempt++));
    } else {
      attempt = 0;
      // A term that ended: campaign again at once, unless it was lost (an outage may be under
      // way: the next session would fail, or lose again at once).
      pause.expires_after(out.body_returned ? std::chrono::milliseconds(0) : s->pause(0));
    }
    co_await pause.async_wait(use_awaitable);
  }
}

// terms_loop with its exception as a value (see run_body).
asio::awaitable<std::exception_ptr> capture_terms(const std::shared_ptr<leader_state>& s, leader_body& body) {
  try {
    co_await terms_loop(s, body);
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
  if (outcome.index() == 1)
    throw boost::system::system_error(make_error_code(asio::error::operation_aborted), "coetcd::leader: stopped");
  if (auto e = std::get<0>(outcome)) std::rethrow_exception(e);
}

void start_leader_next(const std::shared_ptr<leader_state>& s, handler<leader_event> h) {
  if (!s) return fail_empty(std::move(h));
  auto slot = asio::get_associated_cancellation_slot(h);
  auto shared = std::make_shared<handler<leader_event>>(std::move(h));
  if (slot.is_connected())
    slot.assign([s, w = std::weak_ptr<handler<leader_event>>(shared)](asio::cancellation_type) {
      asio::dispatch(s->ex, [s, w] {
        auto h = w.lock();
        if (!h || !*h || s->reader != h) return;
        s->abort_reader();
      });
    });
  asio::dispatch(s->ex, [s, shared] {
    if (!*shared) return;
    if (s->reader && *s->reader) {
      asio::get_associated_cancellation_slot(*shared).clear();
      return asio::post(s->ex, asio::append(std::move(*shared), make_error_code(asio::error::already_started), leader_event{}));
    }
    if (s->stopped) {
      asio::get_associated_cancellation_slot(*shared).clear();
      return asio::post(s->ex, asio::append(std::move(*shared), make_error_code(asio::error::operation_aborted), leader_event{}));
    }
    s->reader = shared;
    s->feed();
  });
}

}  // namespace detail

leader::leader(client& c, std::string_view name, leader_options options) {
  auto fail = [](error e) { throw boost::system::system_error(make_error_code(e), "coetcd::leader"); };
  if (name.empty()) fail(error::empty_key);
  if (options.ttl < std::chrono::seconds(1) || options.retry_min.count() < 0 || options.retry_min > options.retry_max)
    fail(error::invalid_argument);
  if (!c.impl() || c.impl()->closed()) fail(error::client_closed);
  state_ = std::make_shared<detail::leader_state>(asio::make_strand(c.get_executor()));
  state_->impl = c.impl();
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
bool leader::is_leader() const noexcept { return state_ && state_->leading; }
std::int64_t leader::revision() const noexcept { return state_ ? state_->term_revision.load() : 0; }
std::uint64_t leader::terms() const noexcept { return state_ ? state_->terms.load() : 0; }

}  // namespace coetcd
