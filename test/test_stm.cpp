// coetcd::stm and coetcd::counter against a real etcd. stm: the cases of etcd's own STM integration tests
// (tests/integration/v3_stm_test.go), each isolation level, and what no Go test covers: a bound on
// runs, a commit whose outcome is unknown, bad input, the completion-token form.
#define BOOST_TEST_MODULE coetcd_stm
#include "support/fixture.hpp"

#include <coetcd/counter.hpp>
#include <coetcd/stm.hpp>

#include <future>
#include <set>
#include <random>

using namespace coetcd;
using namespace coetcd::test;
using namespace std::chrono_literals;

BOOST_TEST_GLOBAL_FIXTURE(shared_etcd);

namespace {

asio::awaitable<std::string> value_of(client& c, std::string key) {
  auto r = co_await c.async_get(key, use_awaitable);
  co_return r.kvs.empty() ? std::string("<none>") : r.kvs.front().value;
}

int as_int(const std::optional<std::string>& v) { return v ? std::stoi(*v) : 0; }

// RPCs of `method` ("Txn", "Range") the client has sent so far.
std::uint64_t sent(client& c, const char* method) {
  auto st = c.stats();
  auto it = st.rpcs.find(method);
  return it == st.rpcs.end() ? 0 : it->second.sent;
}

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
    const auto ranges_before = sent(c, "Range");
    co_await stm(c, std::move(body), {.prefetch = keys});
    BOOST_TEST(tries == 2);
    BOOST_TEST_REQUIRE(second_run.size() == 2u);
    BOOST_TEST((second_run[0] == std::optional<std::string>("2")));
    BOOST_TEST(!second_run[1].has_value());
    BOOST_TEST(co_await value_of(c, "/stm/pf/y") == "20");
    BOOST_TEST(sent(c, "Range") == ranges_before + 1, "a run read from etcd instead of the prefetch (one Range: value_of)");
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

// ---- commit groups ----

// 50 runs of one client incrementing one key at once: each sees the one before, so none is
// lost, and the group's txns are far fewer than the runs.
BOOST_AUTO_TEST_CASE(a_commit_group_carries_many_runs_in_one_txn) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    const std::string key = "/stm/group/n";
    co_await c.async_delete(key, use_awaitable);
    const auto before = sent(c, "Txn");
    int done = 0, failed = 0;
    std::set<int> seen;
    auto ex = co_await asio::this_coro::executor;
    for (int i = 0; i < 50; ++i) {
      auto incr = [&key, &seen](stm_tx& tx) -> asio::awaitable<int> {
        int n = as_int(co_await tx.get(key)) + 1;
        tx.put(key, std::to_string(n));
        co_return n;
      };
      asio::co_spawn(ex, stm(c, std::move(incr)), [&](std::exception_ptr e, int n) {
        if (e) ++failed;
        else seen.insert(n);
        ++done;
      });
    }
    BOOST_TEST_REQUIRE(co_await eventually([&] { return done == 50; }, 20s));
    BOOST_TEST(failed == 0);
    BOOST_TEST(seen.size() == 50u, "two runs committed the same value");
    BOOST_TEST(co_await value_of(c, key) == "50");
    BOOST_TEST(sent(c, "Txn") - before <= 10u, "50 runs took " << sent(c, "Txn") - before << " txns");
  }(c));
}

// A body that throws in a group writes nothing; the bodies around it commit.
BOOST_AUTO_TEST_CASE(a_throwing_body_leaves_its_group_without_its_writes) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    int done = 0, thrown = 0;
    auto ex = co_await asio::this_coro::executor;
    for (int i = 0; i < 6; ++i) {
      auto body = [i](stm_tx& tx) -> asio::awaitable<void> {
        co_await tx.get("/stm/throwing/read");
        tx.put("/stm/throwing/" + std::to_string(i), "v");
        if (i % 2) throw std::runtime_error("odd");
      };
      asio::co_spawn(ex, stm(c, std::move(body)), [&](std::exception_ptr e) {
        if (e) ++thrown;
        ++done;
      });
    }
    BOOST_TEST_REQUIRE(co_await eventually([&] { return done == 6; }, 20s));
    BOOST_TEST(thrown == 3);
    for (int i = 0; i < 6; ++i)
      BOOST_TEST(co_await value_of(c, "/stm/throwing/" + std::to_string(i)) == (i % 2 ? "<none>" : "v"), i);
  }(c));
}

