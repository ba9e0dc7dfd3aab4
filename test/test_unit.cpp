// Tests that need no server: endpoint validation, key ranges, errors, builders.
#define BOOST_TEST_MODULE coetcd_unit
#include <boost/test/unit_test.hpp>

#include <coetcd.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/system/system_error.hpp>

using namespace coetcd;

BOOST_AUTO_TEST_CASE(prefix_range_end_increments_last_byte) {
  BOOST_TEST(prefix_range_end("abc") == "abd");
  BOOST_TEST(prefix_range_end("a\xff") == "b");
  BOOST_TEST(prefix_range_end("/lock/") == "/lock0");
  BOOST_TEST(prefix_range_end(std::string("\xff\xff", 2)) == std::string(1, '\0'));
  BOOST_TEST(prefix_range_end("") == std::string(1, '\0'));
}

BOOST_AUTO_TEST_CASE(bad_endpoints_are_rejected_with_the_endpoint_named) {
  boost::asio::io_context ioc;
  for (std::string bad : {"", "127.0.0.1", "127.0.0.1:", "127.0.0.1:0", "127.0.0.1:99999", "127.0.0.1:12ab",
                          "ftp://127.0.0.1:2379", "http://127.0.0.1:2379/v3", "[::1:2379", "[zz]:1", "bad host:1",
                          ":2379"}) {
    client_options o;
    o.endpoints = {bad};
    try {
      client c(ioc, o);
      BOOST_ERROR("endpoint '" << bad << "' was accepted");
    } catch (const boost::system::system_error& e) {
      BOOST_TEST(e.code() == error::invalid_endpoint);
      BOOST_TEST(std::string(e.what()).find("'" + bad + "'") != std::string::npos, e.what());
    }
  }
  client_options mixed;
  mixed.endpoints = {"http://127.0.0.1:1", "https://127.0.0.1:2"};
  BOOST_CHECK_THROW(client(ioc, mixed), boost::system::system_error);
  client_options none;
  none.endpoints.clear();
  BOOST_CHECK_THROW(client(ioc, none), boost::system::system_error);
}

BOOST_AUTO_TEST_CASE(good_endpoints_are_accepted) {
  boost::asio::io_context ioc;
  for (auto eps : std::vector<std::vector<std::string>>{{"127.0.0.1:2379"},
                                                         {"http://127.0.0.1:2379", "http://127.0.0.2:2379/"},
                                                         {"localhost:2379"},
                                                         {"localhost:2379", "127.0.0.1:22379"},
                                                         {"[::1]:2379"}}) {
    client_options o;
    o.endpoints = eps;
    BOOST_CHECK_NO_THROW(client(ioc, o));
  }
}

BOOST_AUTO_TEST_CASE(bad_timeouts_are_rejected_with_the_option_named) {
  boost::asio::io_context ioc;
  auto message_of = [&](client_options o) -> std::string {
    try {
      client c(ioc, o);
    } catch (const boost::system::system_error& e) {
      BOOST_TEST(e.code() == error::invalid_argument);
      return e.what();
    }
    return "accepted";
  };
  client_options zero_timeout;
  zero_timeout.request_timeout = std::chrono::milliseconds(0);
  BOOST_TEST(message_of(zero_timeout).find("request_timeout") != std::string::npos);
  client_options negative_resend;
  negative_resend.resend_after = std::chrono::milliseconds(-1);
  BOOST_TEST(message_of(negative_resend).find("resend_after") != std::string::npos);
  client_options no_resend;  // zero turns resending off
  no_resend.resend_after = std::chrono::milliseconds(0);
  BOOST_TEST(message_of(no_resend) == "accepted");
}

BOOST_AUTO_TEST_CASE(error_codes_have_readable_messages) {
  error_code ec = error::lease_not_found;
  BOOST_TEST(std::string(ec.category().name()) == "etcd");
  BOOST_TEST(ec.message().find("lease not found") != std::string::npos);
  for (int e = 1; e <= static_cast<int>(error::no_leader); ++e)
    BOOST_TEST(make_error_code(static_cast<error>(e)).message().find("unknown") == std::string::npos);
  error_code g(14, grpc_category());
  BOOST_TEST(g.message() == "gRPC UNAVAILABLE");
}

// condition::transient: what a caller may retry, whatever the error's category.
BOOST_AUTO_TEST_CASE(transient_errors_match_the_transient_condition) {
  for (auto e : {error::endpoints_unreachable, error::request_timeout, error::cluster_no_leader})
    BOOST_TEST((make_error_code(e) == condition::transient), make_error_code(e).message());
  BOOST_TEST((error_code(14, grpc_category()) == condition::transient));  // UNAVAILABLE
  BOOST_TEST((error_code(4, grpc_category()) == condition::transient));   // DEADLINE_EXCEEDED
  for (auto e : {error::session_lost, error::client_closed, error::compacted, error::permission_denied,
                 error::auth_failed, error::locked})
    BOOST_TEST((make_error_code(e) != condition::transient), make_error_code(e).message());
  BOOST_TEST((error_code(3, grpc_category()) != condition::transient));  // INVALID_ARGUMENT
  BOOST_TEST((error_code() != condition::transient));
  BOOST_TEST(make_error_condition(condition::transient).message().find("transient") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(compare_builder_records_target_op_and_operand) {
  auto c = compare::version("k") == 0;
  BOOST_TEST((c.what() == compare::target::version));
  BOOST_TEST((c.op() == compare_op::equal));
  BOOST_TEST(std::get<std::int64_t>(c.operand()) == 0);
  auto v = compare::value("k") != "x";
  BOOST_TEST((v.op() == compare_op::not_equal));
  BOOST_TEST(std::get<std::string>(v.operand()) == "x");
  auto p = compare::create_revision("/lock/").prefix() < 5;
  BOOST_TEST(p.range_end() == "/lock0");
}

// Revisions, versions and leases compare with integers, values with strings; the other way
// round does not compile (it used to: `mod_revision(k) == std::to_string(rev)` compared the
// revision with 0 on the server).
template <class Subject, class Operand>
concept comparable = requires(Subject s, Operand v) {
  { s == v } -> std::same_as<compare>;
};
static_assert(comparable<compare::number, std::int64_t>);
static_assert(comparable<compare::number, int>);
static_assert(!comparable<compare::number, std::string>);
static_assert(!comparable<compare::number, const char*>);
static_assert(comparable<compare::text, std::string>);
static_assert(comparable<compare::text, const char*>);
static_assert(!comparable<compare::text, int>);
static_assert(!comparable<compare::text, std::int64_t>);

BOOST_AUTO_TEST_CASE(range_ends_that_cannot_be_lost) {
  // "\0" as a C++ literal is an empty string: one key. from_key() is the spelling that stays.
  auto lost = compare::version("k").range("\0") > 0;
  BOOST_TEST(lost.range_end().empty());
  auto all = compare::version("k").from_key() > 0;
  BOOST_TEST(all.range_end() == std::string(1, '\0'));
  auto text = compare::value("k").prefix() == "x";
  BOOST_TEST(text.range_end() == "l");
}
