// coetcd::stm against a real etcd: the cases of etcd's own STM integration tests
// (tests/integration/v3_stm_test.go), each isolation level, and what no Go test covers: a bound on
// runs, a commit whose outcome is unknown, bad input, the completion-token form (commit groups:
// test_stm_groups.cpp).
#define BOOST_TEST_MODULE coetcd_stm
#include "support/fixture.hpp"

#include <coetcd/stm.hpp>

#include <future>
#include <set>
#include <random>

using namespace coetcd;
using namespace coetcd::test;
using namespace std::chrono_literals;

BOOST_TEST_GLOBAL_FIXTURE(shared_etcd);

namespace {

int as_int(const std::optional<std::string>& v) { return v ? std::stoi(*v) : 0; }

const isolation every_level[] = {isolation::serializable_snapshot, isolation::serializable,
                                 isolation::repeatable_reads, isolation::read_committed};

const char* name_of(isolation l) {
  switch (l) {
    case isolation::serializable_snapshot: return "serializable_snapshot";
    case isolation::serializable: return "serializable";
    case isolation::repeatable_reads: return "repeatable_reads";
    case isolation::read_committed: return "read_committed";
  }
  return "?";
}

}  // namespace

// TestSTMConflict: five accounts of 100; five workers on two clients move random amounts between
// random pairs at once; the total stays 500. Each level but read committed (which promises
// nothing here), in commit groups and alone.
BOOST_AUTO_TEST_CASE(conflict_keeps_the_total_of_concurrent_transfers) {
  for (bool grouped : {true, false})
  for (auto level : {isolation::serializable_snapshot, isolation::serializable, isolation::repeatable_reads}) {
    BOOST_TEST_CONTEXT(name_of(level) << (grouped ? ", commit groups" : ", alone")) {
      asio::io_context ioc;
      std::vector<std::unique_ptr<client>> clients;
      for (int i = 0; i < 5; ++i) clients.push_back(std::make_unique<client>(ioc, options_for(server())));
      const std::string prefix = std::string("/stm/conflict/") + name_of(level) + (grouped ? "g/" : "a/");
      int runs = 0;
      run_for(ioc, [](std::vector<std::unique_ptr<client>>& cs, std::string prefix, isolation level,
                      int& runs, bool grouped) -> asio::awaitable<void> {
        for (int i = 0; i < 5; ++i) co_await cs[0]->async_put(prefix + std::to_string(i), "100", use_awaitable);
        int done = 0;
        auto ex = co_await asio::this_coro::executor;
        for (int w = 0; w < 5; ++w) {
          asio::co_spawn(
              ex,
              [](client& c, std::string prefix, isolation level, int seed, int& runs, bool grouped) -> asio::awaitable<void> {
                std::mt19937 rng(seed);
                for (int round = 0; round < 4; ++round) {
                  const int from = rng() % 5, to = (from + 1 + rng() % 4) % 5, amount = 1 + rng() % 10;
                  auto transfer = [&, from, to, amount](stm_tx& tx) -> asio::awaitable<void> {
                    ++runs;
                    auto a = prefix + std::to_string(from), b = prefix + std::to_string(to);
                    int have = as_int(co_await tx.get(a)), other = as_int(co_await tx.get(b));
                    co_await sleep_for(std::chrono::milliseconds(rng() % 5));  // widen the window
                    tx.put(a, std::to_string(have - amount));
                    tx.put(b, std::to_string(other + amount));
                  };
                  co_await stm(c, std::move(transfer), {.level = level, .group_commit = grouped});
                }
              }(*cs[w % 2], prefix, level, w + 1, runs, grouped),
              [&done](std::exception_ptr e) {
                if (e) {
                  try {
                    std::rethrow_exception(e);
                  } catch (const std::exception& x) {
                    BOOST_TEST(false, "a transfer failed: " << x.what());
                  }
                }
                ++done;
              });
        }
        BOOST_TEST_REQUIRE(co_await eventually([&] { return done == 5; }, 60s));
        int total = 0;
        for (int i = 0; i < 5; ++i) total += std::stoi(co_await value_of(*cs[0], prefix + std::to_string(i)));
        BOOST_TEST(total == 500);
      }(clients, prefix, level, runs, grouped));
    }
  }
}

