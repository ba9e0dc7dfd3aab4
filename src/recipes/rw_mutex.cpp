// rw_mutex is two of mutex's local queues on one name, told apart by their keys as Go's
// recipe.RWMutex lays them out: the write side is an exclusive queue whose turn comes when its key
// is the oldest under name + "/"; the read side is a shared queue whose turn comes when no key
// under name + "/write" is older, and whose waiters all hold at once (see mutex_queue.hpp).
#include "mutex_queue.hpp"

#include <coetcd/rw_mutex.hpp>

namespace coetcd {

namespace {

std::shared_ptr<detail::mutex_state> side(session& s, std::string_view name, std::string_view kind,
                                          const mutex_options& options) {
  auto m = std::make_shared<detail::mutex_state>();
  m->session = detail::access::state(s);
  m->name = std::string(name);
  m->prefix = m->name + "/";
  m->key = m->prefix + std::string(kind) + "/" + detail::lease_hex(s.lease());
  m->options = options;
  m->shared = kind == "read";
  if (m->shared) m->blockers = m->prefix + "write";
  else m->readers = m->prefix + "read/" + detail::lease_hex(s.lease());
  return m;
}

}  // namespace

rw_mutex::rw_mutex(session& s, std::string_view name, mutex_options options) {
  if (name.empty()) throw boost::system::system_error(make_error_code(error::empty_key), "coetcd: rw_mutex name");
  if (!detail::access::state(s)) throw boost::system::system_error(make_error_code(error::session_lost), "coetcd: rw_mutex session");
  write_ = side(s, name, "write", options);
  read_ = side(s, name, "read", options);
}

rw_mutex::~rw_mutex() {
  if (write_) detail::orphan(std::move(write_));
  if (read_) detail::orphan(std::move(read_));
}

rw_mutex& rw_mutex::operator=(rw_mutex&& other) noexcept {
  if (this != &other) {
    if (write_) detail::orphan(std::move(write_));
    if (read_) detail::orphan(std::move(read_));
    write_ = std::move(other.write_);
    read_ = std::move(other.read_);
  }
  return *this;
}

void rw_mutex::start(const std::shared_ptr<detail::mutex_state>& m, bool try_only, detail::lock_handler h) {
  if (!m) return detail::fail_empty(std::move(h));
  detail::start_lock(m, try_only, std::move(h));
}

rw_mutex::executor_type rw_mutex::get_executor() const noexcept {
  return write_ ? write_->session->impl->io_ex_ : executor_type();
}
const std::string& rw_mutex::name() const noexcept { return write_ ? write_->name : detail::empty_string(); }
const std::string& rw_mutex::write_key() const noexcept { return write_ ? write_->key : detail::empty_string(); }
const std::string& rw_mutex::read_key() const noexcept { return read_ ? read_->key : detail::empty_string(); }

}  // namespace coetcd
