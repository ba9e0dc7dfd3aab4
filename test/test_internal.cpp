// Tests of internal pieces whose failures a server run shows only by chance: no server needed.
#define BOOST_TEST_MODULE coetcd_internal
#include <boost/test/unit_test.hpp>

#include "core/lock_view.hpp"
#include "core/session_state.hpp"

#include <coetcd/client.hpp>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/strand.hpp>

#include <cstdlib>
#include <memory>
#include <new>

using namespace coetcd;

// Allocations are counted on the thread that runs the tests, not on gRPC's: a test reads the
// count around one call. Not under AddressSanitizer, whose own operator new must stay (it pairs
// each allocation with its release).
#if defined(__SANITIZE_ADDRESS__)
#define COETCD_COUNTS_ALLOCATIONS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define COETCD_COUNTS_ALLOCATIONS 0
#endif
#endif
#ifndef COETCD_COUNTS_ALLOCATIONS
#define COETCD_COUNTS_ALLOCATIONS 1
#endif
namespace {
thread_local long allocations = 0;
}
#if COETCD_COUNTS_ALLOCATIONS
void* operator new(std::size_t n) {
  ++allocations;
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#endif

// Two clean-ups of one key may overlap (a lock's driver fails with its put's outcome unknown, the
// next driver is cancelled while it waits for that delete). Each reads the key and deletes what
// it finds. When the later one ended first, the key stopped counting as being deleted, a new lock
// of the session put it, and the earlier clean-up's next read found that lock's key and deleted
// it under its holder: test_stress saw another session enter beside it under load.
BOOST_AUTO_TEST_CASE(a_key_is_being_deleted_until_the_last_overlapping_delete_ends) {
  boost::asio::io_context ioc;
  client_options o;
  o.endpoints = {"127.0.0.1:1"};  // never contacted
  client c(ioc, o);
  auto s = std::make_shared<detail::session_state>();
  s->impl = c.impl();
  auto earlier = std::make_unique<detail::delete_in_flight>(*s, "k");
  auto later = std::make_unique<detail::delete_in_flight>(*s, "k");
  bool through = false;
  auto wait = [](std::shared_ptr<detail::session_state> s, bool& through) -> boost::asio::awaitable<void> {
    co_await s->wait_deleted("k");
    through = true;
  };
  boost::asio::co_spawn(s->impl->strand_, wait(s, through), boost::asio::detached);
  ioc.poll();
  BOOST_TEST(!through);
  later.reset();
  ioc.poll();
  BOOST_TEST(s->deleting.contains("k"));
  BOOST_TEST(!through, "a lock of the session went ahead while a delete of its key was on the wire");
  earlier.reset();
  ioc.poll();
  BOOST_TEST(!s->deleting.contains("k"));
  BOOST_TEST(through);
}

// Each completion asks the caller's type-erased handler for its executor. Asio 1.81 converts an
// any_io_executor (use_awaitable's, a socket's) to the any_completion_executor it reports with a
// heap allocation at each ask, and the candidate too when it is one. Callers sharing a session
// lost about a sixth of their hand-off rate to that. Asked the way the library asks, a handler
// on the io_context itself allocates nothing, and every handler still reports its own executor.
BOOST_AUTO_TEST_CASE(asking_a_callers_handler_for_its_executor_allocates_nothing) {
  namespace asio = boost::asio;
  asio::io_context ioc, other;
  const asio::any_io_executor io = ioc.get_executor();
  const auto candidate = detail::as_completion_executor(io);
  BOOST_TEST(candidate.target<asio::io_context::executor_type>() != nullptr);
  auto erased = [](auto user) {
    return asio::any_completion_handler<void(error_code)>(detail::work_tracking_handler<decltype(user)>(std::move(user)));
  };

  auto on_io = erased(asio::bind_executor(io, [](error_code) {}));
  const long before = allocations;
  auto ex = asio::get_associated_executor(on_io, candidate);
  if (COETCD_COUNTS_ALLOCATIONS) BOOST_TEST(allocations - before == 0);
  else BOOST_TEST_MESSAGE("allocations not counted under AddressSanitizer");
  auto* target = ex.target<asio::io_context::executor_type>();
  BOOST_TEST_REQUIRE(target != nullptr);
  BOOST_TEST((*target == ioc.get_executor()));

  // Elsewhere: still the handler's own executor (the candidate is only the default).
  auto elsewhere = erased(asio::bind_executor(asio::any_io_executor(other.get_executor()), [](error_code) {}));
  auto other_ex = asio::get_associated_executor(elsewhere, candidate);
  BOOST_TEST_REQUIRE(other_ex.target<asio::io_context::executor_type>() != nullptr);
  BOOST_TEST((*other_ex.target<asio::io_context::executor_type>() == other.get_executor()));
  auto strand = asio::make_strand(io);
  auto on_strand = erased(asio::bind_executor(strand, [](error_code) {}));
  auto strand_ex = asio::get_associated_executor(on_strand, candidate);
  BOOST_TEST_REQUIRE(strand_ex.target<decltype(strand)>() != nullptr);
  BOOST_TEST((*strand_ex.target<decltype(strand)>() == strand));
  // No executor of its own: the candidate.
  auto plain = erased([](error_code) {});
  BOOST_TEST((asio::get_associated_executor(plain, candidate) == candidate));
  std::move(on_io)(error_code{});
  std::move(elsewhere)(error_code{});
  std::move(on_strand)(error_code{});
  std::move(plain)(error_code{});
}

// Which keys under `name/` are the name's own, and which belong to a longer name whose keys sit
// under it: the rule every lock recipe's queue follows (see is_own_key).
BOOST_AUTO_TEST_CASE(a_names_own_keys_and_those_of_longer_names) {
  using detail::is_own_key;
  BOOST_TEST(is_own_key("jobs/", "jobs/694d7c3a1b2e"));       // mutex, election (Go's layout)
  BOOST_TEST(is_own_key("jobs/", "jobs/694d_1f"));            // semaphore
  BOOST_TEST(is_own_key("jobs/", "jobs/read/694d"));          // rw_mutex
  BOOST_TEST(is_own_key("jobs/", "jobs/write/694d"));
  BOOST_TEST(is_own_key("jobs/", "jobs/"));                   // by hand: counted, as Go does
  BOOST_TEST(!is_own_key("jobs/", "jobs/x/694d"));            // lock "jobs/x"
  BOOST_TEST(!is_own_key("jobs/", "jobs//694d"));             // lock "jobs/"
  BOOST_TEST(!is_own_key("jobs/", "jobs/writer/694d"));       // lock "jobs/writer"
  BOOST_TEST(!is_own_key("jobs/", "jobs/read/x/694d"));       // lock "jobs/read/x"
  BOOST_TEST(!is_own_key("jobs/", "jobsx/694d"));             // not under the prefix
}
