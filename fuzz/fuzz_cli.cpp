// Fuzz target: the coetcd tool's command line (parse_args, client_options_for), words cut at NULs.
#include "fuzz_check.hpp"

#include "cli.hpp"

#include <cmath>
#include <cstdlib>

namespace coetcd_fuzz {

// The input is argv after the program's name, each word ended by a NUL (the last one by the end).
void cli(std::string_view in) {
  // A --user without a password would prompt on the terminal.
  ::setenv("COETCD_PASSWORD", "fuzz", 0);
  std::vector<std::string> argv;
  if (!in.empty())
    for (auto word : split(in, '\0')) argv.emplace_back(word);
  coetcd_cli::cli c;
  try {
    c = coetcd_cli::parse_args(argv);
  } catch (const coetcd_cli::usage_error& e) {
    // Refused with a reason, or help: nothing else escapes, and nothing exits.
    FUZZ_CHECK(!e.message.empty());
    FUZZ_CHECK(e.help ? (e.code == coetcd_cli::ok || e.code == coetcd_cli::usage) : e.code == coetcd_cli::usage);
    return;
  }
  // What parse_args takes, the commands can run with.
  const bool locks = c.command == "lock" || c.command == "rlock" || c.command == "wlock" || c.command == "sem";
  FUZZ_CHECK(!c.command.empty());
  FUZZ_CHECK(c.exec.empty() || locks);
  if (c.command == "sem") FUZZ_CHECK(c.args.size() == 2 && c.permits >= 1 && c.count >= 1 && c.count <= c.permits);
  FUZZ_CHECK(c.ttl >= 1);
  FUZZ_CHECK(std::isfinite(c.timeout) && c.timeout >= 0 && !(c.try_only && c.timeout > 0));
  FUZZ_CHECK(std::isfinite(c.dial_timeout) && c.dial_timeout > 0);
  FUZZ_CHECK(c.cert.empty() == c.key.empty());
  const auto o = coetcd_cli::client_options_for(c);
  FUZZ_CHECK(!o.endpoints.empty() && o.request_timeout.count() > 0);
  for (const auto& e : o.endpoints) FUZZ_CHECK(!e.empty() && e.find(',') == std::string::npos);
  if (c.user.find(':') != std::string::npos) FUZZ_CHECK(o.user + ":" + o.password == c.user);
}

}  // namespace coetcd_fuzz

COETCD_FUZZ_ENTRY(cli)
