// coetcd: the command-line face of the library. `coetcd lock NAME -- CMD` runs a command under a
// distributed lock (compatible with `etcdctl lock`), `coetcd elect` campaigns or listens, and
// get/put/del/watch poke at a cluster. Run `coetcd --help` for flags and exit codes.
#include <coetcd.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/program_options.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace asio = boost::asio;
namespace po = boost::program_options;
using namespace asio::experimental::awaitable_operators;
using asio::use_awaitable;
using boost::system::error_code;

namespace {

constexpr auto as_result = asio::as_tuple(use_awaitable);

enum exit_code : int {
  ok = 0,
  failed = 1,        // etcd, connection, TLS or auth error
  usage = 2,         // bad command line
  held = 3,          // --try found the lock held
  timed_out = 4,     // --timeout passed while waiting
  lost = 5,          // the session (lock or leadership) was lost
};

const char* const help_text = R"(coetcd: distributed locks, elections and keys on etcd

Usage:
  coetcd [flags] lock NAME [-- COMMAND [ARGS...]]
  coetcd [flags] lock --status NAME [--json]
  coetcd [flags] rlock NAME [-- COMMAND [ARGS...]]
  coetcd [flags] wlock NAME [-- COMMAND [ARGS...]]
  coetcd [flags] sem NAME PERMITS [--count N] [-- COMMAND [ARGS...]]
  coetcd [flags] elect NAME PROPOSAL
  coetcd [flags] elect --listen NAME
  coetcd [flags] get KEY [--prefix]
  coetcd [flags] put KEY VALUE
  coetcd [flags] del KEY [--prefix]
  coetcd [flags] watch KEY [--prefix]

lock       Waits for the lock and prints its key (NAME/<lease hex>, as `etcdctl lock`). Without a
           command, holds it until SIGINT/SIGTERM, then releases it. With a command, runs it with
           ETCD_LOCK_KEY and ETCD_LOCK_REV (the fencing token) in its environment, releases the
           lock when it exits and exits with its exit code. If the lock is lost while the command
           runs, says so on stderr, sends the command SIGTERM and exits 5.
           --status prints who holds NAME (key, lease, TTL left, fencing token) and who waits, in
           queue order, for locks and elections of coetcd, Go and etcdctl alike; exits 0 also
           when nobody holds it. --json prints the same as one JSON object.
rlock      As lock, holding the read-write lock NAME shared (Go's recipe.RWMutex RLock layout:
           NAME/read/<lease hex>): any number of rlock holders at once, none while a wlock holds
           or waits ahead of it. Same flags, environment and exit codes as lock.
wlock      As lock, holding the read-write lock NAME exclusively (NAME/write/<lease hex>): waits
           for every older rlock and wlock holder.
sem        As lock, holding --count (default 1) of the PERMITS permits of the semaphore NAME:
           at most PERMITS permits are held at once by all its holders, taken in arrival order
           (key NAME/<lease hex>_<n>, value "<count>/<PERMITS>"). Every holder must give the same
           PERMITS. Prints "NAME <count>/<PERMITS>", which the command gets as ETCD_LOCK_KEY
           (ETCD_LOCK_REV is 0: a semaphore has no fencing token). --try exits 3 when the
           permits are not free at once.
elect      Campaigns with PROPOSAL; once leader prints the proposal key and value, leads until
           SIGINT/SIGTERM, then resigns. --listen prints each new leader's key and value.
get/put/del/watch
           Read, write, delete or follow keys (--prefix: every key starting with KEY).

Flags (before or after the command; each also read from COETCD_<FLAG>, e.g. COETCD_ENDPOINTS):
)";

const char* const exit_codes_text = R"(
Exit codes:
  0  success (lock with a command: the command's own exit code)
  1  etcd, connection, TLS or authentication error (one line on stderr says which)
  2  bad command line
  3  lock --try: the lock is held by another session
  4  lock --timeout: gave up waiting
  5  the session was lost (lock or leadership can no longer be trusted)
  128+N  the command was killed by signal N
)";

