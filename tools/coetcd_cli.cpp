// coetcd: the command-line face of the library. `coetcd lock NAME -- CMD` runs a command under a
// distributed lock (compatible with `etcdctl lock`), `coetcd elect` campaigns or listens, and
// get/put/del/watch poke at a cluster; member, endpoint, alarm, defrag, snapshot and move-leader
// operate it (cli_cluster.cpp). Run `coetcd --help` for flags and exit codes.
#include "cli.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <signal.h>
#include <sys/wait.h>
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
using namespace asio::experimental::awaitable_operators;
using asio::use_awaitable;
using boost::system::error_code;

namespace {
using namespace coetcd_cli;

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
  /// fail(), after closing the open session (give_up).
  asio::awaitable<void> fail_closing(int code, const std::string& what, error_code ec) {
    auto msg = args.command + ": " + what + ": " + ec.message();
    co_await give_up(code, std::move(msg));
  }

  asio::awaitable<coetcd::session> open_session() {
    auto [ec, s] = co_await coetcd::session::async_create(
        client, coetcd::session_options{.ttl = std::chrono::seconds(args.ttl)}, as_result);
    if (ec) fail(failed, "cannot create a session", ec);
    co_return std::move(s);
  }

  // What the lock commands take: a mutex, one side of a read-write lock, or a semaphore's
  // --count permits. Each hands back its own hold.
  struct mutex_side {
    coetcd::mutex& m;
    using hold_type = coetcd::mutex::hold;
    template <class T>
    auto lock(T&& t) { return m.async_lock(std::forward<T>(t)); }
    template <class T>
    auto try_lock(T&& t) { return m.async_try_lock(std::forward<T>(t)); }
    const std::string& key() const { return m.key(); }
    static std::int64_t token(hold_type& h) { return h.fencing_token(); }
  };
  template <bool Shared>
  struct rw_side {
    coetcd::rw_mutex& m;
    using hold_type = std::conditional_t<Shared, coetcd::rw_mutex::shared_hold, coetcd::rw_mutex::hold>;
    template <class T>
    auto lock(T&& t) {
      if constexpr (Shared) return m.async_lock_shared(std::forward<T>(t));
      else return m.async_lock(std::forward<T>(t));
    }
    template <class T>
    auto try_lock(T&& t) {
      if constexpr (Shared) return m.async_try_lock_shared(std::forward<T>(t));
      else return m.async_try_lock(std::forward<T>(t));
    }
    const std::string& key() const { return Shared ? m.read_key() : m.write_key(); }
    static std::int64_t token(hold_type& h) { return h.fencing_token(); }
  };
  // It has no single key or fencing token.
  struct sem_side {
    coetcd::semaphore& m;
    std::int64_t n;
    std::string shown = m.name() + " " + std::to_string(n) + "/" + std::to_string(m.permits());
    using hold_type = coetcd::semaphore::hold;
    template <class T>
    auto lock(T&& t) { return m.async_acquire(n, std::forward<T>(t)); }
    template <class T>
    auto try_lock(T&& t) { return m.async_try_acquire(n, std::forward<T>(t)); }
    const std::string& key() const { return shown; }
    static std::int64_t token(hold_type&) { return 0; }
  };