// TestSTMPutNewKey: a put of a key nobody wrote commits.
BOOST_AUTO_TEST_CASE(put_new_key) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    for (auto level : every_level) {
      const std::string key = std::string("/stm/new/") + name_of(level);
      auto body = [key](stm_tx& tx) -> asio::awaitable<void> {
        tx.put(key, "bar");
        co_return;
      };
      co_await stm(c, std::move(body), {.level = level});
      BOOST_TEST(co_await value_of(c, key) == "bar", name_of(level));
    }
  }(c));
}

// TestSTMAbort: a body that fails after a put writes nothing; its exception comes out of stm.
BOOST_AUTO_TEST_CASE(abort_writes_nothing) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    for (auto level : every_level) {
      const std::string key = std::string("/stm/abort/") + name_of(level);
      auto body = [key](stm_tx& tx) -> asio::awaitable<void> {
        tx.put(key, "baz");
        throw std::runtime_error("abort");
        co_return;
      };
      bool thrown = false;
      try {
        co_await stm(c, std::move(body), {.level = level});
      } catch (const std::runtime_error& e) {
        thrown = std::string(e.what()) == "abort";
      }
      BOOST_TEST(thrown, name_of(level));
      BOOST_TEST(co_await value_of(c, key) == "<none>", name_of(level));
    }
  }(c));
}

// TestSTMSerialize: a writer sets five keys to one value in each of its txns; a reader at a
// serializable level never sees two of them differ, though the writer commits between its reads.
BOOST_AUTO_TEST_CASE(serialize_sees_no_interleaving) {
  // Read committed is the control: the same reads do see the writer's commits between them.
  for (auto level : {isolation::serializable_snapshot, isolation::serializable, isolation::read_committed}) {
    asio::io_context ioc;
    client writer_c(ioc, options_for(server())), reader_c(ioc, options_for(server()));
    run_for(ioc, [](client& wc, client& rc, isolation level) -> asio::awaitable<void> {
      const std::string prefix = std::string("/stm/serialize/") + name_of(level) + "/";
      bool stop = false;
      int writes = 0;
      auto ex = co_await asio::this_coro::executor;
      asio::co_spawn(
          ex,
          [](client& c, std::string prefix, bool& stop, int& writes) -> asio::awaitable<void> {
            for (int v = 0; !stop; ++v) {
              txn t;
              for (int i = 0; i < 5; ++i) t.then(txn_op::put(prefix + std::to_string(i), std::to_string(v)));
              co_await c.async_txn(t, use_awaitable);
              ++writes;
              co_await sleep_for(2ms);
            }
          }(wc, prefix, stop, writes),
          asio::detached);
      int torn = 0, runs = 0;
      for (int round = 0; round < 30; ++round) {
        auto body = [&prefix, &torn, &runs](stm_tx& tx) -> asio::awaitable<void> {
          ++runs;
          std::set<std::string> seen;
          for (int i = 0; i < 5; ++i) {
            seen.insert((co_await tx.get(prefix + std::to_string(i))).value_or("none"));
            if (tx.attempt() == 1) co_await sleep_for(1ms);  // the writer commits between the reads
          }
          if (seen.size() > 1) ++torn;
        };
        co_await stm(rc, std::move(body), {.level = level, .max_attempts = 1000});
      }
      stop = true;
      if (level == isolation::read_committed)
        BOOST_TEST(torn > 0, "the reads never straddled a write: the check above proves nothing");
      else
        BOOST_TEST(torn == 0, name_of(level) << ": " << torn << " of " << runs << " runs saw keys of different writes");
      BOOST_TEST(writes > 10, "the writer barely ran: " << writes);
      co_await sleep_for(50ms);
    }(writer_c, reader_c, level));
  }
}

// TestSTMApplyOnConcurrentDeletion: a key read by the first run is deleted before its commit;
// the run conflicts, the second commits.
BOOST_AUTO_TEST_CASE(apply_on_concurrent_deletion) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    co_await c.async_put("/stm/del/foo", "bar", use_awaitable);
    int tries = 0;
    auto body = [&c, &tries](stm_tx& tx) -> asio::awaitable<void> {
      ++tries;
      co_await tx.get("/stm/del/foo");
      if (tries == 1) co_await c.async_delete("/stm/del/foo", use_awaitable);
      tx.put("/stm/del/foo2", "bar2");
    };
    co_await stm(c, std::move(body), {.level = isolation::repeatable_reads});
    BOOST_TEST(tries == 2);
    BOOST_TEST(co_await value_of(c, "/stm/del/foo2") == "bar2");
  }(c));
}