struct cli {
  std::string command;
  std::vector<std::string> args;
  std::vector<std::string> exec;  // after "--"
  std::string endpoints = "127.0.0.1:2379";
  std::string cacert, cert, key, user;
  double dial_timeout = 5;
  int ttl = 60;
  std::int64_t permits = 0, count = 1;  // sem
  double timeout = 0;
  bool try_only = false, listen = false, prefix = false, status = false, json = false, verbose = false;
};

[[noreturn]] void die(int code, const std::string& msg) {
  std::fprintf(stderr, "coetcd: %s\n", msg.c_str());
  std::exit(code);
}

std::string read_password(const std::string& user) {
  if (const char* p = std::getenv("COETCD_PASSWORD")) return p;
  std::FILE* tty = std::fopen("/dev/tty", "r+");
  if (!tty) die(usage, "no password for user '" + user + "': give --user NAME:PASSWORD or set COETCD_PASSWORD");
  std::fprintf(tty, "Password for %s: ", user.c_str());
  std::fflush(tty);
  termios old{};
  tcgetattr(fileno(tty), &old);
  termios quiet = old;
  quiet.c_lflag &= ~tcflag_t(ECHO);
  tcsetattr(fileno(tty), TCSANOW, &quiet);
  char buf[1024] = {};
  bool got = std::fgets(buf, sizeof buf, tty) != nullptr;
  tcsetattr(fileno(tty), TCSANOW, &old);
  std::fprintf(tty, "\n");
  std::fclose(tty);
  if (!got) die(usage, "no password given");
  std::string pw = buf;
  if (!pw.empty() && pw.back() == '\n') pw.pop_back();
  return pw;
}

