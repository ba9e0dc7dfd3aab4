// coetcd::registration and coetcd::naming on one etcd member: a key put again after its session
// is revoked, after it is deleted or put over by hand; two registrations of one key settle; a
// discovery view from a cache; Go's naming/endpoints Manager sees our endpoints and we see its
// (a helper built from Debian's sources); bad input and a server that is not there.
#define BOOST_TEST_MODULE coetcd_naming
#include "support/child_process.hpp"
#include "support/fixture.hpp"

#include <coetcd/cache.hpp>
#include <coetcd/naming.hpp>
#include <coetcd/registration.hpp>

using namespace coetcd;
using namespace coetcd::test;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

BOOST_TEST_GLOBAL_FIXTURE(shared_etcd);

namespace {

/// A registration running until stopped, and how its run ended.
struct running {
  registration reg;
  asio::cancellation_signal stop_signal;
  std::optional<error_code> ended;

  running(client& c, std::string key, std::string value, registration_options o = {})
      : reg(c, std::move(key), std::move(value), o) {
    reg.async_run(asio::bind_cancellation_slot(stop_signal.slot(), [this](error_code ec) { ended = ec; }));
  }
  /// Cancels the run and waits for its handler.
  asio::awaitable<void> stop() {
    stop_signal.emit(asio::cancellation_type::terminal);
    co_await eventually([this] { return ended.has_value(); }, 10s);
    BOOST_TEST_REQUIRE(ended.has_value());
    BOOST_TEST(*ended == asio::error::operation_aborted, ended->message());
  }
};

asio::awaitable<std::optional<key_value>> read(client& c, const std::string& key) {
  auto r = co_await c.async_get(key, use_awaitable);
  if (r.kvs.empty()) co_return std::nullopt;
  co_return r.kvs.front();
}

}  // namespace

BOOST_AUTO_TEST_CASE(endpoints_are_written_and_read_as_go_does) {
  BOOST_TEST(naming::key("svc", "n1") == "svc/n1");
  BOOST_TEST(naming::encode({"10.0.0.1:80"}) == R"({"Op":0,"Addr":"10.0.0.1:80","Metadata":null})");
  BOOST_TEST(naming::encode({"h:1", R"({"weight":3})"}) == R"({"Op":0,"Addr":"h:1","Metadata":{"weight":3}})");
  BOOST_TEST(naming::encode({"a\"<b>", ""}) == R"({"Op":0,"Addr":"a\"\u003cb\u003e","Metadata":null})");
  auto e = naming::decode(R"( { "Op" : 0, "Addr":"h:2", "Metadata": {"a":[1,"x}"],"b":null} } )");
  BOOST_TEST_REQUIRE(e.has_value());
  BOOST_TEST(e->addr == "h:2");
  BOOST_TEST(e->metadata == R"({"a":[1,"x}"],"b":null})");
  auto escaped = naming::decode(R"({"Addr":"a\u003cb\u00e9\ud83d\ude00"})");
  BOOST_TEST_REQUIRE(escaped.has_value());
  BOOST_TEST(escaped->addr == "a<b\xC3\xA9\xF0\x9F\x98\x80");
  BOOST_TEST(escaped->metadata == "null");
  for (std::string_view bad : {"", "not json", "[]", R"({"Addr":"h",})", R"({"Addr":"h"} x)", R"({"Addr":"h","M":nul})"})
    BOOST_TEST(!naming::decode(bad).has_value(), bad);
  for (std::string bad : {"{", "x", "1 2", "\"open"}) {
    bool thrown = false;
    try {
      naming::encode({"h", bad});
    } catch (const boost::system::system_error& se) {
      thrown = se.code() == error::invalid_argument;
    }
    BOOST_TEST(thrown, bad);
  }
}