// TestSTMSerializableSnapshotPut: a key read that is older than the key written does not make
// the second transaction conflict with the first.
BOOST_AUTO_TEST_CASE(serializable_snapshot_put) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    co_await c.async_put("/stm/ssp/a", "0", use_awaitable);
    int tries = 0;
    for (int i = 0; i < 2; ++i) {
      auto body = [&tries](stm_tx& tx) -> asio::awaitable<void> {
        ++tries;
        co_await tx.get("/stm/ssp/a");
        tx.put("/stm/ssp/b", "1");
      };
      co_await stm(c, std::move(body), {.level = isolation::serializable_snapshot});
    }
    BOOST_TEST(tries == 2);
    auto r = co_await c.async_get("/stm/ssp/b", use_awaitable);
    BOOST_TEST_REQUIRE(r.kvs.size() == 1u);
    BOOST_TEST(r.kvs.front().version == 2);
  }(c));
}

// Under serializable_snapshot a key written (not read) that another writer changed after the
// snapshot conflicts; under serializable it does not (Go's difference between the two).
BOOST_AUTO_TEST_CASE(a_blind_write_conflicts_under_serializable_snapshot_only) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    for (auto level : {isolation::serializable_snapshot, isolation::serializable}) {
      co_await c.async_put("/stm/blind/read", "r", use_awaitable);
      int tries = 0;
      auto body = [&c, &tries](stm_tx& tx) -> asio::awaitable<void> {
        ++tries;
        co_await tx.get("/stm/blind/read");
        if (tries == 1) co_await c.async_put("/stm/blind/written", "other", use_awaitable);
        tx.put("/stm/blind/written", "mine");
      };
      co_await stm(c, std::move(body), {.level = level});
      BOOST_TEST(tries == (level == isolation::serializable_snapshot ? 2 : 1), name_of(level));
      BOOST_TEST(co_await value_of(c, "/stm/blind/written") == "mine");
    }
  }(c));
}

// A conflict refetches what was read in the failed txn itself: the second run's reads cost no
// request (one txn per run, reads only in the first), and prefetch reads before the first run.
BOOST_AUTO_TEST_CASE(a_retry_reads_what_the_failed_commit_fetched) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    co_await c.async_put("/stm/pf/x", "1", use_awaitable);
    const std::vector<std::string> keys = {"/stm/pf/x", "/stm/pf/y"};
    int tries = 0;
    std::vector<std::optional<std::string>> second_run;
    auto body = [&c, &tries, &second_run](stm_tx& tx) -> asio::awaitable<void> {
      ++tries;
      auto x = co_await tx.get("/stm/pf/x");
      auto y = co_await tx.get("/stm/pf/y");
      if (tries == 1) co_await c.async_put("/stm/pf/x", "2", use_awaitable);
      else second_run = {x, y};
      tx.put("/stm/pf/y", std::to_string(as_int(x) * 10));
    };
    const auto ranges_before = rpcs_sent(c, "Range");
    co_await stm(c, std::move(body), {.prefetch = keys});
    BOOST_TEST(tries == 2);
    BOOST_TEST_REQUIRE(second_run.size() == 2u);
    BOOST_TEST((second_run[0] == std::optional<std::string>("2")));
    BOOST_TEST(!second_run[1].has_value());
    BOOST_TEST(co_await value_of(c, "/stm/pf/y") == "20");
    BOOST_TEST(rpcs_sent(c, "Range") == ranges_before + 1, "a run read from etcd instead of the prefetch (one Range: value_of)");
  }(c));
}

// More conflicts than max_attempts: error::conflict, after exactly that many runs.
BOOST_AUTO_TEST_CASE(runs_are_bounded_then_conflict) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    int tries = 0;
    auto body = [&c, &tries](stm_tx& tx) -> asio::awaitable<void> {
      ++tries;
      co_await tx.get("/stm/bound/k");
      co_await c.async_put("/stm/bound/k", std::to_string(tries), use_awaitable);  // always changed
      tx.put("/stm/bound/out", "never");
    };
    error_code why;
    try {
      co_await stm(c, std::move(body), {.max_attempts = 3});
    } catch (const boost::system::system_error& e) {
      why = e.code();
    }
    BOOST_TEST(why == error::conflict, why.message());
    BOOST_TEST(tries == 3);
    BOOST_TEST(co_await value_of(c, "/stm/bound/out") == "<none>");
  }(c));
}