cli parse(int argc, char** argv) {
  cli c;
  // Everything after the first "--" is the command to run under the lock, verbatim.
  std::vector<std::string> words;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--") {
      for (int j = i + 1; j < argc; ++j) c.exec.push_back(argv[j]);
      break;
    }
    words.push_back(argv[i]);
  }
  po::options_description flags;
  flags.add_options()
      ("help,h", "print this help")
      ("endpoints", po::value(&c.endpoints), "comma-separated etcd members (default 127.0.0.1:2379)")
      ("cacert", po::value(&c.cacert), "CA bundle to verify the servers (enables TLS)")
      ("cert", po::value(&c.cert), "client certificate (with --key)")
      ("key", po::value(&c.key), "client private key")
      ("user", po::value(&c.user), "NAME or NAME:PASSWORD (password else from COETCD_PASSWORD or a prompt)")
      ("dial-timeout", po::value(&c.dial_timeout), "seconds to wait for the cluster per request (default 5)")
      ("ttl", po::value(&c.ttl), "lock/elect: session TTL in seconds (default 60)")
      ("timeout", po::value(&c.timeout), "lock: give up after this many seconds of waiting")
      ("try", po::bool_switch(&c.try_only), "lock: do not wait; exit 3 if the lock is held")
      ("count", po::value(&c.count), "sem: permits to take (default 1)")
      ("listen", po::bool_switch(&c.listen), "elect: print leaders instead of campaigning")
      ("prefix", po::bool_switch(&c.prefix), "get/del/watch: every key starting with KEY")
      ("status", po::bool_switch(&c.status), "lock: print the holder and the waiters of NAME, do not lock")
      ("json", po::bool_switch(&c.json), "lock --status: print JSON")
      ("verbose,v", po::bool_switch(&c.verbose), "print the client's events (connections, streams, locks) on stderr");
  po::options_description hidden;
  hidden.add_options()("words", po::value<std::vector<std::string>>());
  po::options_description all;
  all.add(flags).add(hidden);
  po::positional_options_description pos;
  pos.add("words", -1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(words).options(all).positional(pos).run(), vm);
    // COETCD_ENDPOINTS, COETCD_DIAL_TIMEOUT, ... (the command line wins).
    po::store(po::parse_environment(flags, [&](const std::string& env) -> std::string {
                if (env.rfind("COETCD_", 0) != 0 || env == "COETCD_PASSWORD") return "";
                std::string name = env.substr(7);
                for (auto& ch : name) ch = ch == '_' ? '-' : char(std::tolower(static_cast<unsigned char>(ch)));
                return flags.find_nothrow(name, false) ? name : "";
              }),
              vm);
    po::notify(vm);
  } catch (const po::error& e) {
    die(usage, std::string(e.what()) + " (see coetcd --help)");
  }
  if (vm.count("help") || words.empty()) {
    std::cout << help_text << flags << exit_codes_text;
    std::exit(vm.count("help") ? ok : usage);
  }
  auto w = vm.count("words") ? vm["words"].as<std::vector<std::string>>() : std::vector<std::string>{};
  if (w.empty()) die(usage, "no command (see coetcd --help)");
  c.command = w.front();
  c.args.assign(w.begin() + 1, w.end());
  auto want = [&](std::size_t n, const char* shape) {
    if (c.args.size() != n) die(usage, "usage: coetcd " + c.command + " " + shape);
  };
  const bool locks = c.command == "lock" || c.command == "rlock" || c.command == "wlock" || c.command == "sem";
  if (c.command == "lock") c.status ? want(1, "--status NAME [--json]") : want(1, "NAME [-- COMMAND ARGS...]");
  else if (c.command == "sem") {
    want(2, "NAME PERMITS [--count N] [-- COMMAND ARGS...]");
    try {
      std::size_t used = 0;
      c.permits = std::stoll(c.args[1], &used);
      if (used != c.args[1].size()) throw std::invalid_argument("trailing");
    } catch (const std::exception&) {
      die(usage, "sem: PERMITS must be a whole number, not '" + c.args[1] + "'");
    }
    if (c.permits < 1) die(usage, "sem: PERMITS must be at least 1");
    if (c.count < 1 || c.count > c.permits) die(usage, "sem: --count must be between 1 and PERMITS");
  } else if (locks) want(1, "NAME [-- COMMAND ARGS...]");
  else if (c.command == "elect") c.listen ? want(1, "--listen NAME") : want(2, "NAME PROPOSAL");
  else if (c.command == "get" || c.command == "del" || c.command == "watch") want(1, "KEY [--prefix]");
  else if (c.command == "put") want(2, "KEY VALUE");
  else die(usage, "unknown command '" + c.command + "' (lock, rlock, wlock, sem, elect, get, put, del, watch)");
  if (!c.exec.empty() && !locks) die(usage, "only lock, rlock, wlock and sem run a command after --");
  if (c.status && (c.command != "lock" || !c.exec.empty() || c.try_only || c.timeout > 0))
    die(usage, "--status goes with lock NAME alone (no command, --try or --timeout)");
  if (c.json && !c.status) die(usage, "--json goes with lock --status");
  if (c.ttl < 1) die(usage, "--ttl must be at least 1 second");
  if (c.timeout < 0 || c.dial_timeout <= 0) die(usage, "--timeout and --dial-timeout must be positive");
  if (c.try_only && c.timeout > 0) die(usage, "--try and --timeout exclude each other");
  if (!c.cert.empty() != !c.key.empty()) die(usage, "--cert and --key go together");
  return c;
}

coetcd::client_options client_options_for(const cli& c) {
  coetcd::client_options o;
  o.endpoints.clear();
  std::stringstream ss(c.endpoints);
  for (std::string e; std::getline(ss, e, ',');)
    if (!e.empty()) o.endpoints.push_back(e);
  if (o.endpoints.empty()) die(usage, "--endpoints is empty");
  o.request_timeout = std::chrono::milliseconds(static_cast<long>(c.dial_timeout * 1000));
  if (!c.cacert.empty() || !c.cert.empty()) o.tls = coetcd::tls_options{c.cacert, c.cert, c.key};
  if (c.verbose)
    o.on_event = [](const coetcd::event& e) { std::fprintf(stderr, "coetcd: event: %s\n", coetcd::to_string(e).c_str()); };
  if (!c.user.empty()) {
    auto colon = c.user.find(':');
    o.user = c.user.substr(0, colon);
    o.password = colon == std::string::npos ? read_password(o.user) : c.user.substr(colon + 1);
  }
  return o;
}

struct app {
  cli args;
  asio::io_context& ioc;
  coetcd::client& client;
  asio::signal_set stop_signals{ioc, SIGINT, SIGTERM};
  int exit = ok;

  [[noreturn]] void fail(int code, const std::string& what, error_code ec) {
    die(code, args.command + ": " + what + ": " + ec.message());
  }

