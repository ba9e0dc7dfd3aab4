// Operation bodies written as coroutines: run on the client's strand, complete a type-erased
// user handler (posted, never inline), and take per-operation cancellation from it.
#pragma once

#include "kv.hpp"
#include "spans.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>

#include <atomic>
#include <tuple>
#include <vector>

namespace coetcd::detail {

using asio::use_awaitable;
inline constexpr auto as_result = asio::as_tuple(asio::use_awaitable);

inline error_code exception_to_error(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const boost::system::system_error& se) {
    return se.code();
  } catch (...) {
    return make_error_code(boost::system::errc::state_not_recoverable);
  }
}

// The client's calls for work that holds the client's state, not the user's `client` object:
// background work (a clean-up, a lock view) may outlive that object, and then finds the state
// closed instead of touching freed memory.
inline auto get_on(const std::shared_ptr<client_impl>& c, std::string key, get_options o) {
  auto init = [c](handler<get_result> h, std::string key, std::string end, get_options o) {
    start_get(c, std::move(key), std::move(end), o, std::move(h));
  };
  return asio::async_initiate<decltype(as_result), void(error_code, get_result)>(init, as_result, std::move(key),
                                                                               std::string(o.range_end), o);
}
inline auto txn_on(const std::shared_ptr<client_impl>& c, txn t) {
  auto init = [c](handler<txn_result> h, txn t) { start_txn(c, std::move(t), std::move(h)); };
  return asio::async_initiate<decltype(as_result), void(error_code, txn_result)>(init, as_result, std::move(t));
}
inline auto watch_on(const std::shared_ptr<client_impl>& c, std::string key, watch_options o) {
  auto init = [c](handler<watcher> h, std::string key, std::string end, watch_options o) {
    start_watch(c, std::move(key), std::move(end), o, std::move(h));
  };
  return asio::async_initiate<decltype(as_result), void(error_code, watcher)>(init, as_result, std::move(key),
                                                                            std::string(o.range_end), o);
}
inline auto lease_revoke_on(const std::shared_ptr<client_impl>& c, std::int64_t id) {
  auto init = [c](handler<response_header> h, std::int64_t id) { start_lease_revoke(c, id, std::move(h)); };
  return asio::async_initiate<decltype(as_result), void(error_code, response_header)>(init, as_result, id);
}

inline auto lease_ttl_on(const std::shared_ptr<client_impl>& c, std::int64_t id) {
  auto init = [c](handler<lease_ttl_result> h, std::int64_t id) { start_lease_ttl(c, id, false, std::move(h)); };
  return asio::async_initiate<decltype(as_result), void(error_code, lease_ttl_result)>(init, as_result, id);
}

/// Runs `body` (returning error_code) and completes `h` with it.
inline void spawn_op(const std::shared_ptr<client_impl>& c, asio::awaitable<error_code> body,
                     asio::any_completion_handler<void(error_code)> h) {
  auto slot = asio::get_associated_cancellation_slot(h);
  asio::co_spawn(op_executor(*c), std::move(body),
                 asio::bind_cancellation_slot(slot, [c, h = std::move(h)](std::exception_ptr e, error_code ec) mutable {
                   c->complete(std::move(h), e ? exception_to_error(e) : ec);
                 }));
}

/// spawn_op for a body that returns its handler's arguments as a tuple (error_code first); an
/// exception from it completes the handler with its error and empty values.
template <class Tuple, class... Args>
void spawn_result_op(const std::shared_ptr<client_impl>& c, asio::awaitable<Tuple> body,
                     asio::any_completion_handler<void(error_code, Args...)> h) {
  auto slot = asio::get_associated_cancellation_slot(h);
  asio::co_spawn(op_executor(*c), std::move(body),
                 asio::bind_cancellation_slot(slot, [c, h = std::move(h)](std::exception_ptr e, Tuple r) mutable {
                   if (e) r = Tuple{exception_to_error(e), Args{}...};
                   std::apply([&](error_code ec, auto&&... v) { c->complete(std::move(h), ec, std::move(v)...); }, std::move(r));
                 }));
}

