// Tests of internal pieces whose failures a server run shows only by chance: no server needed.
#define BOOST_TEST_MODULE coetcd_internal
#include <boost/test/unit_test.hpp>

#include "core/client_impl.hpp"
#include "core/lock_view.hpp"
#include "core/session_state.hpp"
#include "recipes/write_outcome.hpp"

#include <coetcd/client.hpp>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/strand.hpp>

#include <absl/synchronization/mutex.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <new>
#include <string>

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
  s->impl = coetcd::detail::access::impl(c);
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

// A deadline is error::endpoints_unreachable, which counter and stm take for "surely not
// applied", only for a call that cannot have gone out. It was read from the state of the
// client's channel at the deadline: after a sync had put a new channel in place (not connected
// yet), or while a member that sent a GOAWAY was being reconnected to, a write held on the old
// connection counted as never sent. Now each attempt is judged by its own channel and context.
BOOST_AUTO_TEST_CASE(a_deadline_is_unreachable_only_for_a_call_that_cannot_have_gone_out) {
  using detail::may_have_reached_a_server;
  const std::string one = "ipv4:127.0.0.1:2379";
  const std::string three = "ipv4:127.0.0.1:2379,127.0.0.1:22379,127.0.0.1:32379";
  const std::string name = "dns:///localhost:2379";
  // Sent while its channel was connected; at the deadline that channel (or the client's new one)
  // is not: it went out.
  BOOST_TEST(may_have_reached_a_server(true, false, one, one));
  BOOST_TEST(may_have_reached_a_server(true, false, three, ""));
  // Queued, sent once a member connected, and held there.
  BOOST_TEST(may_have_reached_a_server(false, true, one, one));
  // Never connected: gRPC reports the channel's target as the peer.
  BOOST_TEST(!may_have_reached_a_server(false, false, one, one));
  BOOST_TEST(!may_have_reached_a_server(false, false, three, three));
  BOOST_TEST(!may_have_reached_a_server(false, false, name, name));
  BOOST_TEST(!may_have_reached_a_server(false, false, one, ""));  // a target not known proves nothing
  // A connection named while the channel has none now: a member took it and went away.
  BOOST_TEST(may_have_reached_a_server(false, false, "ipv4:127.0.0.1:22379", three));
  BOOST_TEST(may_have_reached_a_server(false, false, "ipv6:[::1]:2379", name));

  // The mapping: whatever the client's own channel says (this one never connects).
  boost::asio::io_context ioc;
  client_options o;
  o.endpoints = {"127.0.0.1:1"};
  client c(ioc, o);
  const grpc::Status deadline(grpc::StatusCode::DEADLINE_EXCEEDED, "Deadline Exceeded");
  const error_code out = coetcd::detail::access::impl(c)->map_status(deadline, true), never = coetcd::detail::access::impl(c)->map_status(deadline, false);
  BOOST_TEST(out == error::request_timeout, out.message());
  BOOST_TEST(never == error::endpoints_unreachable, never.message());
  BOOST_TEST(!detail::surely_not_applied(out));
  BOOST_TEST(detail::surely_not_applied(never));
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

namespace {
// What is written to file descriptor 2, where Abseil's raw log goes, while `f` runs.
template <class F>
std::string stderr_of(F f) {
  char name[] = "/tmp/coetcd-stderr-XXXXXX";
  const int file = ::mkstemp(name);
  BOOST_TEST_REQUIRE(file >= 0);
  std::fflush(stderr);
  const int saved = ::dup(2);
  ::dup2(file, 2);
  f();
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  ::close(file);
  std::ifstream in(name);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ::unlink(name);
  return text;
}
// Two mutexes locked in one order, then in the other, on one thread (no real deadlock): a cycle
// in the lock order Abseil records while its deadlock detection is on.
void lock_in_both_orders() {
  absl::Mutex a, b;
  a.Lock();
  b.Lock();
  b.Unlock();
  a.Unlock();
  b.Lock();
  a.Lock();
  a.Unlock();
  b.Unlock();
}
bool reported(const std::string& text) { return text.find("Potential Mutex deadlock") != std::string::npos; }
}  // namespace

// Constructing a client turned Abseil's deadlock detection off for the whole process unless told
// not to: a side effect nobody asked for. Now it is off only when asked for
// (client_options::turn_off_abseil_deadlock_detection), and every client leaves it alone else.
BOOST_AUTO_TEST_CASE(a_client_turns_abseils_deadlock_detection_off_only_when_asked) {
  // In a child of its own: Abseil's mode is process-wide, and switching it while gRPC's threads
  // hold mutexes (here, after other clients ran) trips Abseil's own checks ("releasing lock it
  // does not hold"). The child reports with its exit code: 0 checked, 1 a client turned the check
  // off unasked, 2 asked to, it left it on, 3 this Abseil checks no lock order.
  const pid_t child = ::fork();
  BOOST_TEST_REQUIRE(child >= 0);
  if (child == 0) {
    absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kReport);  // report, not abort, here
    if (!reported(stderr_of(lock_in_both_orders))) ::_exit(3);
    boost::asio::io_context ioc;
    client_options o;
    o.endpoints = {"127.0.0.1:1"};  // never contacted
    {
      client plain(ioc, o);
      if (!reported(stderr_of(lock_in_both_orders))) ::_exit(1);
    }
    o.turn_off_abseil_deadlock_detection = true;
    client asked(ioc, o);
    ::_exit(reported(stderr_of(lock_in_both_orders)) ? 2 : 0);
  }
  int status = 0;
  BOOST_TEST_REQUIRE(::waitpid(child, &status, 0) == child);
  BOOST_TEST_REQUIRE(WIFEXITED(status), "the child died: " << status);
  const int code = WEXITSTATUS(status);
  if (code == 3) {
    // An Abseil built with NDEBUG records no lock order: nothing to tell apart.
    BOOST_TEST_MESSAGE("this Abseil checks no lock order; the test has nothing to check");
    return;
  }
  BOOST_TEST(code != 1, "a client with the default options turned the check off");
  BOOST_TEST(code != 2, "asked to, the client left the check on");
  BOOST_TEST(code == 0);
}