  asio::awaitable<int> wait_stop_signal() {
    auto [ec, sig] = co_await stop_signals.async_wait(as_result);
    co_return ec ? 0 : sig;
  }

  // Exits with `code` after closing the open session: its lease is revoked, so a waiting key
  // whose clean-up is still on its way (a cancelled lock completes first) goes with it instead of
  // staying until the lease expires.
  coetcd::session* open = nullptr;
  asio::awaitable<void> give_up(int code, std::string msg) {
    if (open) co_await open->async_close(as_result);
    die(code, msg);
  }

  asio::awaitable<coetcd::session> open_session() {
    auto [ec, s] = co_await coetcd::session::async_create(
        client, coetcd::session_options{.ttl = std::chrono::seconds(args.ttl)}, as_result);
    if (ec) fail(failed, "cannot create a session", ec);
    co_return std::move(s);
  }

  // One side of a read-write lock, as the lock commands drive a coetcd::mutex.
  template <bool Shared>
  struct rw_side {
    coetcd::rw_mutex& m;
    template <class T>
    auto async_lock(T&& t) {
      if constexpr (Shared) return m.async_lock_shared(std::forward<T>(t));
      else return m.async_lock(std::forward<T>(t));
    }
    template <class T>
    auto async_try_lock(T&& t) {
      if constexpr (Shared) return m.async_try_lock_shared(std::forward<T>(t));
      else return m.async_try_lock(std::forward<T>(t));
    }
    template <class T>
    auto async_unlock(T&& t) {
      if constexpr (Shared) return m.async_unlock_shared(std::forward<T>(t));
      else return m.async_unlock(std::forward<T>(t));
    }
    template <class T>
    auto async_wait_lost(T&& t) {
      return m.async_wait_lost(std::forward<T>(t));
    }
    const std::string& key() const { return Shared ? m.read_key() : m.write_key(); }
    std::int64_t fencing_token() const { return m.fencing_token(); }
  };

  // A semaphore's --count permits, driven as a lock. It has no single key or fencing token.
  struct sem_side {
    coetcd::semaphore& m;
    std::int64_t n;
    std::string shown = m.name() + " " + std::to_string(n) + "/" + std::to_string(m.permits());
    template <class T>
    auto async_lock(T&& t) { return m.async_acquire(n, std::forward<T>(t)); }
    template <class T>
    auto async_try_lock(T&& t) { return m.async_try_acquire(n, std::forward<T>(t)); }
    template <class T>
    auto async_unlock(T&& t) { return m.async_release(n, std::forward<T>(t)); }
    template <class T>
    auto async_wait_lost(T&& t) { return m.async_wait_lost(std::forward<T>(t)); }
    const std::string& key() const { return shown; }
    std::int64_t fencing_token() const { return 0; }
  };

  // Waits for the lock, honouring --try, --timeout and SIGINT/SIGTERM (which abandon the wait;
  // our waiting key is deleted before we exit).
  template <class Lock>
  asio::awaitable<void> acquire(Lock& m) {
    const auto& name = args.args[0];
    const auto& cmd = args.command;
    if (args.try_only) {
      auto [ec] = co_await m.async_try_lock(as_result);
      if (ec == coetcd::error::locked)
        die(held, cmd + ": '" + name + "' is held by another session" + (cmd == "sem" ? " (no permits free)" : ""));
      if (ec) fail(failed, "cannot lock '" + name + "'", ec);
      co_return;
    }
    asio::steady_timer limit(ioc);
    if (args.timeout > 0) limit.expires_after(std::chrono::milliseconds(static_cast<long>(args.timeout * 1000)));
    else limit.expires_at(asio::steady_timer::time_point::max());
    auto r = co_await (m.async_lock(as_result) || limit.async_wait(as_result) || wait_stop_signal());
    if (r.index() == 1)
      co_await give_up(timed_out, cmd + ": gave up waiting for '" + name + "' after " + std::to_string(args.timeout) + " s");
    if (r.index() == 2) co_await give_up(130, cmd + ": interrupted while waiting for '" + name + "'");
    if (auto [ec] = std::get<0>(r); ec) fail(failed, "cannot lock '" + name + "'", ec);
  }

