// coetcd::counter: add, compare-and-set and get as optimistic txns on one key, run on the
// client's strand with the last value and mod revision seen as the compare's hint; the adds
// queued while one txn is on the wire go as one sum in the next.
#include "core/coro.hpp"
#include "write_outcome.hpp"

#include <coetcd/counter.hpp>

#include <charconv>
#include <tuple>

namespace coetcd {
namespace detail {

struct counter_state {
  std::shared_ptr<client_impl> client;
  std::string key;
  // The value and mod revision of the key as last seen, on the strand only. `known` false: no
  // hint (never read, or an outcome unknown), and the first txn's compare fails on purpose.
  std::int64_t value = 0;
  std::int64_t revision = 0;
  bool known = false;
  // Adds wait here while a txn of this object's adds is on the wire; the next txn carries all
  // of them as one sum, and each add completes with the value after its own delta.
  struct pending_add {
    std::int64_t delta;
    handler<std::int64_t> h;
  };
  std::vector<pending_add> adds;
  std::vector<pending_add> batch;  // the adds of the txn on the wire
  bool adding = false;
  pending_ops pending;  // compare-and-sets and gets in flight, aborted when the object goes
};

namespace {

// The key as read (by a get, or a txn's else branch): the new hint, or not_a_number.
error_code learn(counter_state& s, const get_result& got) {
  if (got.kvs.empty()) {
    s.value = 0;
    s.revision = 0;
  } else {
    auto v = counter::parse(got.kvs.front().value);
    if (!v) {
      s.known = false;
      return error::not_a_number;
    }
    s.value = *v;
    s.revision = got.kvs.front().mod_revision;
  }
  s.known = true;
  return {};
}

// One txn: if the key is as last seen, `then`; else read it. On success the hint becomes
// (`written`, the txn's revision) when something was written.
asio::awaitable<std::tuple<error_code, bool>> try_once(counter_state& s, std::optional<std::int64_t> written) {
  txn t;
  t.when(compare::mod_revision(s.key) == (s.known ? s.revision : -1));
  if (written) t.then(txn_op::put(s.key, std::to_string(*written)));
  t.otherwise(txn_op::get(s.key));
  auto [ec, r] = co_await txn_on(s.client, std::move(t));
  if (ec) {
    s.known = false;
    if (written && !surely_not_applied(ec)) ec = error::outcome_unknown;
    co_return std::make_tuple(ec, false);
  }
  if (r.succeeded) {
    if (written) {
      s.value = *written;
      s.revision = r.header.revision;
    }
    co_return std::make_tuple(error_code{}, true);
  }
  co_return std::make_tuple(learn(s, r.responses.front().get()), false);
}

// The values after each delta of `batch`, from `base`; empty when one would overflow.
std::optional<std::vector<std::int64_t>> running_sums(std::int64_t base, const std::vector<counter_state::pending_add>& batch) {
  std::vector<std::int64_t> after;
  for (auto& a : batch) {
    if (__builtin_add_overflow(base, a.delta, &base)) return std::nullopt;
    after.push_back(base);
  }
  return after;
}

// Sends the queued adds, as one txn per batch, until none is left. On the strand.
asio::awaitable<void> flush_adds(std::shared_ptr<counter_state> s) {
  auto fail = [&s](std::vector<counter_state::pending_add>& adds, error_code ec) {
    for (auto& a : adds) s->client->complete(std::move(a.h), ec, std::int64_t{0});
    adds.clear();
  };
  auto& batch = s->batch;  // in the state: the object's destruction aborts it meanwhile
  try {
    while (!s->adds.empty()) {
      batch = std::exchange(s->adds, {});
      bool checked = false;  // the hint was just confirmed current by a txn
      while (!batch.empty()) {
        std::optional<std::vector<std::int64_t>> after;
        if (s->known) after = running_sums(s->value, batch);
        if (s->known && !after && checked) {
          // The value is as seen, and some adds would pass the 64-bit range: those fail alone.
          std::int64_t v = s->value;
          std::vector<counter_state::pending_add> fit;
          for (auto& a : batch) {
            std::int64_t next = 0;
            if (__builtin_add_overflow(v, a.delta, &next))
              s->client->complete(std::move(a.h), make_error_code(error::invalid_argument), std::int64_t{0});
            else
              v = next, fit.push_back(std::move(a));
          }
          batch = std::move(fit);
          continue;
        }
        // Named, not a ?: inside the co_await: g++ 12 miscompiles that (an invalid read, seen by valgrind).
        std::optional<std::int64_t> written;
        if (after) written = after->back();
        // Without a sum (no hint, or one that overflows) the txn only checks the hint, else reads.
        auto [ec, done] = co_await try_once(*s, written);
        if (batch.empty()) break;  // the object went meanwhile: its adds were aborted
        if (ec) {
          fail(batch, ec);
          break;
        }
        if (done && after) {
          for (std::size_t i = 0; i < batch.size(); ++i) s->client->complete(std::move(batch[i].h), error_code{}, (*after)[i]);
          batch.clear();
          break;
        }
        checked = done;  // the compare held: the hint is the key's value now
      }
    }
  } catch (...) {
    // Nothing here throws but allocation; whatever did, no add is left waiting.
    fail(batch, make_error_code(boost::system::errc::not_enough_memory));
    fail(s->adds, make_error_code(boost::system::errc::not_enough_memory));
  }
  s->adding = false;
}

asio::awaitable<std::tuple<error_code, bool, std::int64_t>> compare_and_set(std::shared_ptr<counter_state> s,
                                                                           std::int64_t expected,
                                                                           std::int64_t desired) {
  for (;;) {
    const bool matches = s->known && s->value == expected;
    const bool was_known = s->known;
    const std::int64_t seen = s->value;
    std::optional<std::int64_t> written;  // named: see flush_adds
    if (matches) written = desired;
    auto [ec, done] = co_await try_once(*s, written);
    if (ec) co_return std::make_tuple(ec, false, std::int64_t{0});
    // The compare held: the key was as seen, so the answer is final.
    if (done && was_known) co_return std::make_tuple(error_code{}, matches, matches ? expected : seen);
  }
}

asio::awaitable<std::tuple<error_code, std::int64_t>> read(std::shared_ptr<counter_state> s) {
  auto [ec, r] = co_await get_on(s->client, s->key, get_options{});
  if (ec) co_return std::make_tuple(ec, std::int64_t{0});
  if (auto bad = learn(*s, r)) co_return std::make_tuple(bad, std::int64_t{0});
  co_return std::make_tuple(error_code{}, s->value);
}

// Runs `op` on the strand, aborted when the object goes.
template <class Tuple, class... Args>
void run(const std::shared_ptr<counter_state>& s, asio::awaitable<Tuple> op, handler<Args...> h) {
  spawn_owned_op(s->client, std::move(op), std::move(h), std::shared_ptr<pending_ops>(s, &s->pending));
}

}  // namespace

void start_counter_add(const std::shared_ptr<counter_state>& s, std::int64_t delta, handler<std::int64_t> h) {
  if (!s) return fail_empty(std::move(h));
  asio::dispatch(s->client->strand_, [s, delta, h = std::move(h)]() mutable {
    // An add launched after the object went (a deferred one) is aborted, as its other operations.
    if (s->pending.gone()) return s->client->complete(std::move(h), make_error_code(asio::error::operation_aborted), std::int64_t{0});
    if (s->client->closed()) return s->client->complete(std::move(h), make_error_code(error::client_closed), std::int64_t{0});
    s->adds.push_back({delta, std::move(h)});
    if (std::exchange(s->adding, true)) return;  // the txn on the wire takes it next
    asio::co_spawn(s->client->strand_, flush_adds(s), asio::detached);
  });
}

void start_counter_cas(const std::shared_ptr<counter_state>& s, std::int64_t expected, std::int64_t desired,
                       handler<bool, std::int64_t> h) {
  if (!s) return fail_empty(std::move(h));
  run(s, compare_and_set(s, expected, desired), std::move(h));
}

void start_counter_get(const std::shared_ptr<counter_state>& s, handler<std::int64_t> h) {
  if (!s) return fail_empty(std::move(h));
  run(s, read(s), std::move(h));
}

void start_counter_watch(const std::shared_ptr<counter_state>& s, handler<watcher> h) {
  if (!s) return fail_empty(std::move(h));
  start_watch(s->client, s->key, std::string(), watch_options{}, std::move(h));
}

namespace {
// The object is gone: every add not completed yet (queued, or in the txn on the wire, whose
// outcome is then unknown) and every other operation completes with operation_aborted. A txn
// on the wire runs to its end in the background.
void close_counter(std::shared_ptr<counter_state> s) noexcept {
  if (!s) return;  // moved from
  auto& strand = s->client->strand_;
  asio::dispatch(strand, [s = std::move(s)] {
    s->pending.abort_all();
    for (auto* adds : {&s->batch, &s->adds})
      for (auto& a : std::exchange(*adds, {}))
        s->client->complete(std::move(a.h), make_error_code(asio::error::operation_aborted), std::int64_t{0});
  });
}
}  // namespace

}  // namespace detail

counter::counter(client& c, std::string key) {
  auto fail = [](error e) { throw boost::system::system_error(make_error_code(e), "coetcd::counter"); };
  if (key.empty()) fail(error::empty_key);
  if (!detail::access::impl(c)) fail(error::client_closed);
  state_ = std::make_shared<detail::counter_state>();
  state_->client = detail::access::impl(c);
  state_->key = std::move(key);
}

counter::~counter() { detail::close_counter(std::move(state_)); }

counter& counter::operator=(counter&& other) noexcept {
  if (this != &other) {
    detail::close_counter(std::move(state_));
    state_ = std::move(other.state_);
  }
  return *this;
}

counter::executor_type counter::get_executor() const noexcept {
  return state_ ? state_->client->io_ex_ : executor_type();
}

std::optional<std::int64_t> counter::parse(std::string_view text) noexcept {
  std::int64_t v = 0;
  if (text.empty() || text.front() == '+') return std::nullopt;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return v;
}

const std::string& counter::key() const noexcept { return state_ ? state_->key : detail::empty_string(); }

}  // namespace coetcd