// Read as Go's endpoints Manager reads (json.Unmarshal into its Update; each case checked with
// Go 1.19): member names in any ASCII case, any Op on a put, no Addr, the value null; skipped
// where Go's Unmarshal fails. Written only where Go can read it back: metadata of a strict JSON
// value. Before, "addr", "Op":1 and a missing Addr were skipped, and metadata such as 01 or -
// was written into values Go skips; a million '[' overflowed the stack.
BOOST_AUTO_TEST_CASE(naming_reads_what_go_reads_and_writes_only_what_go_can_read) {
  struct read_case {
    std::string_view value;
    std::string addr, metadata;
  };
  for (auto [value, addr, metadata] : {
           read_case{R"({"addr":"h:1"})", "h:1", "null"},
           read_case{R"({"ADDR":"h:2","op":1,"metadata":{"a":1}})", "h:2", R"({"a":1})"},
           read_case{R"({"Op":1,"Addr":"h:3"})", "h:3", "null"},
           read_case{R"({"Op":255,"Addr":"h:4","Op":null})", "h:4", "null"},
           read_case{R"({"Metadata":null})", "", "null"},
           read_case{R"({"Metadata":"m","Addr":null})", "", R"("m")"},
           read_case{"null", "", "null"},
           read_case{"{}", "", "null"},
           read_case{R"({"Addr":"h","Addr":null,"Metadata":[1],"Metadata":-0.5E-3})", "h", "-0.5E-3"},
           read_case{R"({"\u0041ddr":"h","Opx":"ignored"})", "h", "null"},
           read_case{R"({"Addr":"\ud800x\udc00\ud800\u0041"})", "\xEF\xBF\xBDx\xEF\xBF\xBD\xEF\xBF\xBD" "A", "null"},
       }) {
    auto e = naming::decode(value);
    BOOST_TEST_REQUIRE(e.has_value(), value);
    BOOST_TEST(e->addr == addr, value);
    BOOST_TEST(e->metadata == metadata, value);
  }
  for (std::string_view skipped : {R"("h")", "1", "true", R"({"Op":256,"Addr":"h"})", R"({"Op":-0,"Addr":"h"})",
                                   R"({"Op":1.0,"Addr":"h"})", R"({"Op":1e0,"Addr":"h"})", R"({"Op":"0","Addr":"h"})",
                                   R"({"Op":{},"Addr":"h"})", R"({"Addr":1})", R"({"Addr":["h"]})", R"({"Addr":"h","Metadata":01})",
                                   R"({"Addr":"h","Metadata":-})", R"({"Addr":"h","Metadata":1.})", R"({"Addr":"h","Metadata":.5})",
                                   R"({"Addr":"h","Metadata":+1})", R"({"Addr":"h","Metadata":truex})"})
    BOOST_TEST(!naming::decode(skipped).has_value(), skipped);
  const std::string deepest = std::string(10000, '[') + std::string(10000, ']');
  BOOST_TEST(naming::decode(R"({"Addr":"h","Metadata":)" + deepest.substr(1, 19998) + "}").has_value());
  BOOST_TEST(!naming::decode(R"({"Addr":"h","Metadata":)" + deepest + "}").has_value());  // 10001 deep
  BOOST_TEST(!naming::decode(std::string(1'000'000, '[')).has_value());

  BOOST_TEST(naming::encode({"h", " 1e5 "}) == R"({"Op":0,"Addr":"h","Metadata":1e5})");
  BOOST_TEST(naming::encode({"h", "-0.5E-3"}) == R"({"Op":0,"Addr":"h","Metadata":-0.5E-3})");
  for (const std::string& bad : std::initializer_list<std::string>{"01", "-", "1.", ".5", "+1", "1e", "0x10", "-Infinity", "truex", deepest})
    BOOST_TEST(thrown_code([&] { naming::encode({"h", bad}); }) == error::invalid_argument, bad.substr(0, 20));
}

