// The coetcd command line's shared parts: the parsed command line, exit codes, and the entry
// points of the files that run each group of commands.
#pragma once

#include <coetcd.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace coetcd_cli {

namespace asio = boost::asio;
using asio::use_awaitable;
using boost::system::error_code;

inline constexpr auto as_result = asio::as_tuple(use_awaitable);

enum exit_code : int {
  ok = 0,
  failed = 1,        // etcd, connection, TLS or auth error
  usage = 2,         // bad command line
  held = 3,          // --try found the lock held
  timed_out = 4,     // --timeout passed while waiting
  lost = 5,          // the session (lock or leadership) was lost
};

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
  std::string write_out = "simple";  // cluster commands: simple or json, as etcdctl's -w
  std::string peer_urls;             // member add/update
  bool learner = false;              // member add
  bool whole_cluster = false;        // endpoint, defrag: every member's client URL (--cluster)
};

/// Prints "coetcd: MSG" on stderr and exits with `code`.
[[noreturn]] void die(int code, const std::string& msg);
/// What parse_args throws for a command line that is not right (`usage`), or for --help or no
/// command (`help`: the help text, exiting `ok` for --help and `usage` for nothing).
struct usage_error {
  int code = usage;
  std::string message;
  bool help = false;
};
/// The command line after the program's name (and the COETCD_* variables), checked; throws
/// usage_error. Reads no file and no terminal, exits nothing.
cli parse_args(const std::vector<std::string>& argv);
/// parse_args(argv[1...]); prints a usage_error (help on stdout, else "coetcd: ..." on stderr)
/// and exits with its code.
cli parse(int argc, char** argv);
/// The client's options from the flags; exits with `usage` when they are not right.
coetcd::client_options client_options_for(const cli& c);

/// Whether `command` is one of the cluster commands (member, endpoint, alarm, defrag, snapshot,
/// move-leader), which cli_cluster.cpp checks and runs.
bool is_cluster_command(const std::string& command);
/// Checks a cluster command's arguments; throws usage_error when they are not right.
void check_cluster_command(const cli& c);
/// Runs a cluster command; returns the exit code.
asio::awaitable<int> run_cluster_command(const cli& c, coetcd::client& client);

}  // namespace coetcd_cli
