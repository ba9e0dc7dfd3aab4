// The coetcd command line: help text, flags (also from COETCD_* variables) and their checks.
#include "cli.hpp"

#include <boost/program_options.hpp>

#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

namespace coetcd_cli {
namespace po = boost::program_options;

namespace {

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
  coetcd [flags] member list|add NAME --peer-urls URLS [--learner]|remove ID|update ID --peer-urls URLS|promote ID
  coetcd [flags] endpoint status|health|hashkv [--cluster]
  coetcd [flags] alarm list|disarm
  coetcd [flags] defrag [--cluster]
  coetcd [flags] snapshot save FILE
  coetcd [flags] move-leader ID

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
member, endpoint, alarm, defrag, snapshot, move-leader
           Operate the cluster as the etcdctl commands of the same names do, with the same
           output (-w json for member list, endpoint status|health|hashkv and alarm list).
           endpoint and defrag ask each of --endpoints, or with --cluster each member's client
           URL. snapshot save streams the first endpoint's database to FILE, checked against
           its SHA-256. IDs are hexadecimal, as member list prints them. endpoint health exits
           1 when a member is unhealthy.

Flags (before or after the command; each also read from COETCD_<FLAG>, e.g. COETCD_ENDPOINTS):
)";

// The longest --timeout and --dial-timeout: 31 years, whose milliseconds and nanoseconds fit in
// 64 bits on every clock the tool adds them to.
constexpr double max_seconds = 1e9;

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

}  // namespace

[[noreturn]] void die(int code, const std::string& msg) {
  std::fprintf(stderr, "coetcd: %s\n", msg.c_str());
  std::exit(code);
}

namespace {
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

// What a refused flag says. Boost 1.81's what() puts the words into its message until none of
// its %tokens% is left, so a word or COETCD_* value holding the token it stands for
// ("--timeout %value%") never ends; then the message names the flag alone.
std::string flag_error(const po::error& e, const std::vector<std::string>& words) {
  const auto percent = [](std::string_view s) { return s.find('%') != std::string_view::npos; };
  bool tokens = std::any_of(words.begin(), words.end(), percent);
  for (char** env = environ; !tokens && *env; ++env)
    tokens = std::string_view(*env).starts_with("COETCD_") && percent(*env);
  if (!tokens) return e.what();
  if (const auto* named = dynamic_cast<const po::error_with_option_name*>(&e))
    return "the flag '" + named->get_option_name() + "' or its value is not right";
  return "the flags are not right";
}

}  // namespace

cli parse_args(const std::vector<std::string>& argv) {
  cli c;
  // Everything after the first "--" is the command to run under the lock, verbatim.
  std::vector<std::string> words;
  for (std::size_t i = 0; i < argv.size(); ++i) {
    if (argv[i] == "--") {
      c.exec.assign(argv.begin() + static_cast<std::ptrdiff_t>(i) + 1, argv.end());
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
      ("write-out,w", po::value(&c.write_out), "member, endpoint, alarm: simple (default) or json")
      ("peer-urls", po::value(&c.peer_urls), "member add/update: comma-separated peer URLs")
      ("learner", po::bool_switch(&c.learner), "member add: add a learner")
      ("cluster", po::bool_switch(&c.whole_cluster), "endpoint, defrag: every member, from the member list")
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
    throw usage_error{usage, flag_error(e, words) + " (see coetcd --help)"};
  }
  if (vm.count("help") || words.empty()) {
    std::ostringstream text;
    text << help_text << flags << exit_codes_text;
    throw usage_error{vm.count("help") ? ok : usage, text.str(), true};
  }
  auto w = vm.count("words") ? vm["words"].as<std::vector<std::string>>() : std::vector<std::string>{};
  if (w.empty()) throw usage_error{usage, "no command (see coetcd --help)"};
  c.command = w.front();
  c.args.assign(w.begin() + 1, w.end());
  auto want = [&](std::size_t n, const char* shape) {
    if (c.args.size() != n) throw usage_error{usage, "usage: coetcd " + c.command + " " + shape};
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
      throw usage_error{usage, "sem: PERMITS must be a whole number, not '" + c.args[1] + "'"};
    }
    if (c.permits < 1) throw usage_error{usage, "sem: PERMITS must be at least 1"};
    if (c.count < 1 || c.count > c.permits) throw usage_error{usage, "sem: --count must be between 1 and PERMITS"};
  } else if (locks) want(1, "NAME [-- COMMAND ARGS...]");
  else if (c.command == "elect") c.listen ? want(1, "--listen NAME") : want(2, "NAME PROPOSAL");
  else if (c.command == "get" || c.command == "del" || c.command == "watch") want(1, "KEY [--prefix]");
  else if (c.command == "put") want(2, "KEY VALUE");
  else if (is_cluster_command(c.command)) check_cluster_command(c);
  else
    throw usage_error{usage, "unknown command '" + c.command +
                                 "' (lock, rlock, wlock, sem, elect, get, put, del, watch, member, endpoint, alarm, "
                                 "defrag, snapshot, move-leader)"};
  if (!c.exec.empty() && !locks) throw usage_error{usage, "only lock, rlock, wlock and sem run a command after --"};
  if (c.status && (c.command != "lock" || !c.exec.empty() || c.try_only || c.timeout > 0))
    throw usage_error{usage, "--status goes with lock NAME alone (no command, --try or --timeout)"};
  if (c.json && !c.status) throw usage_error{usage, "--json goes with lock --status"};
  if (c.ttl < 1) throw usage_error{usage, "--ttl must be at least 1 second"};
  // Bounded (not nan, not inf): each becomes a count of milliseconds and a deadline on a clock.
  if (!(c.timeout >= 0 && c.timeout <= max_seconds) || !(c.dial_timeout > 0 && c.dial_timeout <= max_seconds))
    throw usage_error{usage, "--timeout and --dial-timeout must be positive, at most 1e9 seconds"};
  if (c.try_only && c.timeout > 0) throw usage_error{usage, "--try and --timeout exclude each other"};
  if (!c.cert.empty() != !c.key.empty()) throw usage_error{usage, "--cert and --key go together"};
  if (std::all_of(c.endpoints.begin(), c.endpoints.end(), [](char ch) { return ch == ','; }))
    throw usage_error{usage, "--endpoints is empty"};
  return c;
}

cli parse(int argc, char** argv) {
  try {
    return parse_args(std::vector<std::string>(argv + std::min(argc, 1), argv + argc));
  } catch (const usage_error& e) {
    if (!e.help) die(e.code, e.message);
    std::cout << e.message;
    std::exit(e.code);
  }
}

coetcd::client_options client_options_for(const cli& c) {
  coetcd::client_options o;
  o.endpoints.clear();
  std::stringstream ss(c.endpoints);
  for (std::string e; std::getline(ss, e, ',');)
    if (!e.empty()) o.endpoints.push_back(e);
  if (o.endpoints.empty()) die(usage, "--endpoints is empty");
  // Rounded up: any positive --dial-timeout is a deadline the client takes (it refuses 0 ms).
  o.request_timeout = std::chrono::milliseconds(static_cast<long>(std::ceil(c.dial_timeout * 1000)));
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


}  // namespace coetcd_cli
