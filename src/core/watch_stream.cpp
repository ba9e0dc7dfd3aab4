// The client's one Watch stream, multiplexing every watcher (see watch_stream.hpp), and the public watcher.
#include "watch_stream.hpp"
#include "key_prefix.hpp"

#include "convert.hpp"

namespace coetcd::detail {

watch_stream::watch_stream(std::shared_ptr<client_impl> c)
    : client_(std::move(c)), reopen_timer_(client_->strand_) {}

void watch_stream::add(std::shared_ptr<watcher_state> w, handler<watcher> h, std::shared_ptr<early_cancel> cancel) {
  if (closed_) return fail(client_, std::move(h), error::client_closed);
  // The slot was taken in the initiating function (early_cancel): a cancellation emitted before
  // we got here is not lost, and none is assigned from the strand's thread.
  bool cancelled = cancel->registered([weak = std::weak_ptr<watcher_state>(w)] {
    auto w = weak.lock();
    if (!w || !w->create_waiter) return;
    auto h = std::move(*w->create_waiter);
    w->create_waiter.reset();
    w->create_work = {};
    w->stream->cancel(w);
    w->stream->client().complete(std::move(h), asio::error::operation_aborted, watcher{});
  });
  if (cancelled) return client_->complete(std::move(h), asio::error::operation_aborted, watcher{});
  w->id = next_id_++;
  w->create_waiter.emplace(std::move(h));
  w->create_work = asio::prefer(client_->io_ex_, asio::execution::outstanding_work.tracked);
  watchers_.emplace(w->id, w);
  count_watchers();
  if (stream_ && stream_->ready()) send_create(*w);
  else open();
}

void watch_stream::next(const std::shared_ptr<watcher_state>& w, handler<watch_batch> h,
                        std::shared_ptr<early_cancel> cancel) {
  if (!w->ready.empty()) {
    auto b = std::move(w->ready.front());
    w->ready.pop_front();
    return client_->complete(std::move(h), error_code{}, std::move(b));
  }
  if (w->done) {
    watch_batch b;
    b.compact_revision = w->compact_revision;
    return client_->complete(std::move(h), w->final_ec, std::move(b));
  }
  if (w->next_waiter) return fail(client_, std::move(h), asio::error::already_started);
  auto seq = ++w->wait_seq;
  bool cancelled = cancel->registered([weak = std::weak_ptr<watcher_state>(w), seq] {
    auto w = weak.lock();
    if (!w || !w->next_waiter || w->wait_seq != seq) return;
    auto h = std::move(*w->next_waiter);
    w->next_waiter.reset();
    w->next_work = {};
    w->stream->client().complete(std::move(h), asio::error::operation_aborted, watch_batch{});
  });
  if (cancelled) return client_->complete(std::move(h), asio::error::operation_aborted, watch_batch{});
  w->next_waiter.emplace(std::move(h));
  w->next_work = asio::prefer(client_->io_ex_, asio::execution::outstanding_work.tracked);
}

void watch_stream::cancel(const std::shared_ptr<watcher_state>& w) {
  if (w->done) return;
  watchers_.erase(w->id);
  count_watchers();
  end(*w, error::watch_canceled, 0);
  if (stream_ && stream_->ready()) {
    pb::WatchRequest req;
    req.mutable_cancel_request()->set_watch_id(w->id);
    stream_->write(std::move(req));
  }
}

void watch_stream::close() {
  closed_ = true;
  reopen_timer_.cancel();
  if (stream_) stream_->cancel();
  end_all(error::client_closed);
}

void watch_stream::open() {
  if (closed_ || stream_ || opening_ || reopen_scheduled_ || watchers_.empty()) return;
  opening_ = true;
  client_->with_token([self = shared_from_this()](error_code ec) {
    self->opening_ = false;
    if (self->closed_) return;
    if (ec) {
      if (is_fatal_stream_error(ec)) return self->end_all(ec);
      return self->schedule_reopen();
    }
    std::weak_ptr<watch_stream> weak = self;
    stream_type::callbacks cb{
        [weak] { if (auto s = weak.lock()) s->on_ready(); },
        [weak](const pb::WatchResponse& r) { if (auto s = weak.lock()) s->on_message(r); },
        [weak](error_code ec) { if (auto s = weak.lock()) s->on_closed(ec); }};
    self->stream_ = std::make_shared<stream_type>(self->client_, std::move(cb));
    self->pending_creates_.clear();
    self->stream_->start([c = self->client_](grpc::ClientContext* ctx, grpc::CompletionQueue* q) {
      return c->watch_->PrepareAsyncWatch(ctx, q);
    });
  });
}

void watch_stream::on_ready() {
  if (auto why = std::exchange(ended_by_, std::nullopt)) {
    bump(client_->telemetry_.stream(stream_kind::watch).reopened);
    client_->emit({.kind = event_kind::stream_reopened, .name = "Watch", .error = *why});
  }
  for (auto& [id, w] : watchers_) send_create(*w);
}

void watch_stream::send_create(watcher_state& w) {
  pb::WatchRequest req;
  auto* c = req.mutable_create_request();
  *c = w.request;
  c->set_watch_id(w.id);
  if (w.next_rev > 0) c->set_start_revision(w.next_rev);
  if (w.confirmed && client_->wants_events())
    client_->emit({.kind = event_kind::watch_resumed, .name = w.request.key().substr(client_->key_prefix().size()),
                   .revision = w.next_rev});
  w.partial.clear();
  pending_creates_.push_back(w.id);
  stream_->write(std::move(req));
}

namespace {
error_code cancel_reason_error(const std::string& reason) {
  if (reason.find("permission denied") != std::string::npos) return error::permission_denied;
  if (reason.find("invalid auth token") != std::string::npos || reason.find("revision of auth store is old") != std::string::npos)
    return error::invalid_auth_token;
  if (reason.find("user name is empty") != std::string::npos) return error::auth_required;
  return error::watch_canceled;
}
}  // namespace

void watch_stream::on_message(const pb::WatchResponse& r) {
  backoff_.reset();
  if (r.created()) {
    // The server answers creates in the order it received them; that attributes even an
    // answer with watch_id -1 (a create the server refused).
    std::int64_t id = r.watch_id();
    if (!pending_creates_.empty()) {
      if (id == -1) id = pending_creates_.front();
      pending_creates_.pop_front();
    }
    auto it = watchers_.find(id);
    if (it == watchers_.end()) return;  // cancelled meanwhile; its cancel request follows
    auto& w = *it->second;
    if (r.canceled()) {
      auto why = r.compact_revision() ? make_error_code(error::compacted) : cancel_reason_error(r.cancel_reason());
      // The stream keeps the token it was opened with, which expires on the server after
      // --auth-token-ttl without use: open a new stream with a fresh token and ask again.
      // Twice refused with fresh tokens, it is not the token.
      // A stream opened without a token while the server had auth off is refused once auth is
      // back ("user name is empty"): the same.
      const bool sent_none = why == error::auth_required && stream_ && stream_->token().empty();
      if (sent_none && client_->uses_auth()) client_->note_auth_on();
      if ((why == error::invalid_auth_token || sent_none) && client_->uses_auth() && w.auth_refusals++ < 2) {
        if (stream_) {
          client_->invalidate_token(stream_->token());
          stream_->cancel();
        }
        return;
      }
      auto keep = it->second;
      watchers_.erase(it);
      count_watchers();
      return end(w, why, r.compact_revision());
    }
    w.auth_refusals = 0;
    w.confirmed = true;
    if (w.next_rev == 0) w.next_rev = r.header().revision() + 1;
    if (w.create_waiter) {
      auto h = std::move(*w.create_waiter);
      w.create_waiter.reset();
      w.create_work = {};
      client_->complete(std::move(h), error_code{}, watcher(it->second));
    }
    return;
  }
  auto it = watchers_.find(r.watch_id());
  if (it == watchers_.end()) return;  // a cancelled watcher, or a progress answer for the stream
  auto keep = it->second;
  auto& w = *keep;
  if (r.canceled()) {
    watchers_.erase(it);
    count_watchers();
    return end(w, r.compact_revision() ? make_error_code(error::compacted) : cancel_reason_error(r.cancel_reason()),
               r.compact_revision());
  }
  for (const auto& e : r.events()) {
    if (client_->key_prefix().empty()) {
      w.partial.push_back(from_pb(e));
    } else {
      auto copy = e;
      w.partial.push_back(from_pb(stripped(copy, client_->key_prefix())));
    }
  }
  if (r.fragment()) return;  // the rest of this revision's events follow
  watch_batch b;
  b.header = from_pb(r.header());
  bool had_events = !w.partial.empty();
  for (auto& e : w.partial)
    if (e.kv.mod_revision >= w.next_rev) b.events.push_back(std::move(e));  // drop replays after a resume
  w.partial.clear();
  if (had_events && b.events.empty()) return;
  if (!b.events.empty()) w.next_rev = b.events.back().kv.mod_revision + 1;
  else w.next_rev = std::max(w.next_rev, b.header.revision + 1);  // progress: all before it was sent
  deliver(w, std::move(b));
}

void watch_stream::on_closed(error_code ec) {
  if (stream_ && ec == error::invalid_auth_token) client_->invalidate_token(stream_->token());
  stream_.reset();
  pending_creates_.clear();
  if (closed_) return;
  if (is_fatal_stream_error(ec)) return end_all(ec);
  if (!ended_by_) ended_by_ = ec;
  schedule_reopen();
}

void watch_stream::schedule_reopen() {
  if (closed_ || reopen_scheduled_ || watchers_.empty()) return;
  reopen_scheduled_ = true;
  reopen_timer_.expires_after(backoff_.next());
  reopen_timer_.async_wait([weak = weak_from_this()](error_code) {
    if (auto self = weak.lock()) {
      self->reopen_scheduled_ = false;
      self->open();
    }
  });
}

void watch_stream::deliver(watcher_state& w, watch_batch b) {
  if (w.next_waiter) {
    auto h = std::move(*w.next_waiter);
    w.next_waiter.reset();
    w.next_work = {};
    return client_->complete(std::move(h), error_code{}, std::move(b));
  }
  w.ready.push_back(std::move(b));
}

void watch_stream::end(watcher_state& w, error_code ec, std::int64_t compact_revision) {
  if (w.done) return;
  w.done = true;
  w.final_ec = ec;
  w.compact_revision = compact_revision;
  if (w.create_waiter) {
    auto h = std::move(*w.create_waiter);
    w.create_waiter.reset();
    w.create_work = {};
    client_->complete(std::move(h), ec, watcher{});
  }
  if (w.next_waiter && w.ready.empty()) {
    auto h = std::move(*w.next_waiter);
    w.next_waiter.reset();
    w.next_work = {};
    watch_batch b;
    b.compact_revision = compact_revision;
    client_->complete(std::move(h), ec, std::move(b));
  }
}

void watch_stream::end_all(error_code ec) {
  auto all = std::exchange(watchers_, {});
  count_watchers();
  for (auto& [id, w] : all) end(*w, ec, 0);
}

// ---- entry points ----

void start_watch(const std::shared_ptr<client_impl>& c, std::string key, std::string end, watch_options o,
                 handler<watcher> h) {
  if (!c) return fail_empty(std::move(h));  // a moved-from client
  if (key.empty() && !asks_every_key(key, o)) return fail(c, std::move(h), error::empty_key);
  auto w = std::make_shared<watcher_state>();
  w->request = prefixed(to_pb(key, end, o), c->key_prefix());
  w->next_rev = o.start_revision;  // 0: learnt from the creation answer
  auto cancel = early_cancel::take(asio::get_associated_cancellation_slot(h), c->strand_);
  asio::dispatch(c->strand_, [c, w, cancel, h = std::move(h)]() mutable {
    if (c->closed()) return fail(c, std::move(h), error::client_closed);
    auto& ws = c->watches();
    w->stream = ws.shared_from_this();
    ws.add(w, std::move(h), std::move(cancel));
  });
}

}  // namespace coetcd::detail