  // Waits for the lock, honouring --try, --timeout and SIGINT/SIGTERM (which abandon the wait;
  // our waiting key is deleted before we exit).
  template <class Lock>
  asio::awaitable<typename Lock::hold_type> acquire(Lock& m) {
    const auto& name = args.args[0];
    const auto& cmd = args.command;
    // Every exit closes the session first: a key of ours whose clean-up is still on its way (a
    // semaphore that found the permits differ, say) goes with the lease instead of staying until
    // the lease expires and blocking the name meanwhile.
    if (args.try_only) {
      auto [ec, h] = co_await m.try_lock(as_result);
      if (ec == coetcd::error::locked) {
        auto msg = cmd + ": '" + name + "' is held by another session" + (cmd == "sem" ? " (no permits free)" : "");
        co_await give_up(held, std::move(msg));
      }
      if (ec) {
        auto what = "cannot lock '" + name + "'";
        co_await fail_closing(failed, what, ec);
      }
      co_return std::move(h);
    }
    asio::steady_timer limit(ioc);
    if (args.timeout > 0) limit.expires_after(std::chrono::milliseconds(static_cast<long>(args.timeout * 1000)));
    else limit.expires_at(asio::steady_timer::time_point::max());
    auto r = co_await (m.lock(as_result) || limit.async_wait(as_result) || wait_stop_signal());
    if (r.index() == 1)
      co_await give_up(timed_out, cmd + ": gave up waiting for '" + name + "' after " + std::to_string(args.timeout) + " s");
    if (r.index() == 2) co_await give_up(130, cmd + ": interrupted while waiting for '" + name + "'");
    auto [ec, h] = std::get<0>(std::move(r));
    if (ec) {
      auto what = "cannot lock '" + name + "'";
      co_await fail_closing(failed, what, ec);
    }
    co_return std::move(h);
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
           json_string(lease_hex(e.lease)) + ",\"ttl\":" + std::to_string(e.ttl.count()) + ",\"granted_ttl\":" +
           std::to_string(e.granted_ttl.count()) + ",\"create_revision\":" + std::to_string(e.create_revision) +
           (e.other_name.empty() ? "" : ",\"other_name\":" + json_string(e.other_name)) + "}";
  }
  static std::string entry_text(const coetcd::lock_entry& e) {
    std::string t = e.key + "  lease " + lease_hex(e.lease) + "  ttl " +
                    (e.lease == 0 ? std::string("none") : e.ttl.count() < 0 ? std::string("expired")
                                                        : std::to_string(e.ttl.count()) + "/" + std::to_string(e.granted_ttl.count()) + " s") +
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
      std::fprintf(stderr,
                   "coetcd: warning: keys of lock '%s' are under '%s/': Go's and etcdctl's locks of '%s' wait "
                   "for them (coetcd's do not)\n",
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
      mutex_side side{m};
      co_await hold(side);
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
    auto h = co_await acquire(m);
    std::printf("%s\n", m.key().c_str());
    std::fflush(stdout);
    if (args.exec.empty()) {
      auto r = co_await (wait_stop_signal() || h.async_wait_lost(as_result));
      if (r.index() == 1) die(lost, args.command + ": lost '" + m.key() + "': " + loss_text(std::get<1>(r)));
    } else {
      exit = co_await run_locked(m, h);
      if (exit == lost) co_return;  // the lease is gone; nothing to release
    }
    auto [uec] = co_await h.async_release(as_result);
    if (uec && exit == ok) {
      auto what = "cannot release '" + m.key() + "'";
      co_await fail_closing(failed, what, uec);
    }
  }

  // Runs the command with the lock's key and fencing token in its environment and waits for it,
  // forwarding SIGINT/SIGTERM; if the lock is lost first, stops it and reports the loss.
  // A loss wait's outcome: why the hold was lost, or why the wait ended.
  static std::string loss_text(const std::tuple<error_code, coetcd::loss_reason>& r) {
    const auto& [ec, why] = r;
    return (ec ? ec : why.cause).message();
  }

  template <class Lock>
  asio::awaitable<int> run_locked(Lock& m, typename Lock::hold_type& h) {
    asio::signal_set child_exit(ioc, SIGCHLD);  // before fork, so the exit cannot be missed
    std::vector<char*> argv;
    for (auto& a : args.exec) argv.push_back(a.data());
    argv.push_back(nullptr);
    auto rev = std::to_string(Lock::token(h));
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
      auto r = co_await (reap() || h.async_wait_lost(as_result) || wait_stop_signal());
      if (r.index() == 0) co_return std::get<0>(r);
      if (exit_code) co_return *exit_code;
      if (r.index() == 2) {
        ::kill(pid, std::get<2>(r));  // pass the user's signal on, keep waiting for the command
        continue;
      }
      std::fprintf(stderr, "coetcd: %s: lost '%s' (%s) while '%s' ran; sending it SIGTERM\n", args.command.c_str(),
                   m.key().c_str(), loss_text(std::get<1>(r)).c_str(), args.exec[0].c_str());
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
    auto [ec, lead] = std::get<0>(std::move(r));
    if (ec) fail(failed, "cannot campaign for '" + name + "'", ec);
    std::printf("%s\n%s\n", lead.key().c_str(), args.args[1].c_str());
    std::fflush(stdout);
    auto lost_or_stop = co_await (wait_stop_signal() || lead.async_wait_lost(as_result));
    if (lost_or_stop.index() == 1) die(lost, "elect: lost leadership of '" + name + "'");
    auto [rec] = co_await lead.async_release(as_result);
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
    else if (is_cluster_command(args.command)) exit = co_await run_cluster_command(args, client);
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