// A body that holds its turn (it sleeps, or calls stm() itself) does not stall the client's other
// runs past the overtime: a run started meanwhile commits alone, and a nested stm() completes.
BOOST_AUTO_TEST_CASE(a_slow_or_nested_body_does_not_stall_the_group) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto ex = co_await asio::this_coro::executor;
    std::optional<std::chrono::steady_clock::time_point> slow_done, quick_done;
    auto slow = [&c](stm_tx& tx) -> asio::awaitable<void> {
      tx.put("/stm/slow/outer", "1");
      // A nested run on the same client: it waits for the outer's turn, then goes alone.
      auto inner = [](stm_tx& t) -> asio::awaitable<void> {
        t.put("/stm/slow/inner", "1");
        co_return;
      };
      co_await stm(c, std::move(inner));
      co_await sleep_for(400ms);
    };
    asio::co_spawn(ex, stm(c, std::move(slow)), [&](std::exception_ptr e) {
      BOOST_TEST(!e);
      slow_done = std::chrono::steady_clock::now();
    });
    co_await sleep_for(20ms);
    auto quick = [](stm_tx& tx) -> asio::awaitable<void> {
      tx.put("/stm/slow/quick", "1");
      co_return;
    };
    asio::co_spawn(ex, stm(c, std::move(quick)), [&](std::exception_ptr e) {
      BOOST_TEST(!e);
      quick_done = std::chrono::steady_clock::now();
    });
    BOOST_TEST_REQUIRE(co_await eventually([&] { return slow_done && quick_done; }, 10s));
    BOOST_TEST((*quick_done < *slow_done), "the quick run waited for the slow body");
    for (const char* k : {"/stm/slow/outer", "/stm/slow/inner", "/stm/slow/quick"}) BOOST_TEST(co_await value_of(c, k) == "1", k);
  }(c));
}

// Go's create-if-absent idiom, run by many callers of one client at once: a body that asks the
// mod revision of a key an earlier body of its group wrote leaves and runs in the next group,
// so exactly one caller creates the key.
BOOST_AUTO_TEST_CASE(create_if_absent_in_one_group_creates_once) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    const std::string key = "/stm/create-once";
    co_await c.async_delete(key, use_awaitable);
    int done = 0, created = 0;
    auto ex = co_await asio::this_coro::executor;
    for (int i = 0; i < 20; ++i) {
      auto create = [&key, i](stm_tx& tx) -> asio::awaitable<bool> {
        if (co_await tx.mod_revision(key) != 0) co_return false;
        tx.put(key, std::to_string(i));
        co_return true;
      };
      asio::co_spawn(ex, stm(c, std::move(create)), [&](std::exception_ptr e, bool made) {
        BOOST_TEST(!e);
        created += made;
        ++done;
      });
    }
    BOOST_TEST_REQUIRE(co_await eventually([&] { return done == 20; }, 20s));
    BOOST_TEST(created == 1, created << " callers created the key");
    auto r = co_await c.async_get(key, use_awaitable);
    BOOST_TEST_REQUIRE(r.kvs.size() == 1u);
    BOOST_TEST(r.kvs.front().version == 1);
  }(c));
}

