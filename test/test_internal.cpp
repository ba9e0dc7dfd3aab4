// Tests of internal pieces whose failures a server run shows only by chance: no server needed.
#define BOOST_TEST_MODULE coetcd_internal
#include <boost/test/unit_test.hpp>

#include "core/session_state.hpp"

#include <coetcd/client.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>

#include <memory>

using namespace coetcd;

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