// The key comes back after every way of losing it: its session revoked (a fresh session, a new
// lease, within a second), the key deleted, the key put over without a lease (both on the same
// session). Cancelling deletes it before the handler runs.
BOOST_AUTO_TEST_CASE(a_registration_is_put_again_after_each_loss) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    const auto key = naming::key("reg-svc", "n1");
    const auto value = naming::encode({"127.0.0.1:7001"});
    running r(c, key, value, registration_options{.ttl = 5s});
    co_await eventually([&] { return r.reg.is_registered(); }, 10s);
    BOOST_TEST_REQUIRE(r.reg.is_registered());
    auto kv = co_await read(c, key);
    BOOST_TEST_REQUIRE(kv.has_value());
    BOOST_TEST(kv->value == value);
    BOOST_TEST(kv->lease == r.reg.lease());
    const auto first_lease = kv->lease;

    auto t0 = clock_type::now();
    co_await c.async_lease_revoke(first_lease, use_awaitable);
    co_await eventually([&] { return r.reg.puts() == 2u && r.reg.is_registered(); }, 10s);
    BOOST_TEST(r.reg.puts() == 2u);
    BOOST_TEST((clock_type::now() - t0 < 1s));
    kv = co_await read(c, key);
    BOOST_TEST_REQUIRE(kv.has_value());
    BOOST_TEST(kv->lease != first_lease);
    BOOST_TEST(kv->lease == r.reg.lease());

    t0 = clock_type::now();
    co_await c.async_delete(key, use_awaitable);
    co_await eventually([&] { return r.reg.puts() == 3u && r.reg.is_registered(); }, 10s);
    BOOST_TEST(r.reg.puts() == 3u);
    BOOST_TEST((clock_type::now() - t0 < 1s));
    kv = co_await read(c, key);
    BOOST_TEST_REQUIRE(kv.has_value());
    const auto second_lease = kv->lease;
    BOOST_TEST(second_lease == r.reg.lease());

    co_await c.async_put(key, "someone else's", use_awaitable);
    co_await eventually([&] { return r.reg.puts() == 4u && r.reg.is_registered(); }, 10s);
    // Put back once, and then left alone: the other writer's put is history, not a new loss (a
    // watch from the key's create revision saw it again after each of our puts, and put again
    // and again with a growing pause).
    asio::steady_timer settle(co_await asio::this_coro::executor, 1500ms);
    co_await settle.async_wait(use_awaitable);
    BOOST_TEST(r.reg.puts() == 4u);
    BOOST_TEST(r.reg.is_registered());
    kv = co_await read(c, key);
    BOOST_TEST_REQUIRE(kv.has_value());
    BOOST_TEST(kv->value == value);
    BOOST_TEST(kv->lease == second_lease);

    co_await r.stop();
    BOOST_TEST(!(co_await read(c, key)).has_value());
    BOOST_TEST(!r.reg.is_registered());
  }(c));
}

// Two registrations of one key settle: the last to put keeps it, the other stands by without
// putting, and takes the key over (one put) when the owner stops. Before, each saw the other's
// put as a loss to repair and put back over it for ever, a pause of at most 1.5 x retry_max
// between rounds: the key's version kept growing.
BOOST_AUTO_TEST_CASE(two_registrations_of_one_key_settle) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    const auto key = naming::key("twin-svc", "n1");
    const registration_options o{.ttl = 5s, .retry_min = 20ms, .retry_max = 200ms};
    std::unique_ptr<running> twins[] = {std::make_unique<running>(c, key, "a", o), std::make_unique<running>(c, key, "b", o)};
    auto owners = [&] { return int(twins[0]->reg.is_registered()) + int(twins[1]->reg.is_registered()); };
    co_await eventually([&] { return owners() == 1 && twins[0]->reg.puts() + twins[1]->reg.puts() >= 2u; }, 10s);
    co_await sleep_for(1s);
    auto before = co_await read(c, key);
    BOOST_TEST_REQUIRE(before.has_value());
    co_await sleep_for(3s);
    auto after = co_await read(c, key);
    BOOST_TEST_REQUIRE(after.has_value());
    BOOST_TEST(after->version == before->version);
    BOOST_TEST(after->version == 2);
    BOOST_TEST(twins[0]->reg.puts() + twins[1]->reg.puts() == 2u);
    BOOST_TEST_REQUIRE(owners() == 1);
    const int owner = twins[0]->reg.is_registered() ? 0 : 1;
    BOOST_TEST(after->lease == twins[owner]->reg.lease());
    BOOST_TEST(after->value == (owner == 0 ? "a" : "b"));
    BOOST_TEST(twins[1 - owner]->reg.lease() == 0);

    auto& standby = *twins[1 - owner];
    const auto standby_puts = standby.reg.puts();
    co_await twins[owner]->stop();  // its key goes with its session
    twins[owner].reset();
    co_await eventually([&] { return standby.reg.is_registered(); }, 5s);
    BOOST_TEST_REQUIRE(standby.reg.is_registered());
    BOOST_TEST(standby.reg.puts() == standby_puts + 1);
    auto taken = co_await read(c, key);
    BOOST_TEST_REQUIRE(taken.has_value());
    BOOST_TEST(taken->lease == standby.reg.lease());
    BOOST_TEST(taken->value == (owner == 0 ? "b" : "a"));
    co_await standby.stop();
    BOOST_TEST(!(co_await read(c, key)).has_value());
  }(c));
}

