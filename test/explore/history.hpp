// The explorer's history (test_explore): every operation's invocation and completion and every
// hold a caller was told of, in the order the one event loop saw them, and a window of it printed
// around a violation, with the shortest excerpt of its name's entries that shows it.
#pragma once

#include "actors.hpp"  // here, so that every case's code sees the cap through world.hpp

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
  std::string what;  // "lock", "release", "drop", "destroy", "session.close", ...
  std::string name;  // the lock, semaphore, election or barrier name, when there is one
  int object = -1, session = -1;
  std::int64_t lease = 0, n = 0;
  std::string result;  // a completion's "ok" or error message; a note's detail
  long hold = 0;       // the hold this entry began or ended
  std::int64_t revision = 0;  // etcd's revision of what it did, when a check found it (0: not known)
};

/// What a caller was told it holds: from the completion that said so (its handler ran) to the
/// first thing that ended it as far as anyone can tell (its release invoked, the hold dropped
/// without one, its session closed or orphaned; not its object's destruction, which leaves holds
/// alone). Shorter than the hold etcd saw at both ends (a release or a drop lands later), so two
/// holds that overlap here overlapped in etcd.
struct hold {
  long id = 0;
  std::string name;
  int object = -1, session = -1, actor = -1;
  std::int64_t lease = 0, n = 1;
  long start = 0, end = never;
  bool after_destroy = false;  // told by an object that was already destroyed (its grant was due back)
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
  /// The entry of `seq` (null: none).
  const entry* at(long seq) const {
    if (seq < 1 || seq > static_cast<long>(events_.size())) return nullptr;
    const auto& e = events_[static_cast<std::size_t>(seq - 1)];  // one entry per seq, from 1
    return e.seq == seq ? &e : nullptr;
  }
  /// Notes etcd's revision of what entry `seq` did, printed with it.
  void set_revision(long seq, std::int64_t revision) {
    if (at(seq)) events_[static_cast<std::size_t>(seq - 1)].revision = revision;
  }
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

  /// The shortest history of the violation's name that shows it: only the entries of that name
  /// (its lock, election or barrier name, KV key, data case), from the last point before the
  /// violation shows (v.from) at which nothing was in flight on it (no hold, no operation
  /// invoked and not completed) up to the end of its stretch (v.to). At most `before` entries
  /// before v.from (the last ones: a name that was never quiet so near) and `after` from it on.
  /// Empty for a violation with no name or no stretch.
  struct excerpt_t {
    std::vector<const entry*> entries;
    long quiet = 0;        // the last quiet point: after entry #quiet (0: the case's start)
    std::size_t kept_before = 0;  // of `entries`, those before v.from
    std::size_t left_before = 0, left_after = 0;  // entries of the stretch left out
  };
  excerpt_t excerpt(const violation& v, std::size_t before = 40, std::size_t after = 40) const {
    excerpt_t x;
    if (v.name.empty() || v.to <= 0) return x;
    // What was in flight on the name, as [from, to) in seqs: a point p (after entry p) is quiet
    // when no span holds from <= p < to.
    std::vector<std::pair<long, long>> spans;
    std::map<long, long> done;  // op -> completion seq
    for (auto& e : events_)
      if (e.phase == entry::complete) done[e.op] = e.seq;
    for (auto& e : events_)
      if (e.phase == entry::invoke && e.name == v.name) {
        auto c = done.find(e.op);
        spans.emplace_back(e.seq, c == done.end() ? never : c->second);
      }
    for (auto& [id, h] : holds_)
      if (h.name == v.name && h.end > h.start) spans.emplace_back(h.start, h.end);  // a discounted one took no time
    std::sort(spans.begin(), spans.end());
    // The merged span that holds the point just before v.from, if any, began after the quiet point.
    const long point = v.from - 1;
    long quiet = point < 0 ? 0 : point, from = -1, to = -1;
    for (auto& [a, b] : spans) {
      if (a > point) break;
      if (from < 0 || a > to) {  // a gap before it: a new merged span
        from = a;
        to = b;
      } else {
        to = std::max(to, b);
      }
    }
    if (from >= 0 && point < to) quiet = from - 1;
    x.quiet = std::max(0L, quiet);
    std::vector<const entry*> early, late;
    for (auto& e : events_) {
      if (e.name != v.name || e.seq <= x.quiet || e.seq > v.to) continue;
      (e.seq < v.from ? early : late).push_back(&e);
    }
    if (early.size() > before) {
      x.left_before = early.size() - before;
      early.erase(early.begin(), early.begin() + static_cast<std::ptrdiff_t>(x.left_before));
    }
    if (late.size() > after) {
      x.left_after = late.size() - after;
      late.resize(after);
    }
    x.kept_before = early.size();
    x.entries = std::move(early);
    x.entries.insert(x.entries.end(), late.begin(), late.end());
    return x;
  }
  /// The excerpt as the report prints it ("" when there is none).
  std::string excerpt_text(const violation& v) const {
    auto x = excerpt(v);
    if (x.entries.empty()) return "";
    std::ostringstream out;
    out << "  shortest history on " << v.name << " (its entries only; ";
    if (x.left_before) out << "never quiet in the " << x.kept_before << " before #" << v.from << ", " << x.left_before << " earlier left out";
    else if (x.quiet) out << "nothing in flight on it after #" << x.quiet;
    else out << "from the case's start";
    out << "):\n";
    for (auto* e : x.entries) out << "    " << describe(*e) << "\n";
    if (x.left_after) out << "    ... " << x.left_after << " more up to #" << v.to << "\n";
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
    if (e.revision) s << " rev " << e.revision;
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
