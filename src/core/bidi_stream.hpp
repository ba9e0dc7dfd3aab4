// One gRPC bidirectional stream driven on the client's strand: start, a read loop, a write queue
// with at most one write outstanding (gRPC allows no more), and Finish only once no read or write
// is outstanding. The owner is told through callbacks and decides whether to open a new stream.
#pragma once

#include "client_impl.hpp"

#include <algorithm>
#include <deque>

namespace coetcd::detail {

template <class Req, class Resp>
class bidi_stream final : public std::enable_shared_from_this<bidi_stream<Req, Resp>> {
 public:
  using rw_type = grpc::ClientAsyncReaderWriter<Req, Resp>;
  using prepare_fn = std::function<std::unique_ptr<rw_type>(grpc::ClientContext*, grpc::CompletionQueue*)>;
  struct callbacks {
    std::function<void()> ready;               ///< the stream is up: send (or re-send) state
    std::function<void(const Resp&)> message;  ///< one response
    std::function<void(error_code)> closed;    ///< the stream is over, with its status
  };

  bidi_stream(std::shared_ptr<client_impl> c, callbacks cb)
      : client_(std::move(c)), cb_(std::move(cb)), start_tag_(client_->strand_), read_tag_(client_->strand_),
        write_tag_(client_->strand_), finish_tag_(client_->strand_) {}

  /// On strand. The caller made sure the client is open and holds a token if auth is on.
  void start(const prepare_fn& prepare) {
    ctx_ = client_->make_context(std::nullopt);
    token_ = client_->token();
    rw_ = prepare(ctx_.get(), &client_->cq_);
    bump(client_->telemetry_.stream(kind).opened);
    starting_ = true;
    rw_->StartCall(start_tag_.arm([self = this->shared_from_this()](bool ok) { self->on_started(ok); }));
  }

  void write(Req r) {
    if (broken_) return;
    outbox_.push_back(std::move(r));
    flush();
  }

  /// Ends the stream from our side; `closed` follows once gRPC has given back every tag.
  void cancel() {
    if (ctx_) ctx_->TryCancel();
  }

  bool ready() const noexcept { return ready_; }
  /// The auth token the stream was opened with.
  const std::string& token() const noexcept { return token_; }

 private:
  static constexpr stream_kind kind =
      std::is_same_v<Req, pb::WatchRequest> ? stream_kind::watch : stream_kind::keepalive;

  void on_started(bool ok) {
    starting_ = false;
    if (!ok) return broken();
    client_->note_outcome(ctx_.get(), {});
    ready_ = true;
    read();
    if (cb_.ready) cb_.ready();
    flush();
  }

  void read() {
    if (client_->closed()) return broken();
    reading_ = true;
    rw_->Read(&in_, read_tag_.arm([self = this->shared_from_this()](bool ok) { self->on_read(ok); }));
  }

  void on_read(bool ok) {
    reading_ = false;
    if (!ok) return broken();
    if (cb_.message) cb_.message(in_);
    // A write failed while this read was on the wire: the stream is over even though the read
    // succeeded, and it must still be finished, or its owner never hears that it ended.
    if (broken_) return try_finish();
    read();
  }

  void flush() {
    if (!ready_ || writing_ || broken_ || outbox_.empty() || client_->closed()) return;
    out_ = std::move(outbox_.front());
    outbox_.pop_front();
    writing_ = true;
    rw_->Write(out_, write_tag_.arm([self = this->shared_from_this()](bool ok) { self->on_written(ok); }));
  }

  void on_written(bool ok) {
    writing_ = false;
    if (!ok) return broken();
    if (broken_) return try_finish();
    flush();
  }

  void broken() {
    broken_ = true;
    ready_ = false;
    outbox_.clear();
    try_finish();
  }

  void try_finish() {
    if (finishing_ || starting_ || reading_ || writing_) return;
    finishing_ = true;
    if (client_->closed()) return report(error::client_closed);
    rw_->Finish(&status_, finish_tag_.arm([self = this->shared_from_this()](bool) {
      error_code ec = self->status_.ok() ? error_code(grpc::StatusCode::UNAVAILABLE, grpc_category())
                                         : self->client_->map_status(self->status_);
      if (self->client_->closed()) ec = error::client_closed;
      else self->client_->note_outcome(self->ctx_.get(), ec);
      self->report(ec);
    }));
  }

  void report(error_code ec) {
    auto closed = std::move(cb_.closed);
    cb_ = {};
    if (closed) closed(ec);
  }

  std::shared_ptr<client_impl> client_;
  callbacks cb_;
  strand_tag start_tag_, read_tag_, write_tag_, finish_tag_;
  std::unique_ptr<grpc::ClientContext> ctx_;
  std::unique_ptr<rw_type> rw_;
  std::string token_;
  Resp in_;
  Req out_;
  std::deque<Req> outbox_;
  grpc::Status status_;
  bool starting_ = false, ready_ = false, reading_ = false, writing_ = false, broken_ = false, finishing_ = false;
};

/// Delay before reopening a stream that failed: 100 ms doubling to 2 s, reset by a good message.
class reopen_backoff {
 public:
  std::chrono::milliseconds next() {
    auto d = std::chrono::milliseconds(100) * (1 << std::min(failures_, 5));
    ++failures_;
    return std::min<std::chrono::milliseconds>(d, std::chrono::seconds(2));
  }
  void reset() noexcept { failures_ = 0; }

 private:
  int failures_ = 0;
};

/// Errors after which reopening a stream cannot help.
inline bool is_fatal_stream_error(error_code ec) {
  return ec == error::client_closed || ec == error::auth_failed || ec == error::auth_required ||
         ec == error::auth_not_enabled ||
         ec == error::permission_denied;
}

}  // namespace coetcd::detail
