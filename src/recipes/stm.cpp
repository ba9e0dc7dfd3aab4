// stm_tx: the read set, write set and commit of coetcd::stm, after Go's concurrency/stm.go.
#include <coetcd/stm.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <limits>

namespace coetcd {
namespace {

bool is_serializable(isolation level) {
  return level == isolation::serializable_snapshot || level == isolation::serializable;
}

// Errors that leave no doubt the commit was not applied: refused before it was sent, or by the
// server's checks of the request itself. Any other (the deadline, a dropped connection, a
// cancel while it was on the wire, a leader lost mid-proposal) may follow an applied commit.
bool surely_not_applied(const error_code& ec) {
  if (ec.category() != etcd_category()) return false;
  switch (static_cast<error>(ec.value())) {
    case error::empty_key:
    case error::invalid_argument:
    case error::invalid_endpoint:
    case error::tls_file_unreadable:
    case error::tls_file_invalid:
    case error::endpoints_unreachable:
    case error::auth_failed:
    case error::auth_required:
    case error::invalid_auth_token:
    case error::permission_denied:
    case error::lease_not_found:
    case error::too_many_txn_ops:
    case error::duplicate_key_in_txn:
    case error::request_too_large:
      return true;
    default:
      return false;
  }
}

void check_key(std::string_view key, const char* what) {
  if (key.empty()) throw boost::system::system_error(make_error_code(error::empty_key), what);
}

}  // namespace

stm_tx::stm_tx(client& c, const stm_options& options, std::vector<std::string> prefetch)
    : client_(c), options_(options), prefetch_keys_(std::move(prefetch)) {
  options_.prefetch = {};
  if (options_.max_attempts < 1)
    throw boost::system::system_error(make_error_code(error::invalid_argument),
                                      "coetcd::stm: max_attempts must be at least 1");
  for (auto& k : prefetch_keys_) check_key(k, "coetcd::stm: a prefetch key");
}

asio::awaitable<void> stm_tx::prefetch() {
  if (prefetch_keys_.empty()) co_return;
  // One txn of gets: every key at one revision, in one round trip.
  txn t;
  for (auto& k : prefetch_keys_) t.then(txn_op::get(k));
  auto r = co_await client_.async_txn(t, asio::use_awaitable);
  for (std::size_t i = 0; i < prefetch_keys_.size() && i < r.responses.size(); ++i) {
    auto& got = r.responses[i].get();
    next_reads_[prefetch_keys_[i]] = {got.kvs.empty() ? std::nullopt : std::optional(got.kvs.front()), r.header.revision};
  }
}

void stm_tx::begin() {
  ++attempt_;
  reads_.clear();
  writes_.clear();
  snapshot_ = 0;
}

asio::awaitable<const detail::stm_read*> stm_tx::read(std::string_view key) {
  check_key(key, "coetcd::stm_tx: a read");
  if (auto it = reads_.find(key); it != reads_.end()) co_return &it->second;
  const bool serializable = is_serializable(options_.level);
  // What the failed commit (or the prefetch) read: read now without a round trip. It enters the
  // read set only when the body asks for it, so keys it no longer reads do not conflict.
  if (auto it = next_reads_.find(key); it != next_reads_.end()) {
    auto node = next_reads_.extract(it);
    if (serializable && snapshot_ == 0) snapshot_ = node.mapped().revision;
    co_return &reads_.insert(std::move(node)).position->second;
  }
  get_options o;
  if (!serializable) {
    o.serializable = true;  // any member: the commit's compares catch a stale read (Go's choice)
  } else if (snapshot_ != 0) {
    o.revision = snapshot_;  // the snapshot the first read defined
    o.serializable = true;
  }
  auto r = co_await client_.async_get(key, o, asio::use_awaitable);
  if (serializable && snapshot_ == 0) snapshot_ = r.header.revision;
  detail::stm_read got{r.kvs.empty() ? std::nullopt : std::optional(std::move(r.kvs.front())), r.header.revision};
  co_return &reads_.emplace(std::string(key), std::move(got)).first->second;
}

asio::awaitable<std::optional<std::string>> stm_tx::get(std::string_view key) {
  if (auto it = writes_.find(key); it != writes_.end()) co_return it->second.value;
  auto r = co_await read(key);
  if (!r->kv) co_return std::nullopt;
  co_return r->kv->value;
}

asio::awaitable<std::int64_t> stm_tx::mod_revision(std::string_view key) {
  auto r = co_await read(key);
  co_return r->kv ? r->kv->mod_revision : 0;
}

void stm_tx::put(std::string_view key, std::string_view value, std::int64_t lease) {
  check_key(key, "coetcd::stm_tx: a put");
  writes_.insert_or_assign(std::string(key), detail::stm_write{std::string(value), lease});
}

void stm_tx::del(std::string_view key) {
  check_key(key, "coetcd::stm_tx: a delete");
  writes_.insert_or_assign(std::string(key), detail::stm_write{std::nullopt, 0});
}

std::int64_t stm_tx::first_revision() const {
  std::int64_t first = std::numeric_limits<std::int64_t>::max();
  for (auto& [k, r] : reads_) first = std::min(first, r.revision);
  return first;
}

asio::awaitable<bool> stm_tx::commit() {
  next_reads_.clear();
  if (writes_.empty() && (reads_.empty() || options_.level == isolation::read_committed)) co_return true;
  txn t;
  if (options_.level != isolation::read_committed)
    for (auto& [k, r] : reads_) t.when(compare::mod_revision(k) == (r.kv ? r.kv->mod_revision : 0));
  if (options_.level == isolation::serializable_snapshot && !reads_.empty()) {
    // A key written must not have changed since the snapshot either (Go: wset.cmps(rset.first()+1)).
    const auto first = first_revision();
    for (auto& [k, w] : writes_) t.when(compare::mod_revision(k) < first + 1);
  }
  for (auto& [k, w] : writes_) {
    if (w.value) t.then(txn_op::put(k, *w.value, put_options{.lease = w.lease}));
    else t.then(txn_op::del(k));
  }
  // The serializable levels read the keys again in the same txn when it fails: the next run
  // starts from them without a round trip (Go's prefetch on conflict).
  const bool refetch = is_serializable(options_.level);
  if (refetch)
    for (auto& [k, r] : reads_) t.otherwise(txn_op::get(k));

  auto [ec, r] = co_await client_.async_txn(t, asio::as_tuple(asio::use_awaitable));
  if (ec) {
    if (surely_not_applied(ec)) throw boost::system::system_error(ec, "coetcd::stm: commit");
    throw boost::system::system_error(make_error_code(error::outcome_unknown),
                                      "coetcd::stm: commit (" + ec.message() + ")");
  }
  if (r.succeeded) {
    committed_revision_ = r.header.revision;
    co_return true;
  }
  if (refetch) {
    std::size_t i = 0;
    for (auto& [k, old] : reads_) {
      if (i >= r.responses.size()) break;
      auto& got = r.responses[i++].get();
      next_reads_[k] = {got.kvs.empty() ? std::nullopt : std::optional(got.kvs.front()), r.header.revision};
    }
  }
  co_return false;
}

}  // namespace coetcd