// A group refused for what one member brought (a put under a revoked lease): the others run
// again alone and commit; that member gets its own error.
BOOST_AUTO_TEST_CASE(one_members_error_does_not_fail_its_group) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto lease = co_await c.async_lease_grant(60, use_awaitable);
    co_await c.async_lease_revoke(lease.id, use_awaitable);
    int done = 0;
    std::vector<error_code> results(4);
    auto ex = co_await asio::this_coro::executor;
    for (int i = 0; i < 4; ++i) {
      auto body = [i, dead = lease.id](stm_tx& tx) -> asio::awaitable<void> {
        co_await tx.get("/stm/members/read");
        tx.put("/stm/members/" + std::to_string(i), "v", i == 2 ? dead : 0);
      };
      asio::co_spawn(ex, stm(c, std::move(body)), [&, i](std::exception_ptr e) {
        try {
          if (e) std::rethrow_exception(e);
        } catch (const boost::system::system_error& se) {
          results[i] = se.code();
        }
        ++done;
      });
    }
    BOOST_TEST_REQUIRE(co_await eventually([&] { return done == 4; }, 20s));
    for (int i = 0; i < 4; ++i) {
      if (i == 2) {
        BOOST_TEST(results[i] == error::lease_not_found, results[i].message());
        BOOST_TEST(co_await value_of(c, "/stm/members/2") == "<none>");
      } else {
        BOOST_TEST(!results[i], i << ": " << results[i].message());
        BOOST_TEST(co_await value_of(c, "/stm/members/" + std::to_string(i)) == "v", i);
      }
    }
  }(c));
}

// A run cancelled while it waits for its turn stops with operation_aborted and writes nothing;
// the group goes on (a run after it commits).
BOOST_AUTO_TEST_CASE(a_run_cancelled_while_waiting_writes_nothing_and_the_group_goes_on) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    auto ex = co_await asio::this_coro::executor;
    bool slow_done = false;
    auto slow = [](stm_tx& tx) -> asio::awaitable<void> {
      tx.put("/stm/cancel/slow", "1");
      co_await sleep_for(60ms);
    };
    asio::co_spawn(ex, stm(c, std::move(slow)), [&](std::exception_ptr e) {
      BOOST_TEST(!e);
      slow_done = true;
    });
    co_await sleep_for(10ms);
    asio::cancellation_signal stop;
    std::optional<error_code> cancelled;
    auto waiting = [](stm_tx& tx) -> asio::awaitable<void> {
      tx.put("/stm/cancel/waiting", "1");
      co_return;
    };
    asio::co_spawn(ex, stm(c, std::move(waiting)), asio::bind_cancellation_slot(stop.slot(), [&](std::exception_ptr e) {
      cancelled = error_code();
      try {
        if (e) std::rethrow_exception(e);
      } catch (const boost::system::system_error& se) {
        cancelled = se.code();
      }
    }));
    co_await sleep_for(10ms);
    stop.emit(asio::cancellation_type::terminal);
    BOOST_TEST_REQUIRE(co_await eventually([&] { return slow_done && cancelled.has_value(); }, 10s));
    BOOST_TEST(*cancelled == asio::error::operation_aborted, cancelled->message());
    BOOST_TEST(co_await value_of(c, "/stm/cancel/waiting") == "<none>");
    auto after = [](stm_tx& tx) -> asio::awaitable<void> {
      tx.put("/stm/cancel/after", "1");
      co_return;
    };
    co_await stm(c, std::move(after));
    BOOST_TEST(co_await value_of(c, "/stm/cancel/after") == "1");
    BOOST_TEST(co_await value_of(c, "/stm/cancel/slow") == "1");
  }(c));
}

// ---- coetcd::counter ----