  static std::string json_string(const std::string& v) {
    std::string out = "\"";
    for (unsigned char ch : v) {
      if (ch == '"' || ch == '\\') out += '\\', out += char(ch);
      else if (ch < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04x", ch);
        out += buf;
      } else out += char(ch);
    }
    return out + "\"";
  }
  static std::string lease_hex(std::int64_t id) {
    char buf[20];
    std::snprintf(buf, sizeof buf, "%llx", static_cast<unsigned long long>(id));
    return buf;
  }
  static std::string entry_json(const coetcd::lock_entry& e) {
    return "{\"key\":" + json_string(e.key) + ",\"value\":" + json_string(e.value) + ",\"lease\":" +
           json_string(lease_hex(e.lease)) + ",\"ttl\":" + std::to_string(e.ttl) + ",\"granted_ttl\":" +
           std::to_string(e.granted_ttl) + ",\"create_revision\":" + std::to_string(e.create_revision) +
           (e.other_name.empty() ? "" : ",\"other_name\":" + json_string(e.other_name)) + "}";
  }
  static std::string entry_text(const coetcd::lock_entry& e) {
    std::string t = e.key + "  lease " + lease_hex(e.lease) + "  ttl " +
                    (e.lease == 0 ? std::string("none") : e.ttl < 0 ? std::string("expired")
                                                        : std::to_string(e.ttl) + "/" + std::to_string(e.granted_ttl) + " s") +
                    "  revision " + std::to_string(e.create_revision);
    if (!e.value.empty()) t += "  value " + json_string(e.value);
    if (!e.other_name.empty()) t += "  (lock " + json_string(e.other_name) + ")";
    return t;
  }

  // lock --status: who holds the name and who waits, as the server has it now.
  asio::awaitable<void> status() {
    const auto& name = args.args[0];
    auto [ec, st] = co_await coetcd::async_lock_status(client, name, as_result);
    if (ec) fail(failed, "cannot read the queue of '" + name + "'", ec);
    for (const auto& n : st.nested_names)
      std::fprintf(stderr, "coetcd: warning: keys of lock '%s' are under '%s/': etcd queues them with '%s'\n",
                   n.c_str(), name.c_str(), name.c_str());
    if (args.json) {
      std::string out = "{\"name\":" + json_string(name) + ",\"revision\":" + std::to_string(st.revision) +
                        ",\"holder\":" + (st.holder ? entry_json(*st.holder) : "null") +
                        ",\"read_write\":" + (st.read_write ? "true" : "false") +
                        ",\"permits\":" + std::to_string(st.permits) +
                        ",\"permits_in_use\":" + std::to_string(st.permits_in_use) + ",\"also_holding\":[";
      for (std::size_t i = 0; i < st.also_holding.size(); ++i) out += (i ? "," : "") + entry_json(st.also_holding[i]);
      out += "],\"waiters\":[";
      for (std::size_t i = 0; i < st.waiters.size(); ++i) out += (i ? "," : "") + entry_json(st.waiters[i]);
      out += "],\"nested_names\":[";
      for (std::size_t i = 0; i < st.nested_names.size(); ++i) out += (i ? "," : "") + json_string(st.nested_names[i]);
      std::printf("%s]}\n", out.c_str());
      co_return;
    }
    if (!st.holder) {
      std::printf("'%s' is not held (revision %lld)\n", name.c_str(), static_cast<long long>(st.revision));
      co_return;
    }
    std::printf("'%s' at revision %lld\n", name.c_str(), static_cast<long long>(st.revision));
    if (st.permits > 0)
      std::printf("semaphore %lld of %lld permits in use\n", static_cast<long long>(st.permits_in_use),
                  static_cast<long long>(st.permits));
    if (st.permits > 0) std::printf("holder    %s\n", entry_text(*st.holder).c_str());  // no fencing token
    else
      std::printf("holder    %s  fencing token %lld\n", entry_text(*st.holder).c_str(),
                  static_cast<long long>(st.holder->create_revision));
    for (const auto& e : st.also_holding)
      std::printf("holder    %s  (%s too)\n", entry_text(e).c_str(), st.permits > 0 ? "holding" : "reading");
    for (std::size_t i = 0; i < st.waiters.size(); ++i)
      std::printf("waiter %-2zu %s\n", i + 1, entry_text(st.waiters[i]).c_str());
  }

