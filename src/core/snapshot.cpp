// The Maintenance service's snapshot stream, saved to a file and checked against the SHA-256
// the member appends after the data.
#include "client_impl.hpp"
#include "convert.hpp"
#include "sha256.hpp"

#include <coetcd/maintenance.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace coetcd::detail {
namespace {

class snapshot_reader final : public call_base, public std::enable_shared_from_this<snapshot_reader> {
 public:
  snapshot_reader(std::shared_ptr<client_impl> c, std::string path, std::string endpoint, snapshot_progress progress,
                  handler<snapshot_result> h)
      : client_(std::move(c)), path_(std::move(path)), part_(path_ + ".part"), endpoint_(std::move(endpoint)),
        progress_(std::move(progress)), h_(std::move(h)),
        start_tag_(client_->strand_), read_tag_(client_->strand_), finish_tag_(client_->strand_),
        first_timer_(client_->strand_) {}

  ~snapshot_reader() {
    if (fd_ >= 0) ::close(fd_);
  }

  void start() {
    auto slot = asio::get_associated_cancellation_slot(h_);
    if (slot.is_connected()) {
      // Only reads: every cancellation type is honoured, and the part file goes.
      slot.assign([w = weak_from_this(), s = client_->strand_](asio::cancellation_type) {
        asio::dispatch(s, [w] {
          if (auto self = w.lock()) self->user_cancel();
        });
      });
    }
    asio::dispatch(client_->strand_, [self = shared_from_this()] { self->begin(); });
  }

  void cancel_rpc() override {
    if (ctx_) ctx_->TryCancel();
  }

 private:
  void begin() {
    if (client_->closed()) return finish(error::client_closed);
    if (user_cancelled_) return finish(asio::error::operation_aborted);
    std::shared_ptr<grpc::Channel> ch = client_->channel_;
    if (!endpoint_.empty()) {
      try {
        ch = client_->member_channel(endpoint_);
      } catch (const boost::system::system_error& e) {
        return finish(e.code());
      }
    }
    // As Go's snapshot.Save: private to its owner, synced before it takes its name.
    fd_ = ::open(part_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd_ < 0) return finish(file_error());
    opened_ = true;
    stub_ = pb::Maintenance::NewStub(ch);
    authenticate_then_send();
  }

  void authenticate_then_send() {
    if (!client_->uses_auth()) return send();
    client_->with_token([self = shared_from_this()](error_code ec) {
      if (self->finished_) return;
      if (ec) return self->finish(ec);
      self->send();
    });
  }

  void send() {
    if (client_->closed()) return finish(error::client_closed);
    // No deadline: a large database takes as long as it takes. A member that has no leader
    // still has its data.
    reader_.reset();  // before its context: the reader lives in the call the context releases
    ctx_ = client_->make_context(std::nullopt, false);
    sent_token_ = client_->token();
    reader_ = stub_->PrepareAsyncSnapshot(ctx_.get(), pb::SnapshotRequest{}, &client_->cq_);
    bump(client_->telemetry_.rpc(rpc_kind::snapshot).sent);
    client_->track(this);
    on_wire_ = true;
    // The data may take long; the first answer may not: a member that cannot be reached (the
    // context waits for a connection) fails after the request timeout, as any call does.
    first_timer_.expires_after(client_->options_.request_timeout);
    first_timer_.async_wait([self = shared_from_this()](error_code ec) {
      if (ec || self->got_header_ || !self->on_wire_) return;
      self->first_timed_out_ = true;
      self->ctx_->TryCancel();
    });
    reader_->StartCall(start_tag_.arm([self = shared_from_this()](bool ok) { ok ? self->read() : self->end_stream(); }));
  }

  void read() {
    if (client_->closed()) return abandon();
    reader_->Read(&resp_, read_tag_.arm([self = shared_from_this()](bool ok) { ok ? self->on_chunk() : self->end_stream(); }));
  }

  void on_chunk() {
    if (!got_header_) {
      got_header_ = true;
      first_timer_.cancel();
      header_ = from_pb(resp_.header());
    }
    tail_ += resp_.blob();
    received_ += resp_.blob().size();
    // The last 32 bytes received may be the hash: everything before them is data.
    if (tail_.size() > 32) {
      const std::string_view data(tail_.data(), tail_.size() - 32);
      hash_.update(data);
      if (!write_failed_ && !write_all(data)) {
        write_failed_ = true;
        write_error_ = errno ? errno : EIO;
        ctx_->TryCancel();
      }
      tail_.erase(0, data.size());
    }
    if (progress_) progress_(received_, received_ + resp_.remaining_bytes());
    read();
  }