// 3 clients, 60 coroutines (some sharing a counter object, some with their own) add 1 ten times
// each: the value ends at 600 and every add saw a value of its own. Alone, an add is one txn.
BOOST_AUTO_TEST_CASE(counter_adds_from_many_clients_lose_nothing) {
  asio::io_context ioc;
  std::vector<std::unique_ptr<client>> clients;
  for (int i = 0; i < 3; ++i) clients.push_back(std::make_unique<client>(ioc, options_for(server())));
  run_for(ioc, [](std::vector<std::unique_ptr<client>>& cs) -> asio::awaitable<void> {
    const std::string key = "/counter/many";
    co_await cs[0]->async_delete(key, use_awaitable);
    counter shared0(*cs[0], key), shared1(*cs[1], key);
    std::vector<std::unique_ptr<counter>> own;
    std::set<std::int64_t> seen;
    int done = 0, failed = 0;
    auto ex = co_await asio::this_coro::executor;
    for (int w = 0; w < 60; ++w) {
      counter* ctr = w % 3 == 0 ? &shared0 : w % 3 == 1 ? &shared1 : own.emplace_back(std::make_unique<counter>(*cs[2], key)).get();
      asio::co_spawn(
          ex,
          [](counter& ctr, std::set<std::int64_t>& seen) -> asio::awaitable<void> {
            for (int i = 0; i < 10; ++i) seen.insert(co_await ctr.async_add(1, use_awaitable));
          }(*ctr, seen),
          [&](std::exception_ptr e) {
            if (e) ++failed;
            ++done;
          });
    }
    BOOST_TEST_REQUIRE(co_await eventually([&] { return done == 60; }, 60s));
    BOOST_TEST(failed == 0);
    BOOST_TEST(seen.size() == 600u);
    BOOST_TEST(co_await shared0.async_get(use_awaitable) == 600);
    BOOST_TEST(co_await value_of(*cs[0], key) == "600");

    // 50 adds at once through one object: they go in a few txns, each add with its own value.
    const auto batch_before = sent(*cs[0], "Txn");
    int batch_done = 0;
    std::set<std::int64_t> batch_seen;
    for (int i = 0; i < 50; ++i)
      shared0.async_add(1, [&](error_code ec, std::int64_t v) {
        BOOST_TEST(!ec, ec.message());
        batch_seen.insert(v);
        ++batch_done;
      });
    BOOST_TEST_REQUIRE(co_await eventually([&] { return batch_done == 50; }, 20s));
    BOOST_TEST(batch_seen.size() == 50u);
    BOOST_TEST(*batch_seen.rbegin() == 650);
    BOOST_TEST(sent(*cs[0], "Txn") - batch_before <= 10u);

    // Alone and warmed up, each add is one txn.
    counter alone(*cs[1], key);
    co_await alone.async_get(use_awaitable);
    const auto before = sent(*cs[1], "Txn");
    for (int i = 0; i < 10; ++i) co_await alone.async_add(5, use_awaitable);
    BOOST_TEST(sent(*cs[1], "Txn") - before == 10u);
    BOOST_TEST(co_await alone.async_get(use_awaitable) == 700);
  }(clients));
}

// compare_and_set on a missing key (0), on a stale hint (another client changed it: the else
// branch reads it, no extra round trip), and a swap that holds.
BOOST_AUTO_TEST_CASE(counter_compare_and_set) {
  asio::io_context ioc;
  client c(ioc, options_for(server())), other(ioc, options_for(server()));
  run_for(ioc, [](client& c, client& other) -> asio::awaitable<void> {
    const std::string key = "/counter/cas";
    co_await c.async_delete(key, use_awaitable);
    counter ctr(c, key);
    auto [swapped, found] = co_await ctr.async_compare_and_set(0, 5, use_awaitable);
    BOOST_TEST(swapped);
    BOOST_TEST(found == 0);
    std::tie(swapped, found) = co_await ctr.async_compare_and_set(0, 7, use_awaitable);
    BOOST_TEST(!swapped);
    BOOST_TEST(found == 5);
    co_await other.async_put(key, "9", use_awaitable);
    std::tie(swapped, found) = co_await ctr.async_compare_and_set(5, 1, use_awaitable);
    BOOST_TEST(!swapped, "swapped on a stale hint");
    BOOST_TEST(found == 9);
    const auto before = sent(c, "Txn");
    std::tie(swapped, found) = co_await ctr.async_compare_and_set(9, 1, use_awaitable);
    BOOST_TEST(swapped);
    BOOST_TEST(sent(c, "Txn") - before == 1u);
    BOOST_TEST(co_await value_of(c, key) == "1");
  }(c, other));
}