// A cache of the target's prefix sees registrations come and go.
BOOST_AUTO_TEST_CASE(discovery_follows_registrations) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    cache view(c.get_executor(), c, "disc-svc/");
    co_await view.async_wait_synced(use_awaitable);
    BOOST_TEST(naming::endpoints(view).empty());
    auto a = std::make_unique<running>(c, naming::key("disc-svc", "a"), naming::encode({"10.0.0.1:1", R"({"zone":"x"})"}));
    running b(c, naming::key("disc-svc", "b"), naming::encode({"10.0.0.2:1"}));
    co_await c.async_put("disc-svc/junk", "not an endpoint", use_awaitable);
    co_await eventually([&] { return naming::endpoints(view).size() == 2u; }, 10s);
    auto all = naming::endpoints(view);
    BOOST_TEST_REQUIRE(all.size() == 2u);
    BOOST_TEST(all["disc-svc/a"].addr == "10.0.0.1:1");
    BOOST_TEST(all["disc-svc/a"].metadata == R"({"zone":"x"})");
    BOOST_TEST(all["disc-svc/b"].addr == "10.0.0.2:1");
    co_await a->stop();
    a.reset();
    co_await eventually([&] { return naming::endpoints(view).size() == 1u; }, 10s);
    BOOST_TEST(naming::endpoints(view).count("disc-svc/b") == 1u);
    co_await b.stop();
    co_await c.async_delete("disc-svc/junk", use_awaitable);
    co_await eventually([&] { return view.size() == 0u; }, 10s);
    BOOST_TEST(view.size() == 0u);
  }(c));
}

// Go's naming/endpoints Manager lists our endpoint; an endpoint it adds shows in our view, and
// goes when its lease is revoked.
BOOST_AUTO_TEST_CASE(go_naming_endpoints_and_coetcd_see_each_other) {
#ifndef COETCD_GO_NAMING_PATH
  BOOST_TEST_MESSAGE("skipped: Go or Debian's etcd sources were not found at configure time");
  BOOST_TEST(true);
#else
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    const std::string go = std::string(COETCD_GO_NAMING_PATH) + " -endpoints " + server().endpoint();
    running ours(c, naming::key("go-svc", "coetcd"), naming::encode({"127.0.0.1:9000", R"({"zone":"a"})"}));
    co_await eventually([&] { return ours.reg.is_registered(); }, 10s);
    auto listed = run_command(go + " list go-svc");
    BOOST_TEST(listed.exit_code == 0, listed.output);
    BOOST_TEST(listed.output == "go-svc/coetcd 127.0.0.1:9000 {\"zone\":\"a\"}\n", listed.output);

    cache view(c.get_executor(), c, "go-svc/");
    co_await view.async_wait_synced(use_awaitable);
    child_process adder("exec " + go + " -hold 2s add go-svc/go-1 127.0.0.1:9001 '{\"weight\":3}'");
    BOOST_TEST_REQUIRE(adder.wait_for_output("added", 10s), adder.output());
    co_await eventually([&] { return naming::endpoints(view).size() == 2u; }, 5s);
    auto all = naming::endpoints(view);
    BOOST_TEST_REQUIRE(all.count("go-svc/go-1") == 1u);
    BOOST_TEST(all["go-svc/go-1"].addr == "127.0.0.1:9001");
    BOOST_TEST(all["go-svc/go-1"].metadata == R"({"weight":3})");
    co_await eventually([&] { return naming::endpoints(view).size() == 1u; }, 10s);
    BOOST_TEST(naming::endpoints(view).count("go-svc/go-1") == 0u);
    auto code = adder.wait(5s);
    BOOST_TEST((code && *code == 0), adder.output());
    co_await ours.stop();
  }(c));
#endif
}

