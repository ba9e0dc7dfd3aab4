// A work queue: three workers start together behind a double barrier, take jobs from a queue
// (each job to exactly one of them) and urgent ones first from a priority queue, then leave
// together. The jobs are in the layout of Go's contrib/recipes: Go workers could share them.
//   work_queue [ENDPOINT]
#include <coetcd.hpp>
#include <coetcd/double_barrier.hpp>
#include <coetcd/priority_queue.hpp>
#include <coetcd/queue.hpp>

#include <boost/asio.hpp>

#include <iostream>
#include <map>

namespace asio = boost::asio;
using asio::use_awaitable;

asio::awaitable<void> worker(coetcd::session& s, int id, int jobs, std::map<std::string, int>& done_by) {
  coetcd::double_barrier start(s, "work/start", 3);
  co_await start.async_enter(use_awaitable);  // all three in
  coetcd::priority_queue urgent(s, "work/urgent");
  coetcd::queue jobs_queue(s, "work/jobs");
  auto first = co_await urgent.async_dequeue(use_awaitable);
  std::cout << "worker " << id << " took urgent " << first << "\n";
  for (int i = 0; i < jobs; ++i) {
    auto job = co_await jobs_queue.async_dequeue(use_awaitable);
    done_by[job] = id;
  }
  co_await start.async_leave(use_awaitable);  // all three out
}

asio::awaitable<void> run(coetcd::client& etcd) {
  auto ex = co_await asio::this_coro::executor;
  auto s = co_await coetcd::session::async_create(etcd, use_awaitable);
  coetcd::queue jobs(s, "work/jobs");
  for (int i = 0; i < 30; ++i) co_await jobs.async_enqueue("job-" + std::to_string(i), use_awaitable);
  coetcd::priority_queue urgent(s, "work/urgent");
  co_await urgent.async_enqueue("disk-full", 0, use_awaitable);
  co_await urgent.async_enqueue("rotate-logs", 5, use_awaitable);
  co_await urgent.async_enqueue("cert-expiry", 1, use_awaitable);

  std::map<std::string, int> done_by;
  int finished = 0;
  // Three workers, each with its own session, as three processes would have.
  std::vector<coetcd::session> sessions;
  for (int i = 0; i < 3; ++i) sessions.push_back(co_await coetcd::session::async_create(etcd, use_awaitable));
  for (int i = 0; i < 3; ++i)
    asio::co_spawn(ex, worker(sessions[i], i + 1, 10, done_by), [&](std::exception_ptr e) {
      if (e) std::rethrow_exception(e);
      ++finished;
    });
  asio::steady_timer t(ex);
  while (finished < 3) {
    t.expires_after(std::chrono::milliseconds(10));
    co_await t.async_wait(use_awaitable);
  }
  std::cout << "30 jobs done, each once: " << (done_by.size() == 30 ? "yes" : "no") << "\n";
  co_await etcd.async_delete("__work/urgent/", coetcd::delete_options{.prefix = true}, use_awaitable);
}

int main(int argc, char** argv) {
  asio::io_context ioc;
  coetcd::client etcd(ioc, {.endpoints = {argc > 1 ? argv[1] : "127.0.0.1:2379"}});
  int status = 0;
  asio::co_spawn(ioc, run(etcd), [&](std::exception_ptr e) {
    if (e) {
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& x) {
        std::cerr << "error: " << x.what() << "\n";
      }
      status = 1;
    }
    etcd.close();
  });
  ioc.run();
  return status;
}