namespace coetcd {

watcher& watcher::operator=(watcher&& other) noexcept {
  if (this != &other) {
    close();
    state_ = std::move(other.state_);
  }
  return *this;
}

watcher::~watcher() { close(); }

void watcher::close() {
  if (!state_) return;
  auto s = state_;
  asio::dispatch(s->stream->client().strand_, [s] { s->stream->cancel(s); });
}

watcher::executor_type watcher::get_executor() const noexcept {
  return state_ ? state_->stream->client().io_ex_ : executor_type();
}

std::int64_t watcher::id() const noexcept { return state_ ? state_->id : 0; }

void watcher::start_next(const std::shared_ptr<detail::watcher_state>& s, detail::handler<watch_batch> h) {
  if (!s) {
    // An empty watcher has no executor of its own: post to the handler's (never inline).
    asio::post(asio::system_executor(), asio::append(std::move(h), make_error_code(error::watch_canceled), watch_batch{}));
    return;
  }
  auto cancel = detail::early_cancel::take(asio::get_associated_cancellation_slot(h), s->stream->client().strand_);
  asio::dispatch(s->stream->client().strand_,
                 [s, cancel, h = std::move(h)]() mutable { s->stream->next(s, std::move(h), std::move(cancel)); });
}

}  // namespace coetcd
