// The explorer's recipes and what an actor holds (test_explore): the hold an acquisition hands
// back, of any recipe of the lock family, owned by the actor that asked.
#pragma once

#include <coetcd/election.hpp>
#include <coetcd/mutex.hpp>
#include <coetcd/rw_mutex.hpp>
#include <coetcd/semaphore.hpp>

namespace coetcd::test::explore {

enum class recipe { mutex, semaphore, election, rw_mutex };

/// What one actor holds: the hold its acquisition handed back (the member of its recipe and
/// side), owned by the actor. Holds do not point at their objects: moving or destroying the object
/// leaves them alone. Dropping one without releasing it ends it in the background.
struct actor_hold {
  recipe kind = recipe::mutex;
  bool shared = false;  // an rw_mutex reader's
  coetcd::mutex::hold m;
  semaphore::hold sem;
  election::hold el;
  coetcd::rw_mutex::hold w;
  coetcd::rw_mutex::shared_hold r;

  explicit operator bool() const {
    switch (kind) {
      case recipe::mutex: return static_cast<bool>(m);
      case recipe::semaphore: return static_cast<bool>(sem);
      case recipe::election: return static_cast<bool>(el);
      case recipe::rw_mutex: return shared ? static_cast<bool>(r) : static_cast<bool>(w);
    }
    return false;
  }
  /// The hold's fence (see each hold type's fence()).
  compare fence() {
    switch (kind) {
      case recipe::mutex: return m.fence();
      case recipe::semaphore: return sem.fence();
      case recipe::election: return el.fence();
      case recipe::rw_mutex: return shared ? r.fence() : w.fence();
    }
    return m.fence();
  }
  /// Starts the release with a callback, so the caller can act in the same turn.
  template <class Callback>
  void release(Callback cb) {
    switch (kind) {
      case recipe::mutex: m.async_release(std::move(cb)); return;
      case recipe::semaphore: sem.async_release(std::move(cb)); return;
      case recipe::election: el.async_release(std::move(cb)); return;
      case recipe::rw_mutex:
        if (shared) r.async_release(std::move(cb));
        else w.async_release(std::move(cb));
        return;
    }
  }
  /// Destroys the hold without releasing it: it releases itself in the background.
  void drop() {
    m = coetcd::mutex::hold();
    sem = semaphore::hold();
    el = election::hold();
    w = coetcd::rw_mutex::hold();
    r = coetcd::rw_mutex::shared_hold();
  }
};

}  // namespace coetcd::test::explore
