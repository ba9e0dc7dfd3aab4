// TLS (server and mutual) and user/password authentication against real etcd servers.
#define BOOST_TEST_MODULE coetcd_security
#include "support/fixture.hpp"

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/system/system_error.hpp>

#include <fstream>

using namespace coetcd;
using namespace coetcd::test;
using namespace std::chrono_literals;

namespace {

struct certificates {
  std::filesystem::path dir = make_temp_dir("certs");
  tls_files files = make_certificates(dir);
  ~certificates() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

certificates& certs() {
  static certificates c;
  return c;
}

etcd_config mtls_config() {
  etcd_config cfg;
  cfg.tls = true;
  cfg.client_cert_auth = true;
  cfg.certs = certs().files;
  return cfg;
}

asio::awaitable<error_code> try_put(client& c, std::string key) {
  auto [ec, r] = co_await c.async_put(key, "v", asio::as_tuple(use_awaitable));
  co_return ec;
}

}  // namespace

BOOST_AUTO_TEST_CASE(mutual_tls_round_trip_and_failures) {
  etcd_process etcd(mtls_config());
  asio::io_context ioc;
  auto good = options_for(etcd);
  good.tls = tls_options{certs().files.ca, certs().files.client_cert, certs().files.client_key};
  client c(ioc, good);
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    co_await c.async_put("/tls/k", "secret", use_awaitable);
    auto g = co_await c.async_get("/tls/k", use_awaitable);
    BOOST_TEST(g.kvs.at(0).value == "secret");
    auto w = co_await c.async_watch("/tls/k", use_awaitable);
    co_await c.async_delete("/tls/k", use_awaitable);
    auto b = co_await w.async_next(use_awaitable);
    BOOST_TEST((b.events.at(0).type == watch_event::kind::del));
  }(c));

  // Without a client certificate the server refuses the handshake: a clear error in time.
  auto no_cert = options_for(etcd);
  no_cert.tls = tls_options{certs().files.ca, "", ""};
  no_cert.request_timeout = 1500ms;
  client c2(ioc, no_cert);
  // A CA that did not sign the server's certificate.
  auto wrong_ca = options_for(etcd);
  wrong_ca.tls = tls_options{certs().files.other_ca, certs().files.client_cert, certs().files.client_key};
  wrong_ca.request_timeout = 1500ms;
  client c3(ioc, wrong_ca);
  run_for(ioc, [](client& c2, client& c3) -> asio::awaitable<void> {
    auto t0 = std::chrono::steady_clock::now();
    auto e2 = co_await try_put(c2, "/tls/x");
    BOOST_TEST(e2 == error::endpoints_unreachable, e2.message());
    auto e3 = co_await try_put(c3, "/tls/x");
    BOOST_TEST(e3 == error::endpoints_unreachable, e3.message());
    BOOST_TEST((std::chrono::steady_clock::now() - t0 < 5s));
  }(c2, c3));
}