// A key that holds no number: not_a_number, nothing written; a sum past INT64_MAX:
// invalid_argument; an empty key: empty_key; parse() takes exactly what the counter writes.
BOOST_AUTO_TEST_CASE(counter_bad_values_and_input) {
  BOOST_TEST((counter::parse("-5") == std::optional<std::int64_t>(-5)));
  BOOST_TEST((counter::parse("9223372036854775807") == std::optional<std::int64_t>(INT64_MAX)));
  for (const char* bad : {"", "+1", "1a", " 1", "9223372036854775808", "abc"})
    BOOST_TEST(!counter::parse(bad).has_value(), bad);
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    co_await c.async_put("/counter/text", "abc", use_awaitable);
    counter text(c, "/counter/text");
    auto [ec, v] = co_await text.async_add(1, asio::as_tuple(use_awaitable));
    BOOST_TEST(ec == error::not_a_number, ec.message());
    std::tie(ec, v) = co_await text.async_get(asio::as_tuple(use_awaitable));
    BOOST_TEST(ec == error::not_a_number, ec.message());
    BOOST_TEST(co_await value_of(c, "/counter/text") == "abc");

    co_await c.async_put("/counter/max", std::to_string(INT64_MAX), use_awaitable);
    counter full(c, "/counter/max");
    std::tie(ec, v) = co_await full.async_add(1, asio::as_tuple(use_awaitable));
    BOOST_TEST(ec == error::invalid_argument, ec.message());
    BOOST_TEST(co_await value_of(c, "/counter/max") == std::to_string(INT64_MAX));

    counter nameless(c, "");
    std::tie(ec, v) = co_await nameless.async_add(1, asio::as_tuple(use_awaitable));
    BOOST_TEST(ec == error::empty_key, ec.message());
  }(c));
}

// An add whose txn goes out to a server that stops answering: outcome_unknown, not sent again;
// once the server is back the next add reads the key first and goes on from the true value.
BOOST_AUTO_TEST_CASE(counter_add_without_an_answer_is_unknown_then_recovers) {
  etcd_process etcd;
  asio::io_context ioc;
  auto o = options_for(etcd);
  o.request_timeout = 1s;
  client c(ioc, o);
  run_for(ioc, [](client& c, etcd_process& etcd) -> asio::awaitable<void> {
    counter ctr(c, "/counter/unknown");
    BOOST_TEST(co_await ctr.async_add(1, use_awaitable) == 1);
    const auto before = sent(c, "Txn");
    etcd.pause();
    auto [ec, v] = co_await ctr.async_add(1, asio::as_tuple(use_awaitable));
    etcd.resume();
    BOOST_TEST(ec == error::outcome_unknown, ec.message());
    BOOST_TEST(sent(c, "Txn") - before == 1u, "the add was sent again");
    // The unknown add may still be applied after the server resumes (it was on the wire, and a
    // read now can come before it): the next add is 2 or 3, and the counter says what the key holds.
    const auto after = co_await ctr.async_add(1, use_awaitable);
    BOOST_TEST((after == 2 || after == 3), after);
    BOOST_TEST(co_await value_of(c, "/counter/unknown") == std::to_string(after));
  }(c, etcd));
}

// async_watch sees each add's value.
BOOST_AUTO_TEST_CASE(counter_watch_sees_each_value) {
  asio::io_context ioc;
  client c(ioc, options_for(server()));
  run_for(ioc, [](client& c) -> asio::awaitable<void> {
    const std::string key = "/counter/watched";
    co_await c.async_delete(key, use_awaitable);
    counter ctr(c, key);
    auto w = co_await ctr.async_watch(use_awaitable);
    co_await ctr.async_add(2, use_awaitable);
    co_await ctr.async_add(3, use_awaitable);
    std::vector<std::int64_t> values;
    while (values.size() < 2) {
      auto batch = co_await w.async_next(use_awaitable);
      for (auto& e : batch.events) values.push_back(counter::parse(e.kv.value).value_or(-1));
    }
    BOOST_TEST((values == std::vector<std::int64_t>{2, 5}));
  }(c));
}
