// The explorer's history (test_explore): every operation's invocation and completion and every
// hold a caller was told of, in the order the one event loop saw them, and a window of it printed
// around a violation.
#pragma once

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace coetcd::test::explore {

using clock_type = std::chrono::steady_clock;
constexpr long never = LONG_MAX;

/// One step of the history. An operation is an invocation and, later, a completion with the
/// same `op`; a note stands alone (a destroy, a fault, a session's end).
struct entry {
  long seq = 0;      // order on the event loop: every entry has its own
  double ms = 0;     // since the case began
  long op = 0;       // shared by an operation's invocation and completion; 0 for a note
  int actor = -1;    // -1: the schedule itself (sessions, faults, the destroyer)
  enum phase_t { invoke, complete, note } phase = note;
  std::string what;  // "lock", "unlock", "destroy", "session.close", ...
  std::string name;  // the lock, semaphore, election or barrier name, when there is one
  int object = -1, session = -1;
  std::int64_t lease = 0, n = 0;
  std::string result;  // a completion's "ok" or error message; a note's detail
  long hold = 0;       // the hold this entry began or ended
};

/// What a caller was told it holds: from the completion that said so (its handler ran) to the
/// first thing that ended it as far as anyone can tell (unlock invoked, object destroyed, its
/// session closed or orphaned). Shorter than the hold etcd saw at both ends, so two holds that
/// overlap here overlapped in etcd.
struct hold {
  long id = 0;
  std::string name;
  int object = -1, session = -1, actor = -1;
  std::int64_t lease = 0, n = 1;
  long start = 0, end = never;
  bool after_destroy = false;  // told by an object that was already destroyed: nobody can end it
  bool shared = false;         // an rw_mutex reader's: readers may hold beside each other
};

/// A broken invariant, with the stretch of the history that shows it.
struct violation {
  std::string invariant;
  std::string name;
  std::string what;
  long from = 0, to = 0;     // the seq range in which it shows
  std::vector<long> holds;   // the holds involved
};

class history {
 public:
  explicit history(std::string label) : label_(std::move(label)), began_(clock_type::now()) {}

  const std::string& label() const { return label_; }
  long last_seq() const { return seq_; }

  /// Records an invocation; returns the operation's id for its completion.
  long invoke(int actor, std::string what, std::string name, int object, int session, std::int64_t lease,
              std::int64_t n = 0) {
    entry e = base(entry::invoke, actor, std::move(what), std::move(name), object, session, lease, n);
    e.op = ++ops_;
    invocations_.emplace(ops_, events_.size());
    events_.push_back(std::move(e));
    return ops_;
  }
  /// Records the completion of operation `op` (the same fields as its invocation).
  long complete(long op, std::string result, long hold_id = 0) {
    const entry* inv = invocation(op);
    entry e = inv ? *inv : entry{};
    e.seq = ++seq_;
    e.ms = elapsed();
    e.phase = entry::complete;
    e.result = std::move(result);
    e.hold = hold_id;
    events_.push_back(std::move(e));
    completed_.insert(op);
    return seq_;
  }
  /// Whether operation `op` has completed.
  bool completed(long op) const { return completed_.count(op) > 0; }
  /// Records a note; returns its seq.
  long note(int actor, std::string what, std::string name, int object, int session, std::int64_t lease,
            std::string detail) {
    entry e = base(entry::note, actor, std::move(what), std::move(name), object, session, lease, 0);
    e.result = std::move(detail);
    events_.push_back(std::move(e));
    return seq_;
  }

  /// A hold that begins at the last recorded entry (the completion that told the caller).
  long begin_hold(std::string name, int actor, int object, int session, std::int64_t lease, std::int64_t n,
                  bool after_destroy = false) {
    hold h;
    h.id = ++holds_n_;
    h.name = std::move(name);
    h.actor = actor;
    h.object = object;
    h.session = session;
    h.lease = lease;
    h.n = n;
    h.start = seq_;
    h.after_destroy = after_destroy;
    if (!events_.empty()) events_.back().hold = h.id;
    holds_.emplace(h.id, std::move(h));
    return holds_n_;
  }
  /// Marks hold `id` as a reader's (see hold::shared).
  void mark_shared(long id) {
    auto it = holds_.find(id);
    if (it != holds_.end()) it->second.shared = true;
  }
  /// Ends hold `id` at `seq` (the entry that ended it), unless it has ended already.
  void end_hold(long id, long seq) {
    auto it = holds_.find(id);
    if (it != holds_.end() && it->second.end == never) it->second.end = seq;
  }
  /// Ends every open hold for which `pred` holds, at `seq`.
  void end_holds_if(const std::function<bool(const hold&)>& pred, long seq) {
    for (auto& [id, h] : holds_)
      if (h.end == never && pred(h)) h.end = seq;
  }
  /// Counts no time for the holds for which `pred` holds: what they were told cannot be judged.
  void discount_holds_if(const std::function<bool(const hold&)>& pred) {
    for (auto& [id, h] : holds_)
      if (pred(h)) h.end = h.start;
  }
  const hold* find_hold(long id) const {
    auto it = holds_.find(id);
    return it == holds_.end() ? nullptr : &it->second;
  }
  std::vector<hold> holds() const {
    std::vector<hold> out;
    for (auto& [id, h] : holds_) out.push_back(h);
    return out;
  }
  const std::vector<entry>& events() const { return events_; }
  /// Invocations with no completion yet.
  std::vector<entry> open_operations() const {
    std::set<long> done;
    for (auto& e : events_)
      if (e.phase == entry::complete) done.insert(e.op);
    std::vector<entry> out;
    for (auto& e : events_)
      if (e.phase == entry::invoke && !done.count(e.op)) out.push_back(e);
    return out;
  }

  void fail(violation v) { violations_.push_back(std::move(v)); }
  const std::vector<violation>& violations() const { return violations_; }

  /// The operations on the violation's name (and the notes about the leases of its holds) that
  /// overlap its stretch of the history, at most `max_lines` lines, those nearest the stretch.
  std::string window(const violation& v, std::size_t max_lines = 60) const {
    std::set<std::int64_t> leases;
    std::set<int> objects;
    for (long id : v.holds)
      if (auto* h = find_hold(id)) {
        leases.insert(h->lease);
        objects.insert(h->object);
      }
    std::map<long, long> done;  // op -> completion seq
    for (auto& e : events_)
      if (e.phase == entry::complete) done[e.op] = e.seq;
    std::vector<const entry*> picked;
    for (auto& e : events_) {
      bool related = (!v.name.empty() && e.name == v.name) || (e.name.empty() && leases.count(e.lease)) ||
                     (e.phase == entry::note && (objects.count(e.object) || e.what.rfind("fault.", 0) == 0));
      if (!related) continue;
      if (e.phase == entry::note) {
        if (e.seq + 40 >= v.from && e.seq <= v.to + 40) picked.push_back(&e);
        continue;
      }
      auto c = done.find(e.op);
      long inv = e.phase == entry::invoke ? e.seq : 0, end = c == done.end() ? never : c->second;
      if (e.phase == entry::complete) {
        inv = invocation(e.op) ? invocation(e.op)->seq : e.seq;
        end = e.seq;
      }
      if (inv <= v.to && end >= v.from) picked.push_back(&e);
    }
    if (picked.size() > max_lines) {
      // Keep the lines nearest the stretch.
      auto mid = (v.from + v.to) / 2;
      std::stable_sort(picked.begin(), picked.end(), [mid](const entry* a, const entry* b) {
        return std::labs(a->seq - mid) < std::labs(b->seq - mid);
      });
      picked.resize(max_lines);
      std::sort(picked.begin(), picked.end(), [](const entry* a, const entry* b) { return a->seq < b->seq; });
    }
    std::ostringstream out;
    for (auto* e : picked) out << "    " << describe(*e) << "\n";
    return out.str();
  }

  static std::string describe(const entry& e) {
    std::ostringstream s;
    s << "#" << e.seq << " " << static_cast<long>(e.ms) << "ms ";
    s << (e.actor >= 0 ? "actor " + std::to_string(e.actor) : std::string("schedule")) << " ";
    s << (e.phase == entry::invoke ? "call " : e.phase == entry::complete ? "done " : "note ") << e.what;
    if (!e.name.empty()) s << " " << e.name;
    if (e.object >= 0) s << " obj" << e.object;
    if (e.session >= 0) s << " s" << e.session;
    if (e.lease) s << " lease " << std::hex << e.lease << std::dec;
    if (e.n) s << " n=" << e.n;
    if (e.op) s << " op" << e.op;
    if (!e.result.empty()) s << " -> " << e.result;
    if (e.hold) s << " [hold " << e.hold << "]";
    return s.str();
  }

 private:
  entry base(entry::phase_t p, int actor, std::string what, std::string name, int object, int session,
             std::int64_t lease, std::int64_t n) {
    entry e;
    e.seq = ++seq_;
    e.ms = elapsed();
    e.phase = p;
    e.actor = actor;
    e.what = std::move(what);
    e.name = std::move(name);
    e.object = object;
    e.session = session;
    e.lease = lease;
    e.n = n;
    return e;
  }
  const entry* invocation(long op) const {
    auto f = invocations_.find(op);
    return f == invocations_.end() ? nullptr : &events_[f->second];
  }
  double elapsed() const { return std::chrono::duration<double, std::milli>(clock_type::now() - began_).count(); }

  std::string label_;
  clock_type::time_point began_;
  long seq_ = 0, ops_ = 0, holds_n_ = 0;
  std::vector<entry> events_;
  std::map<long, std::size_t> invocations_;
  std::set<long> completed_;
  std::map<long, hold> holds_;
  std::vector<violation> violations_;
};

}  // namespace coetcd::test::explore