BOOST_AUTO_TEST_CASE(bad_tls_files_are_named_in_the_error) {
  asio::io_context ioc;
  auto dir = make_temp_dir("badtls");
  std::ofstream(dir / "garbage.pem") << "not a certificate\n";
  struct tcase {
    tls_options tls;
    error expected;
    std::string named;
  };
  auto& f = certs().files;
  std::vector<tcase> cases = {
      {{(dir / "missing.pem").string(), "", ""}, error::tls_file_unreadable, "missing.pem"},
      {{(dir / "garbage.pem").string(), "", ""}, error::tls_file_invalid, "garbage.pem"},
      {{f.ca, f.client_cert, (dir / "garbage.pem").string()}, error::tls_file_invalid, "garbage.pem"},
      {{f.ca, f.client_key, f.client_key}, error::tls_file_invalid, "client-key.pem"},  // key given as cert
      {{f.ca, f.client_cert, ""}, error::tls_file_unreadable, "key_file"},
      {{dir.string(), "", ""}, error::tls_file_invalid, dir.filename().string()},  // a directory
  };
  for (auto& tc : cases) {
    client_options o;
    o.endpoints = {"https://127.0.0.1:2379"};
    o.tls = tc.tls;
    try {
      client c(ioc, o);
      BOOST_ERROR("bad TLS options accepted, expecting " << make_error_code(tc.expected).message());
    } catch (const boost::system::system_error& e) {
      BOOST_TEST(e.code() == tc.expected, e.what());
      BOOST_TEST(std::string(e.what()).find(tc.named) != std::string::npos, e.what());
    }
  }
  std::filesystem::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(user_password_auth_and_reauthentication) {
  etcd_config cfg;
  cfg.auth_token_ttl = 1;  // simple tokens expire after a second of disuse
  etcd_process etcd(cfg);
  auto run = [&](const std::string& a) {
    auto r = etcdctl(etcd, a);
    BOOST_TEST_REQUIRE(r.exit_code == 0, a << ": " << r.output);
  };
  run("user add root:rootpw");
  run("user add alice:alicepw");
  run("role add reader");
  run("role grant-permission --prefix=true reader read /auth/");
  run("user grant-role alice reader");
  run("auth enable");

  asio::io_context ioc;
  auto root = options_for(etcd);
  root.user = "root";
  root.password = "rootpw";
  client c(ioc, root);
  auto wrong = options_for(etcd);
  wrong.user = "root";
  wrong.password = "nope";
  client bad(ioc, wrong);
  auto reader = options_for(etcd);
  reader.user = "alice";
  reader.password = "alicepw";
  client alice(ioc, reader);
  auto anon = options_for(etcd);
  client nobody(ioc, anon);

  double auths_before = etcd.grpc_handled("Authenticate");
  run_for(ioc, [](client& c, client& bad, client& alice, client& nobody) -> asio::awaitable<void> {
    co_await c.async_put("/auth/k", "v", use_awaitable);
    auto w = co_await c.async_watch("/auth/k", use_awaitable);
    auto g = co_await alice.async_get("/auth/k", use_awaitable);
    BOOST_TEST(g.kvs.at(0).value == "v");
    auto denied = co_await try_put(alice, "/auth/k");
    BOOST_TEST(denied == error::permission_denied, denied.message());
    auto wrong_pw = co_await try_put(bad, "/auth/k");
    BOOST_TEST(wrong_pw == error::auth_failed, wrong_pw.message());
    auto [ec_w, w_bad] = co_await bad.async_watch("/auth/k", asio::as_tuple(use_awaitable));
    BOOST_TEST(ec_w == error::auth_failed, ec_w.message());
    auto no_user = co_await try_put(nobody, "/auth/k");
    BOOST_TEST(no_user == error::auth_required, no_user.message());

    co_await sleep_for(2500ms);  // the token expires on the server
    co_await c.async_put("/auth/k", "v2", use_awaitable);  // re-authenticates transparently
    auto b = co_await w.async_next(use_awaitable);
    BOOST_TEST(b.events.at(0).kv.value == "v2");
    co_await c.async_delete("/auth/k", use_awaitable);
  }(c, bad, alice, nobody));
  // root, alice, the wrong password twice (put, watch) = 4; the expired token's re-authentication
  // makes it 5.
  BOOST_TEST(etcd.grpc_handled("Authenticate") - auths_before == 5.0);
  etcdctl(etcd, "--user root:rootpw auth disable");
}

// A simple token expires after --auth-token-ttl of disuse, but a stream keeps the token it was
// opened with. After the client has been idle past the TTL: a new watch on the old stream still
// gets its events, a lock another session holds for a second still comes (its view's watch is
// created on that stream), and a session renewed over the keepalive stream is not lost.
BOOST_AUTO_TEST_CASE(streams_outlive_an_expired_auth_token) {
  etcd_config cfg;
  cfg.auth_token_ttl = 1;
  etcd_process etcd(cfg);
  auto run = [&](const std::string& a) {
    auto r = etcdctl(etcd, a);
    BOOST_TEST_REQUIRE(r.exit_code == 0, a << ": " << r.output);
  };
  run("user add root:rootpw");
  run("auth enable");
  asio::io_context ioc;
  auto root = options_for(etcd);
  root.user = "root";
  root.password = "rootpw";
  client c(ioc, root), other(ioc, root);
  run_for(ioc, [](client& c, client& other) -> asio::awaitable<void> {
    using namespace boost::asio::experimental::awaitable_operators;
    auto s = co_await session::async_create(c, session_options{.ttl = 2s}, use_awaitable);
    auto first = co_await c.async_watch("/auth4/a", use_awaitable);
    co_await sleep_for(2500ms);  // every token of `c` has expired on the server
    auto w = co_await c.async_watch("/auth4/b", use_awaitable);
    co_await other.async_put("/auth4/b", "v", use_awaitable);
    auto r = co_await (w.async_next(asio::as_tuple(use_awaitable)) || sleep_for(5s));
    BOOST_TEST_REQUIRE(r.index() == 0u, "a watch created after the token expired got no event");
    BOOST_TEST(!std::get<0>(std::get<0>(r)), std::get<0>(std::get<0>(r)).message());

    auto holder = co_await session::async_create(other, session_options{.ttl = 10s}, use_awaitable);
    mutex mh(holder, "/auth4/lock");
    auto theirs = co_await mh.async_lock(use_awaitable);
    co_await sleep_for(2500ms);
    mutex m(s, "/auth4/lock");
    asio::steady_timer release(co_await asio::this_coro::executor, 1s);
    release.async_wait([&theirs](error_code) { theirs.async_release(asio::detached); });
    auto l = co_await (m.async_lock(asio::as_tuple(use_awaitable)) || sleep_for(10s));
    BOOST_TEST_REQUIRE(l.index() == 0u, "no lock within 10 s of its release");
    auto& [el, ours] = std::get<0>(l);
    BOOST_TEST(!el, el.message());
    BOOST_TEST(bool(ours));
    BOOST_TEST(!s.lost(), "the session's renewals stopped with the token");
    co_await ours.async_release(use_awaitable);
    co_await other.async_delete("/auth4/", delete_options{.prefix = true}, use_awaitable);
  }(c, other), 60s);
  etcdctl(etcd, "--user root:rootpw auth disable");
}

// Auth switched off under a client that still holds a token, then on again (docs/etcd-versions.md:
// 3.5 ignores a token once auth is off; 3.4 may refuse it). The client's requests, watches, locks
// and session go on throughout: a refused token is dropped and the request sent again; an
// Authenticate answered "authentication is not enabled" means requests go without a token (as
// Go's client sends them) until one is refused for want of a user, when auth is back.
BOOST_AUTO_TEST_CASE(a_client_keeps_working_when_auth_is_switched_off_under_it) {
  etcd_process etcd;
  auto run = [&](const std::string& a) {
    auto r = etcdctl(etcd, a);
    BOOST_TEST_REQUIRE(r.exit_code == 0, a << ": " << r.output);
  };
  run("user add root:rootpw");
  run("auth enable");
  asio::io_context ioc;
  auto root = options_for(etcd);
  root.user = "root";
  root.password = "rootpw";
  client c(ioc, root);
  run_for(ioc, [](client& c, const etcd_process& etcd) -> asio::awaitable<void> {
    using namespace boost::asio::experimental::awaitable_operators;
    auto s = co_await session::async_create(c, session_options{.ttl = 5s}, use_awaitable);
    auto w = co_await c.async_watch("/authoff/k", use_awaitable);
    co_await c.async_put("/authoff/k", "v1", use_awaitable);
    auto r = etcdctl(etcd, "--user root:rootpw auth disable");
    BOOST_TEST_REQUIRE(r.exit_code == 0, r.output);
    const double auths = etcd.grpc_handled("Authenticate");
    auto [ec, p] = co_await c.async_put("/authoff/k", "v2", asio::as_tuple(use_awaitable));
    BOOST_TEST(!ec, "a put after auth was disabled: " << ec.message());
    // 3.4 refused the old token, and the client asked for a new one (answered "authentication is
    // not enabled"); 3.5 took the request as it was.
    BOOST_TEST(etcd.grpc_handled("Authenticate") - auths == (etcd_version() >= 305 ? 0.0 : 1.0));
    auto [eg, g] = co_await c.async_get("/authoff/k", asio::as_tuple(use_awaitable));
    BOOST_TEST(!eg, eg.message());
    if (!eg) BOOST_TEST(g.kvs.at(0).value == "v2");
    for (auto want : {"v1", "v2"}) {
      auto b = co_await (w.async_next(asio::as_tuple(use_awaitable)) || sleep_for(5s));
      BOOST_TEST_REQUIRE(b.index() == 0u, "no event for " << want);
      auto& [ew, batch] = std::get<0>(b);
      BOOST_TEST_REQUIRE(!ew, ew.message());
      BOOST_TEST(batch.events.at(0).kv.value == want);
    }
    mutex m(s, "/authoff/lock");
    auto [el, held] = co_await m.async_lock(asio::as_tuple(use_awaitable));
    BOOST_TEST(!el, "a lock after auth was disabled: " << el.message());
    if (!el) co_await held.async_release(use_awaitable);
    co_await sleep_for(6s);  // past the TTL: the renewals went on without auth
    BOOST_TEST(!s.lost(), "the session was lost after auth was disabled");

    // A client that starts while auth is off sends no token at all (its watch stream opens
    // without one), and so does `c` on 3.4.
    client late(c.get_executor(), c.options());
    auto lw = co_await late.async_watch("/authoff/k", use_awaitable);
    co_await late.async_put("/authoff/late", "v", use_awaitable);

    // And on again: whatever was sent without a token is refused for want of a user; each
    // request, and each watch created on a stream opened without a token, authenticates and goes
    // again, several in flight at once included.
    r = etcdctl(etcd, "auth enable");
    BOOST_TEST_REQUIRE(r.exit_code == 0, r.output);
    for (client* k : {&c, &late}) {
      const char* who = k == &c ? "the first client" : "the client started while auth was off";
      std::vector<std::optional<error_code>> puts(5);
      for (std::size_t i = 0; i < puts.size(); ++i)
        k->async_put("/authoff/k" + std::to_string(i), "v3", [&puts, i](error_code ec, put_result) { puts[i] = ec; });
      auto [e3, p3] = co_await k->async_put("/authoff/k", "v3", asio::as_tuple(use_awaitable));
      BOOST_TEST(!e3, who << ": a put after auth was enabled again: " << e3.message());
      co_await sleep_for(500ms);
      for (auto& p : puts) BOOST_TEST((p && !*p), who << ": " << (p ? p->message() : "no answer"));
      auto [ew2, w2] = co_await k->async_watch("/authoff/k2", asio::as_tuple(use_awaitable));
      BOOST_TEST(!ew2, who << ": a watch after auth was enabled again: " << ew2.message());
      if (!ew2) {
        co_await k->async_put("/authoff/k2", "v", use_awaitable);
        auto b = co_await (w2.async_next(asio::as_tuple(use_awaitable)) || sleep_for(5s));
        BOOST_TEST_REQUIRE(b.index() == 0u, who << ": no event on the watch created after auth was enabled again");
        BOOST_TEST(!std::get<0>(std::get<0>(b)), std::get<0>(std::get<0>(b)).message());
      }
    }
    late.close();
    auto [el2, held2] = co_await m.async_lock(asio::as_tuple(use_awaitable));
    BOOST_TEST(!el2, "a lock after auth was enabled again: " << el2.message());
    if (!el2) co_await held2.async_release(use_awaitable);
    BOOST_TEST(!s.lost(), "the session was lost after auth was enabled again");
    co_await s.async_close(asio::as_tuple(use_awaitable));
    co_await c.async_delete("/authoff/", delete_options{.prefix = true}, use_awaitable);
  }(c, etcd), 60s);
  etcdctl(etcd, "--user root:rootpw auth disable");
}
