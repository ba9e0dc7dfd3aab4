// The fuzz targets' inputs replayed without libFuzzer, in every build: each seed of fuzz/corpus and
// each input a fuzzer once failed on (fuzz/regressions) through the target's own entry function,
// and the failures found so far as plain cases. No server.
#define BOOST_TEST_MODULE coetcd_fuzz_regressions
#include <boost/test/unit_test.hpp>

#include "cli.hpp"
#include "core/lock_view.hpp"
#include "recipes/item_queue.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>

namespace coetcd_fuzz {
void naming(std::string_view in);
void lock_keys(std::string_view in);
void lock_status(std::string_view in);
void queue_key(std::string_view in);
void cli(std::string_view in);
}  // namespace coetcd_fuzz

using namespace coetcd;

namespace {

// Runs `entry` on every file of fuzz/corpus/<name> and fuzz/regressions/<name>; how many ran.
int replay(const std::string& name, void (*entry)(std::string_view)) {
  int ran = 0;
  for (const char* kind : {"corpus", "regressions"}) {
    const auto dir = std::filesystem::path(COETCD_FUZZ_DIR) / kind / name;
    if (!std::filesystem::is_directory(dir)) continue;
    for (const auto& file : std::filesystem::directory_iterator(dir)) {
      std::ifstream in(file.path(), std::ios::binary);
      const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      try {
        entry(bytes);
      } catch (const std::exception& e) {
        BOOST_ERROR(file.path().string() << ": " << e.what());
      }
      ++ran;
    }
  }
  return ran;
}

constexpr auto max64 = std::numeric_limits<std::int64_t>::max();

key_value kv(std::string key, std::string value) {
  key_value out;
  out.key = std::move(key);
  out.value = std::move(value);
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_saved_input_keeps_each_targets_invariants) {
  BOOST_TEST(replay("naming", coetcd_fuzz::naming) > 0);
  BOOST_TEST(replay("lock_keys", coetcd_fuzz::lock_keys) > 0);
  BOOST_TEST(replay("lock_status", coetcd_fuzz::lock_status) > 0);
  BOOST_TEST(replay("queue_key", coetcd_fuzz::queue_key) > 0);
  BOOST_TEST(replay("cli", coetcd_fuzz::cli) > 0);
}

// fuzz_lock_keys: a count of 19 digits was no count at all, so a semaphore of 10^18 permits or
// more took its own keys for foreign ones.
BOOST_AUTO_TEST_CASE(a_semaphore_reads_its_own_counts_up_to_the_largest_int64) {
  const std::string prefix = "n/";  // the tally keeps a reference
  detail::permit_tally tally(prefix);
  tally.add(kv("n/1a_1", "1/" + std::to_string(max64)));
  bool holds = false;
  BOOST_TEST(tally.turn(max64, holds) == error_code{});
  BOOST_TEST(holds);
}

// Ten keys of 18-digit counts added past 64 bits: a wrapped (negative) sum let the waiter behind
// them hold with every permit taken.
BOOST_AUTO_TEST_CASE(counts_that_add_up_past_64_bits_never_fit) {
  const std::string big = "999999999999999999";
  const std::string prefix = "n/";
  detail::permit_tally tally(prefix);
  for (int i = 0; i < 10; ++i) tally.add(kv("n/1a_" + std::to_string(i), big + "/" + big));
  bool holds = true;
  BOOST_TEST(tally.turn(std::stoll(big), holds) == error_code{});
  BOOST_TEST(!holds);
  BOOST_TEST(tally.used() == max64);
}

// priority_queue read the last key of a priority with atoll() + 1: the largest int64 overflowed,
// and a segment with no number started the sequence again at 1, over the item there.
BOOST_AUTO_TEST_CASE(the_next_priority_sequence_is_read_as_go_reads_it) {
  BOOST_TEST((detail::next_sequence("jobs/00003/0000000000000007") == 8));
  BOOST_TEST((detail::next_sequence("jobs/00003/+5abc") == 6));
  BOOST_TEST((detail::next_sequence("jobs/00003/-000000000000004") == -3));
  BOOST_TEST((detail::next_sequence("jobs/00003/9223372036854775806") == max64));
  BOOST_TEST(!detail::next_sequence("jobs/00003/9223372036854775807"));
  BOOST_TEST(!detail::next_sequence("jobs/00003/99999999999999999999"));
  BOOST_TEST(!detail::next_sequence("jobs/00003/x"));
  BOOST_TEST(!detail::next_sequence("jobs/00003/"));
}

// fuzz_cli: Boost's message for a refused flag looped for ever on a value holding its own
// placeholder; a nan or huge timeout passed the checks and overflowed the milliseconds.
BOOST_AUTO_TEST_CASE(a_refused_flag_is_told_about_whatever_its_value) {
  auto refused = [](std::vector<std::string> argv) {
    try {
      coetcd_cli::parse_args(argv);
    } catch (const coetcd_cli::usage_error& e) {
      return e.code == coetcd_cli::usage && !e.help;
    }
    return false;
  };
  BOOST_TEST(refused({"lock", "x", "--timeout", "%value%"}));
  BOOST_TEST(refused({"get", "k", "--%canonical_option%"}));
  ::setenv("COETCD_TTL", "%value%", 1);
  BOOST_TEST(refused({"lock", "x"}));
  ::unsetenv("COETCD_TTL");
  BOOST_TEST(refused({"--dial-timeout", "nan", "get", "k"}));
  BOOST_TEST(refused({"--dial-timeout", "1e300", "get", "k"}));
  BOOST_TEST(refused({"lock", "x", "--timeout", "inf"}));
  BOOST_TEST(!refused({"--timeout", "1e9", "lock", "x"}));
  const auto c = coetcd_cli::parse_args({"--dial-timeout", "0.0001", "get", "k"});
  BOOST_TEST(coetcd_cli::client_options_for(c).request_timeout.count() == 1);
}