  asio::awaitable<void> lock() {
    if (args.status) co_return co_await status();
    auto s = co_await open_session();
    open = &s;
    if (args.command == "lock") {
      coetcd::mutex m(s, args.args[0]);
      co_await hold(m);
    } else if (args.command == "sem") {
      coetcd::semaphore sem(s, args.args[0], args.permits);
      sem_side side{sem, args.count};
      co_await hold(side);
    } else {
      coetcd::rw_mutex rw(s, args.args[0]);
      if (args.command == "rlock") {
        rw_side<true> side{rw};
        co_await hold(side);
      } else {
        rw_side<false> side{rw};
        co_await hold(side);
      }
    }
    co_await s.async_close(as_result);
  }

  // Takes the lock, then holds it until a signal or runs the command under it, and releases it.
  template <class Lock>
  asio::awaitable<void> hold(Lock& m) {
    co_await acquire(m);
    std::printf("%s\n", m.key().c_str());
    std::fflush(stdout);
    if (args.exec.empty()) {
      auto r = co_await (wait_stop_signal() || m.async_wait_lost(as_result));
      if (r.index() == 1) die(lost, args.command + ": lost '" + m.key() + "': " + std::get<0>(std::get<1>(r)).message());
    } else {
      exit = co_await run_locked(m);
      if (exit == lost) co_return;  // the lease is gone; nothing to release
    }
    auto [uec] = co_await m.async_unlock(as_result);
    if (uec && exit == ok) fail(failed, "cannot release '" + m.key() + "'", uec);
  }

  // Runs the command with the lock's key and fencing token in its environment and waits for it,
  // forwarding SIGINT/SIGTERM; if the lock is lost first, stops it and reports the loss.
  template <class Lock>
  asio::awaitable<int> run_locked(Lock& m) {
    asio::signal_set child_exit(ioc, SIGCHLD);  // before fork, so the exit cannot be missed
    std::vector<char*> argv;
    for (auto& a : args.exec) argv.push_back(a.data());
    argv.push_back(nullptr);
    auto rev = std::to_string(m.fencing_token());
    pid_t pid = ::fork();
    if (pid < 0) die(failed, args.command + ": cannot start '" + args.exec[0] + "': fork failed");
    if (pid == 0) {
      ::setenv("ETCD_LOCK_KEY", m.key().c_str(), 1);
      ::setenv("ETCD_LOCK_REV", rev.c_str(), 1);
      ::execvp(argv[0], argv.data());
      std::fprintf(stderr, "coetcd: %s: cannot run '%s': %s\n", args.command.c_str(), argv[0], std::strerror(errno));
      ::_exit(127);
    }
    // The exit status is kept here, not only returned: a reap that completes in the same turn as
    // a signal (a SIGTERM to the whole process group) loses the `||` and its result with it, and
    // the next waitpid would find no child and wait for ever.
    std::optional<int> exit_code;
    auto reap = [&]() -> asio::awaitable<int> {
      for (;;) {
        int status = 0;
        if (!exit_code && ::waitpid(pid, &status, WNOHANG) == pid)
          exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (exit_code) co_return *exit_code;
        co_await child_exit.async_wait(as_result);
      }
    };
    for (;;) {
      auto r = co_await (reap() || m.async_wait_lost(as_result) || wait_stop_signal());
      if (r.index() == 0) co_return std::get<0>(r);
      if (exit_code) co_return *exit_code;
      if (r.index() == 2) {
        ::kill(pid, std::get<2>(r));  // pass the user's signal on, keep waiting for the command
        continue;
      }
      std::fprintf(stderr, "coetcd: %s: lost '%s' (%s) while '%s' ran; sending it SIGTERM\n", args.command.c_str(),
                   m.key().c_str(), std::get<0>(std::get<1>(r)).message().c_str(), args.exec[0].c_str());
      ::kill(pid, SIGTERM);
      co_await reap();
      co_return lost;
    }
  }