  void end_stream() {
    if (client_->closed()) return abandon();
    reader_->Finish(&status_, finish_tag_.arm([self = shared_from_this()](bool) { self->on_finished(); }));
  }

  void on_finished() {
    on_wire_ = false;
    first_timer_.cancel();
    client_->untrack(this);
    if (user_cancelled_) return finish(asio::error::operation_aborted);
    if (client_->closed()) return finish(error::client_closed);
    if (write_failed_) return finish(error_code(write_error_, boost::system::generic_category()));
    if (first_timed_out_)
      return finish(client_->channel_->GetState(false) == GRPC_CHANNEL_READY && endpoint_.empty()
                        ? error::request_timeout
                        : error::endpoints_unreachable);
    if (!status_.ok()) {
      auto ec = client_->map_status(status_);
      // A token refused before any data came: authenticate anew and ask once more, as a unary
      // call does.
      if (ec == error::invalid_auth_token && received_ == 0 && client_->uses_auth() && !auth_retried_) {
        auth_retried_ = true;
        client_->invalidate_token(sent_token_);
        return authenticate_then_send();
      }
      return finish(ec);
    }
    // The hash goes into the file too: `snapshot restore` checks it.
    if (!write_all(tail_) || ::fsync(fd_) != 0) return finish(file_error());
    ::close(std::exchange(fd_, -1));
    const auto digest = hash_.finish();
    if (tail_.size() != 32 || std::memcmp(digest.data(), tail_.data(), 32) != 0) return finish(error::snapshot_corrupt);
    std::error_code fec;
    std::filesystem::rename(part_, path_, fec);
    if (fec) return finish(error_code(fec.value(), boost::system::generic_category()));
    // The rename itself lasts once the directory is synced.
    auto dir = std::filesystem::path(path_).parent_path();
    if (int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
      ::fsync(dfd);
      ::close(dfd);
    }
    finish({});
  }

  /// The client closed under the stream: its queue is shut down, so no Read or Finish may go
  /// onto it; the close cancelled the call already.
  void abandon() {
    on_wire_ = false;
    first_timer_.cancel();
    client_->untrack(this);
    finish(error::client_closed);
  }

  bool write_all(std::string_view data) {
    while (!data.empty()) {
      auto n = ::write(fd_, data.data(), data.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      data.remove_prefix(static_cast<std::size_t>(n));
    }
    return true;
  }

  static error_code file_error() { return error_code(errno ? errno : EIO, boost::system::generic_category()); }

  void user_cancel() {
    if (finished_) return;
    user_cancelled_ = true;
    if (on_wire_) ctx_->TryCancel();
    else finish(asio::error::operation_aborted);  // waiting for a token, or not begun: nothing on the wire
  }

  void finish(error_code ec) {
    if (finished_) return;
    finished_ = true;
    if (fd_ >= 0) ::close(std::exchange(fd_, -1));
    if (ec) {
      bump(client_->telemetry_.rpc(rpc_kind::snapshot).failed);
      std::error_code ignored;
      if (opened_) std::filesystem::remove(part_, ignored);
      return client_->complete(std::move(h_), ec, snapshot_result{});
    }
    client_->complete(std::move(h_), ec, snapshot_result{header_, received_});
  }

  std::shared_ptr<client_impl> client_;
  std::string path_, part_;
  std::string endpoint_;  // empty: the balancer's pick
  snapshot_progress progress_;
  handler<snapshot_result> h_;
  strand_tag start_tag_, read_tag_, finish_tag_;
  std::unique_ptr<pb::Maintenance::Stub> stub_;
  std::unique_ptr<grpc::ClientContext> ctx_;
  std::unique_ptr<grpc::ClientAsyncReader<pb::SnapshotResponse>> reader_;
  pb::SnapshotResponse resp_;
  grpc::Status status_;
  asio::steady_timer first_timer_;
  int fd_ = -1;
  std::string sent_token_;
  sha256 hash_;
  std::string tail_;
  response_header header_;
  std::uint64_t received_ = 0;
  int write_error_ = 0;
  bool got_header_ = false;
  bool opened_ = false;
  bool first_timed_out_ = false;
  bool auth_retried_ = false;
  bool write_failed_ = false;
  bool user_cancelled_ = false;
  bool on_wire_ = false;
  bool finished_ = false;
};

}  // namespace

void start_snapshot(const std::shared_ptr<client_impl>& c, std::string path, std::string endpoint,
                    snapshot_progress progress, handler<snapshot_result> h) {
  if (!c) return fail_empty(std::move(h));  // made from a moved-from client
  if (path.empty()) return fail(c, std::move(h), error::invalid_argument);
  std::make_shared<snapshot_reader>(c, std::move(path), std::move(endpoint), std::move(progress), std::move(h))->start();
}

}  // namespace coetcd::detail