// Bad input: an empty key at a read, put or delete, an empty prefetch key, max_attempts 0, each
// a clear error, nothing written.
BOOST_AUTO_TEST_CASE(bad_input_is_named) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto expect = [&c](auto body, stm_options o, error_code want) -> asio::awaitable<void> {
      error_code got;
      try {
        co_await stm(c, std::move(body), o);
      } catch (const boost::system::system_error& e) {
        got = e.code();
      }
      BOOST_TEST(got == want, got.message());
    };
    auto read_empty = [](stm_tx& tx) -> asio::awaitable<void> { co_await tx.get(""); };
    co_await expect(read_empty, {}, error::empty_key);
    auto put_empty = [](stm_tx& tx) -> asio::awaitable<void> {
      tx.put("/stm/bad/k", "v");
      tx.put("", "v");
      co_return;
    };
    co_await expect(put_empty, {}, error::empty_key);
    auto del_empty = [](stm_tx& tx) -> asio::awaitable<void> {
      tx.del("");
      co_return;
    };
    co_await expect(del_empty, {}, error::empty_key);
    auto fine = [](stm_tx& tx) -> asio::awaitable<void> {
      tx.put("/stm/bad/k", "v");
      co_return;
    };
    const std::vector<std::string> bad_prefetch = {""};
    co_await expect(fine, {.prefetch = bad_prefetch}, error::empty_key);
    co_await expect(fine, {.max_attempts = 0}, error::invalid_argument);
    BOOST_TEST(co_await value_of(c, "/stm/bad/k") == "<none>");
  }(c));
}

// A commit that goes out to a server that stops answering: error::outcome_unknown, and the body is
// not run again (a blind retry could apply it twice).
BOOST_AUTO_TEST_CASE(a_commit_without_an_answer_is_reported_unknown_not_retried) {
  etcd_process etcd;
  asio::io_context ioc;
  auto o = options_for(etcd);
  o.request_timeout = 1s;
  client c(ioc, o);
  run_for(ioc, [](client& c, etcd_process& etcd) -> asio::awaitable<void> {
    co_await c.async_put("/stm/unknown/n", "1", use_awaitable);
    int tries = 0;
    auto body = [&tries, &etcd](stm_tx& tx) -> asio::awaitable<int> {
      ++tries;
      int n = as_int(co_await tx.get("/stm/unknown/n"));
      tx.put("/stm/unknown/n", std::to_string(n + 1));
      etcd.pause();  // the commit goes out and nothing answers
      co_return n + 1;
    };
    error_code why;
    std::string what;
    try {
      co_await stm(c, std::move(body), {});
    } catch (const boost::system::system_error& e) {
      why = e.code();
      what = e.what();
    }
    etcd.resume();
    BOOST_TEST(why == error::outcome_unknown, why.message());
    BOOST_TEST(what.find("coetcd::stm") != std::string::npos, what);
    BOOST_TEST(tries == 1);
    auto v = co_await value_of(c, "/stm/unknown/n");
    BOOST_TEST((v == "1" || v == "2"), v);
  }(c, etcd));
}

// The completion-token form from code that is no coroutine: a callback gets the value, a future
// rethrows the body's exception.
BOOST_AUTO_TEST_CASE(stm_takes_a_completion_token) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  auto guard = asio::make_work_guard(ioc);
  std::thread loop([&] { ioc.run(); });
  std::promise<std::pair<std::exception_ptr, int>> called;
  auto incr = [](stm_tx& tx) -> asio::awaitable<int> {
    int n = as_int(co_await tx.get("/stm/token/n")) + 1;
    tx.put("/stm/token/n", std::to_string(n));
    co_return n;
  };
  stm(c, incr, {}, [&called](std::exception_ptr e, int n) { called.set_value({e, n}); });
  auto f = called.get_future();
  BOOST_TEST_REQUIRE((f.wait_for(10s) == std::future_status::ready));
  auto [e, n] = f.get();
  BOOST_TEST(!e);
  BOOST_TEST(n == 1);
  auto failing = [](stm_tx& tx) -> asio::awaitable<void> {
    tx.put("/stm/token/n", "100");
    throw std::logic_error("no");
    co_return;
  };
  auto thrown = stm(c, failing, {}, asio::use_future);
  BOOST_TEST_REQUIRE((thrown.wait_for(10s) == std::future_status::ready));
  BOOST_CHECK_THROW(thrown.get(), std::logic_error);
  BOOST_TEST(c.async_get("/stm/token/n", asio::use_future).get().kvs.front().value == "1");
  c.close();
  guard.reset();
  loop.join();
}