/// What an empty object's accessors return by reference.
inline const std::string& empty_string() {
  static const std::string s;
  return s;
}
[[noreturn]] inline void throw_empty(const char* what) {
  throw boost::system::system_error(make_error_code(asio::error::bad_descriptor), what);
}

/// The pending operations of one object (semaphore, election, multi_lock; barrier,
/// double_barrier, counter: spawn_owned_op), so that
/// destroying it aborts them at once with operation_aborted, as destroying an Asio object does,
/// instead of when their turn comes. On the strand only, except mark_gone() and gone().
class pending_ops {
 public:
  /// The object is gone. Called by its destructor on the destructor's thread, before the rest of
  /// the clean-up goes to the strand: a grant whose body has already succeeded but whose handler
  /// has not run yet then completes with operation_aborted and is given back (spawn_hold_op),
  /// whichever of the handler and that clean-up the executors run first.
  void mark_gone() noexcept { gone_ = true; }
  bool gone() const noexcept { return gone_; }

  void add(const std::shared_ptr<asio::cancellation_signal>& s) {
    // An operation launched after the object went (a deferred one) is aborted at once.
    if (aborted_) return s->emit(asio::cancellation_type::terminal);
    std::erase_if(ops_, [](const auto& w) { return w.expired(); });
    ops_.push_back(s);
  }
  void abort_all() {
    aborted_ = true;
    gone_ = true;
    for (auto& w : std::exchange(ops_, {}))
      if (auto s = w.lock()) s->emit(asio::cancellation_type::terminal);
  }

 private:
  std::vector<std::weak_ptr<asio::cancellation_signal>> ops_;
  bool aborted_ = false;
  std::atomic<bool> gone_{false};
};

/// spawn_op and spawn_result_op for an operation of an object whose destruction aborts it
/// (barrier, double_barrier, counter): `owner`'s abort_all() cancels the body (terminal), as
/// the handler's own cancellation does (of the type emitted: the body's filter decides), both
/// emitted on the strand. Once the owner is gone, an error the body ends with is reported as
/// operation_aborted, what the destructor promised; a body that succeeded regardless (a reply
/// that was in already) completes as answered, as a unary call does.
template <class Result, class... Args>
void spawn_owned_op(const std::shared_ptr<client_impl>& c, asio::awaitable<Result> body,
                    asio::any_completion_handler<void(error_code, Args...)> h, std::shared_ptr<pending_ops> owner) {
  auto to_body = std::make_shared<asio::cancellation_signal>();
  // Assigned before the body can complete: the completion clears it (client_impl::bound).
  if (auto slot = asio::get_associated_cancellation_slot(h); slot.is_connected())
    slot.assign([to_body, strand = c->strand_](asio::cancellation_type t) {
      asio::dispatch(strand, [to_body, t] { to_body->emit(t); });
    });
  auto done = [c, to_body, owner, h = std::move(h)](std::exception_ptr e, Result r) mutable {
    if constexpr (std::is_same_v<Result, error_code>) {
      if (e) r = exception_to_error(e);
      if (r && owner->gone()) r = asio::error::operation_aborted;
      c->complete(std::move(h), r);
    } else {
      if (e) r = Result{exception_to_error(e), Args{}...};
      if (std::get<0>(r) && owner->gone()) r = Result{make_error_code(asio::error::operation_aborted), Args{}...};
      std::apply([&](error_code ec, auto&&... v) { c->complete(std::move(h), ec, std::move(v)...); }, std::move(r));
    }
  };
  asio::co_spawn(op_executor(*c), std::move(body), asio::bind_cancellation_slot(to_body->slot(), std::move(done)));
  // Registered once the body listens on the signal, and on the strand, where abort_all emits.
  asio::dispatch(c->strand_, [to_body, owner = std::move(owner)] { owner->add(to_body); });
}