// Values written by hand, listed by Go's Manager and by naming::endpoints: the same keys,
// addresses and metadata (chosen so Go's re-marshalling prints them as written). Before, ours
// left out "addr", "Op":1, a missing Addr and null, and listed metadata 01 that Go skips.
BOOST_AUTO_TEST_CASE(go_naming_endpoints_and_coetcd_list_the_same_values) {
#ifndef COETCD_GO_NAMING_PATH
  BOOST_TEST_MESSAGE("skipped: Go or Debian's etcd sources were not found at configure time");
  BOOST_TEST(true);
#else
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    const std::pair<std::string, std::string> values[] = {
        {"go-raw/lower", R"({"addr":"h:1"})"},
        {"go-raw/op1", R"({"Op":1,"Addr":"h:2","Metadata":{"a":1}})"},
        {"go-raw/no-addr", R"({"Metadata":"m"})"},
        {"go-raw/null", "null"},
        {"go-raw/upper", R"({"ADDR":"h:3","op":null})"},
        {"go-raw/plain", R"({"Op":0,"Addr":"h:4","Metadata":[1,true]})"},
        {"go-raw/meta-01", R"({"Addr":"h:5","Metadata":01})"},
        {"go-raw/op-256", R"({"Op":256,"Addr":"h:6"})"},
        {"go-raw/addr-number", R"({"Addr":7})"},
        {"go-raw/array", "[]"},
    };
    for (auto& [k, v] : values) co_await c.async_put(k, v, use_awaitable);
    std::string ours;
    auto r = co_await c.async_get("go-raw/", {.prefix = true}, use_awaitable);
    for (auto& kv : r.kvs)  // etcd's order: by key's bytes, as Go's sort.Strings
      if (auto e = naming::decode(kv.value)) ours += kv.key + " " + e->addr + " " + e->metadata + "\n";
    BOOST_TEST(ours ==
               "go-raw/lower h:1 null\n"
               "go-raw/no-addr  \"m\"\n"
               "go-raw/null  null\n"
               "go-raw/op1 h:2 {\"a\":1}\n"
               "go-raw/plain h:4 [1,true]\n"
               "go-raw/upper h:3 null\n");
    auto listed = run_command(std::string(COETCD_GO_NAMING_PATH) + " -endpoints " + server().endpoint() + " list go-raw");
    BOOST_TEST(listed.exit_code == 0, listed.output);
    BOOST_TEST(listed.output == ours);
    co_await c.async_delete("go-raw/", {.prefix = true}, use_awaitable);
  }(c));
#endif
}

BOOST_AUTO_TEST_CASE(bad_input_unreachable_endpoints_and_a_closed_client) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  BOOST_TEST(thrown_code([&] { registration r(c, "", "v"); }) == error::empty_key);
  BOOST_TEST(thrown_code([&] { registration r(c, "k", "v", registration_options{.ttl = 0s}); }) == error::invalid_argument);
  client nowhere(ioc, [] {
    client_options o;
    o.endpoints = {"127.0.0.1:" + std::to_string(free_port())};
    o.request_timeout = 500ms;
    return o;
  }());
  run_for(ioc, [](client& c, client& nowhere) -> asio::awaitable<void> {
    running lost(nowhere, "reg-bad", "v", registration_options{.retry_min = 50ms, .retry_max = 200ms});
    co_await sleep_for(1s);
    BOOST_TEST(!lost.reg.is_registered());
    co_await lost.stop();  // no hang while nothing answers

    running r(c, "reg-bad", "v", registration_options{.ttl = 2s});
    co_await eventually([&] { return r.reg.is_registered(); }, 10s);
    std::optional<error_code> second;
    r.reg.async_run([&](error_code ec) { second = ec; });
    co_await eventually([&] { return second.has_value(); }, 5s);
    BOOST_TEST_REQUIRE(second.has_value());
    BOOST_TEST(*second == asio::error::already_started);
    c.close();
    co_await eventually([&] { return r.ended.has_value(); }, 10s);
    BOOST_TEST_REQUIRE(r.ended.has_value());
    BOOST_TEST(*r.ended == error::client_closed, r.ended->message());
    registration moved(std::move(r.reg));
    auto [ec] = co_await r.reg.async_run(asio::as_tuple(use_awaitable));
    BOOST_TEST(ec == asio::error::bad_descriptor);
  }(c, nowhere));
}