  asio::awaitable<void> elect() {
    const auto& name = args.args[0];
    if (args.listen) {
      coetcd::election_observer obs(client, name);
      for (;;) {
        auto r = co_await (obs.async_next(as_result) || wait_stop_signal());
        if (r.index() == 1) co_return;
        auto [ec, leader] = std::get<0>(std::move(r));
        if (ec) fail(failed, "cannot observe '" + name + "'", ec);
        if (leader) std::printf("%s\n%s\n", leader->key.c_str(), leader->value.c_str());
        std::fflush(stdout);
      }
    }
    auto s = co_await open_session();
    open = &s;
    coetcd::election e(s, name);
    auto r = co_await (e.async_campaign(args.args[1], as_result) || wait_stop_signal());
    if (r.index() == 1) co_await give_up(130, "elect: interrupted while campaigning for '" + name + "'");
    if (auto [ec] = std::get<0>(r); ec) fail(failed, "cannot campaign for '" + name + "'", ec);
    std::printf("%s\n%s\n", e.key().c_str(), args.args[1].c_str());
    std::fflush(stdout);
    auto lost_or_stop = co_await (wait_stop_signal() || s.async_wait_lost(as_result));
    if (lost_or_stop.index() == 1) die(lost, "elect: lost leadership of '" + name + "'");
    auto [rec] = co_await e.async_resign(as_result);
    if (rec) fail(failed, "cannot resign '" + name + "'", rec);
    co_await s.async_close(as_result);
  }

  asio::awaitable<void> kv() {
    const auto& key = args.args[0];
    coetcd::get_options get_opts;
    get_opts.prefix = args.prefix;
    coetcd::delete_options del_opts;
    del_opts.prefix = args.prefix;
    coetcd::watch_options watch_opts;
    watch_opts.prefix = args.prefix;
    if (args.command == "get") {
      auto [ec, r] = co_await client.async_get(key, get_opts, as_result);
      if (ec) fail(failed, "cannot read '" + key + "'", ec);
      for (auto& kv : r.kvs) std::printf("%s\n%s\n", kv.key.c_str(), kv.value.c_str());
    } else if (args.command == "put") {
      auto [ec, r] = co_await client.async_put(key, args.args[1], as_result);
      if (ec) fail(failed, "cannot write '" + key + "'", ec);
      std::printf("OK\n");
    } else if (args.command == "del") {
      auto [ec, r] = co_await client.async_delete(key, del_opts, as_result);
      if (ec) fail(failed, "cannot delete '" + key + "'", ec);
      std::printf("%lld\n", static_cast<long long>(r.deleted));
    } else {
      auto [ec, w] = co_await client.async_watch(key, watch_opts, as_result);
      if (ec) fail(failed, "cannot watch '" + key + "'", ec);
      for (;;) {
        auto r = co_await (w.async_next(as_result) || wait_stop_signal());
        if (r.index() == 1) co_return;
        auto [nec, b] = std::get<0>(std::move(r));
        if (nec) fail(failed, "watch of '" + key + "' ended", nec);
        for (auto& e : b.events) {
          if (e.type == coetcd::watch_event::kind::put) std::printf("PUT\n%s\n%s\n", e.kv.key.c_str(), e.kv.value.c_str());
          else std::printf("DELETE\n%s\n", e.kv.key.c_str());
        }
        std::fflush(stdout);
      }
    }
  }

  asio::awaitable<void> run() {
    if (args.command == "lock" || args.command == "rlock" || args.command == "wlock" || args.command == "sem")
      co_await lock();
    else if (args.command == "elect") co_await elect();
    else co_await kv();
  }
};

}  // namespace

int main(int argc, char** argv) {
  auto args = parse(argc, argv);
  asio::io_context ioc;
  std::optional<coetcd::client> client;
  try {
    client.emplace(ioc, client_options_for(args));
  } catch (const std::exception& e) {
    die(failed, e.what());
  }
  app a{args, ioc, *client};
  std::exception_ptr error;
  asio::co_spawn(ioc, a.run(), [&](std::exception_ptr e) {
    error = e;
    a.stop_signals.cancel();
    client->close();
  });
  ioc.run();
  if (error) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      die(failed, args.command + ": " + e.what());
    }
  }
  std::fflush(stdout);
  return a.exit;
}
