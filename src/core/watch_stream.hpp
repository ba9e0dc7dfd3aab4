// ONE gRPC Watch stream per client, multiplexing every watcher by client-assigned watch id.
#pragma once

#include "bidi_stream.hpp"

#include <deque>
#include <map>

namespace coetcd::detail {

class watch_stream;

struct watcher_state {
  std::shared_ptr<watch_stream> stream;
  std::int64_t id = 0;
  pb::WatchCreateRequest request;  // as asked; re-creations start from next_rev instead
  std::int64_t next_rev = 0;       // first revision not yet delivered (0: not known yet)
  bool done = false;               // no further batches; final_ec says why
  bool confirmed = false;          // the server has confirmed a creation once
  int auth_refusals = 0;           // creates refused for an expired token since the last success
  error_code final_ec;
  std::int64_t compact_revision = 0;
  std::deque<watch_batch> ready;   // delivered by the server, not yet taken by async_next
  std::vector<watch_event> partial;  // events of a fragmented response so far
  std::optional<handler<watch_batch>> next_waiter;
  asio::any_io_executor next_work;
  std::uint64_t wait_seq = 0;
  std::optional<handler<watcher>> create_waiter;
  asio::any_io_executor create_work;
};

class watch_stream final : public std::enable_shared_from_this<watch_stream> {
 public:
  explicit watch_stream(std::shared_ptr<client_impl> c);

  // All on the strand.
  void add(std::shared_ptr<watcher_state> w, handler<watcher> h, std::shared_ptr<early_cancel> cancel);
  void next(const std::shared_ptr<watcher_state>& w, handler<watch_batch> h, std::shared_ptr<early_cancel> cancel);
  void cancel(const std::shared_ptr<watcher_state>& w);
  void close();

  client_impl& client() noexcept { return *client_; }

 private:
  using stream_type = bidi_stream<pb::WatchRequest, pb::WatchResponse>;

  void open();
  void on_ready();
  void on_message(const pb::WatchResponse& r);
  void on_closed(error_code ec);
  void schedule_reopen();
  void send_create(watcher_state& w);
  void deliver(watcher_state& w, watch_batch b);
  void end(watcher_state& w, error_code ec, std::int64_t compact_revision);
  void end_all(error_code ec);
  void count_watchers() {
    client_->telemetry_.watchers.store(static_cast<std::int64_t>(watchers_.size()), std::memory_order_relaxed);
  }

  std::shared_ptr<client_impl> client_;
  std::map<std::int64_t, std::shared_ptr<watcher_state>> watchers_;
  std::shared_ptr<stream_type> stream_;
  std::deque<std::int64_t> pending_creates_;  // ids whose create the current stream has not answered
  std::int64_t next_id_ = 1;
  asio::steady_timer reopen_timer_;
  reopen_backoff backoff_;
  bool opening_ = false;
  bool reopen_scheduled_ = false;
  bool closed_ = false;
  std::optional<error_code> ended_by_;  // why the last stream ended, until the next one is up
};

}  // namespace coetcd::detail