/// spawn_op for an operation that hands its caller a hold (a lock, permits, a leadership: a
/// move-only object that gives back what it holds when destroyed). A cancellation that comes after
/// the body succeeded, but before the handler runs, means the caller has moved on (the other
/// branch of an `||` finished first) and will never give it back: then the hold is dropped there,
/// which gives it back, and the handler gets operation_aborted and an empty hold. The check is
/// made on the handler's executor, where such a cancellation is emitted, so none can slip between
/// the check and the handler. The same holds when the object was destroyed meanwhile (`owner`
/// gone): its destructor promised operation_aborted. `owner`: the pending operations of the
/// object it runs for, which its destruction aborts.
template <class Hold>
void spawn_hold_op(const std::shared_ptr<client_impl>& c, asio::awaitable<std::tuple<error_code, Hold>> body,
                   asio::any_completion_handler<void(error_code, Hold)> h, std::shared_ptr<pending_ops> owner = nullptr) {
  auto cancel = early_cancel::take(asio::get_associated_cancellation_slot(h), c->strand_);
  auto to_body = std::make_shared<asio::cancellation_signal>();
  auto done = [c, cancel, to_body, owner, h = std::move(h)](std::exception_ptr e, std::tuple<error_code, Hold> r) mutable {
    auto ec = std::get<0>(r);
    auto hold = std::move(std::get<1>(r));
    if (e) {
      ec = exception_to_error(e);
      hold = Hold{};
    }
    auto ex = asio::get_associated_executor(h, c->completion_ex_);
    auto deliver = [cancel, ec, owner = std::move(owner), hold = std::move(hold), h = std::move(h)]() mutable {
      asio::get_associated_cancellation_slot(h).clear();
      if (!ec && (cancel->emitted() || (owner && owner->gone()))) {
        hold = Hold{};  // gives it back
        ec = asio::error::operation_aborted;
      }
      asio::dispatch(asio::append(std::move(h), ec, std::move(hold)));
    };
    asio::post(c->io_ex_, asio::bind_executor(ex, std::move(deliver)));
  };
  asio::co_spawn(op_executor(*c), std::move(body), asio::bind_cancellation_slot(to_body->slot(), std::move(done)));
  asio::dispatch(c->strand_, [cancel, to_body, owner = std::move(owner)] {
    if (owner) owner->add(to_body);
    if (cancel->registered([to_body] { to_body->emit(asio::cancellation_type::terminal); }))
      to_body->emit(asio::cancellation_type::terminal);
  });
}

/// Lets the body see terminal, partial and total cancellation and handle it itself (cleanup
/// before completing) instead of throwing at the next co_await.
inline asio::awaitable<void> handle_cancellation_manually() {
  co_await asio::this_coro::reset_cancellation_state(asio::enable_total_cancellation());
  co_await asio::this_coro::throw_if_cancelled(false);
}

/// For a body that only reads: a cancelled read changed nothing, so terminal, partial and total
/// are honoured alike, where co_spawn lets terminal alone in. Its reads honour all three, and a
/// cancellation that comes between two of them throws operation_aborted at the next co_await.
inline asio::awaitable<void> honour_every_cancellation() {
  co_await asio::this_coro::reset_cancellation_state(asio::enable_total_cancellation());
}

/// For a body with one way to stop, whatever the type asked (clean up, then complete with
/// operation_aborted): lets terminal, partial and total cancellation in, where co_spawn lets
/// terminal alone in, and hands each on to the body's own operations (and the branches of its
/// `||`, each co_spawned with that default) as terminal, the one type they all honour.
inline asio::awaitable<void> stop_on_any_cancellation() {
  co_await asio::this_coro::reset_cancellation_state(asio::enable_total_cancellation(), [](asio::cancellation_type t) {
    return t == asio::cancellation_type::none ? t : asio::cancellation_type::terminal;
  });
}

/// Whether anyone can cancel this operation: its handler came with a connected cancellation slot.
inline asio::awaitable<bool> can_be_cancelled() {
  auto cs = co_await asio::this_coro::cancellation_state;
  co_return cs.slot().is_connected();
}

inline asio::awaitable<bool> cancellation_requested() {
  auto cs = co_await asio::this_coro::cancellation_state;
  co_return cs.cancelled() != asio::cancellation_type::none;
}

}  // namespace coetcd::detail
