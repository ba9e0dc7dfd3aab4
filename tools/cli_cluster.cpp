// The coetcd command line's cluster commands (member, endpoint, alarm, defrag, snapshot,
// move-leader), printing what etcdctl prints for the same command, in text or with -w json.
#include "cli.hpp"

#include <coetcd/cluster.hpp>
#include <coetcd/maintenance.hpp>

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace coetcd_cli {
namespace {

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string e; std::getline(ss, e, ',');)
    if (!e.empty()) out.push_back(e);
  return out;
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

std::string hex(std::uint64_t id) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%" PRIx64, id);
  return buf;
}

std::uint64_t parse_id(const std::string& command, const std::string& s) {
  // As Go's strconv.ParseUint(s, 16, 64): hex digits only, no sign, prefix or spaces.
  const bool digits = !s.empty() && s.size() <= 16 && s.find_first_not_of("0123456789abcdefABCDEF") == std::string::npos;
  if (digits) {
    auto id = std::stoull(s, nullptr, 16);
    if (id != 0) return id;
  }
  die(usage, command + ": '" + s + "' is not a member ID (hexadecimal, as member list prints it)");
}

/// Go's humanize.Bytes, as etcdctl prints a database size: powers of 1000, one decimal below 10.
std::string human_bytes(std::int64_t n) {
  if (n < 10) return std::to_string(n) + " B";
  static const char* units[] = {"B", "kB", "MB", "GB", "TB", "PB", "EB"};
  int e = static_cast<int>(std::floor(std::log(static_cast<double>(n)) / std::log(1000.0)));
  double val = std::floor(static_cast<double>(n) / std::pow(1000.0, e) * 10 + 0.5) / 10;
  char buf[32];
  std::snprintf(buf, sizeof buf, val < 10 ? "%.1f %s" : "%.0f %s", val, units[e]);
  return buf;
}

/// A duration as Go's time.Duration prints it (from microseconds: "850µs", "2.47ms", "1.5s").
std::string go_duration(std::chrono::microseconds d) {
  auto us = d.count();
  char buf[48];
  if (us == 0) return "0s";
  if (us < 1000) std::snprintf(buf, sizeof buf, "%lldµs", static_cast<long long>(us));
  else if (us < 1000000) std::snprintf(buf, sizeof buf, "%.3f", us / 1000.0);
  else std::snprintf(buf, sizeof buf, "%.6f", us / 1e6);
  std::string s = buf;
  if (us >= 1000) {
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
    s += us < 1000000 ? "ms" : "s";
  }
  return s;
}

/// A JSON string as Go's encoding/json writes it (<, > and & escaped too).
std::string quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') out += std::string("\\") + char(c);
    else if (c < 0x20 || c == '<' || c == '>' || c == '&') {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else out += char(c);
  }
  return out + "\"";
}

/// Builds one JSON object, leaving out empty fields as Go's `omitempty` does.
class json_object {
 public:
  json_object& num(const char* name, std::uint64_t v) { return v ? raw(name, std::to_string(v)) : *this; }
  json_object& num(const char* name, std::int64_t v) { return v ? raw(name, std::to_string(v)) : *this; }
  json_object& flag(const char* name, bool v) { return v ? raw(name, "true") : *this; }
  json_object& str(const char* name, const std::string& v) { return v.empty() ? *this : raw(name, quote(v)); }
  json_object& strs(const char* name, const std::vector<std::string>& v) {
    if (v.empty()) return *this;
    std::string a = "[";
    for (const auto& s : v) a += (a.size() > 1 ? "," : "") + quote(s);
    return raw(name, a + "]");
  }
  /// An object field, left out when empty (as a nil message is).
  json_object& obj(const char* name, const std::string& json) { return json == "{}" ? *this : raw(name, json); }
  json_object& raw(const char* name, const std::string& json) {
    body_ += (body_.empty() ? "" : ",") + quote(name) + ":" + json;
    return *this;
  }
  std::string str() const { return "{" + body_ + "}"; }

 private:
  std::string body_;
};

std::string header_json(const coetcd::response_header& h) {
  return json_object()
      .num("cluster_id", h.cluster_id)
      .num("member_id", h.member_id)
      .num("revision", h.revision)
      .num("raft_term", h.raft_term)
      .str();
}

const char* alarm_name(coetcd::alarm_type t) {
  switch (t) {
    case coetcd::alarm_type::none: return "NONE";
    case coetcd::alarm_type::nospace: return "NOSPACE";
    case coetcd::alarm_type::corrupt: return "CORRUPT";
  }
  return "UNKNOWN";
}

/// Why a member is unhealthy, in etcdctl 3.5's words for raised alarms.
std::string health_error(const coetcd::endpoint_health& h) {
  if (h.error != coetcd::error::alarm_raised) return h.error.message();
  std::string s = "Active Alarm(s): ";
  for (const auto& a : h.alarms) s += std::string(alarm_name(a.type)) + " ";
  return s;
}

std::string json_array(const std::vector<std::string>& items) { return "[" + join(items, ",") + "]"; }

struct runner {
  const cli& args;
  coetcd::client& client;
  coetcd::cluster members{client};
  coetcd::maintenance ops{client};

  bool json() const { return args.write_out == "json"; }

  [[noreturn]] void fail(const std::string& what, error_code ec) {
    die(failed, args.command + ": " + what + ": " + ec.message());
  }

  asio::awaitable<coetcd::member_list_result> list() {
    auto [ec, r] = co_await members.async_member_list(as_result);
    if (ec) fail("cannot list the members", ec);
    co_return r;
  }

  /// The endpoints a per-member command asks: --endpoints, or with --cluster every member's
  /// client URLs.
  asio::awaitable<std::vector<std::string>> endpoints() {
    if (!args.whole_cluster) co_return client.options().endpoints;
    std::vector<std::string> out;
    auto r = co_await list();
    for (const auto& m : r.members) out.insert(out.end(), m.client_urls.begin(), m.client_urls.end());
    co_return out;
  }

  asio::awaitable<int> member() {
    const auto& sub = args.args[0];
    if (sub == "list") {
      auto r = co_await list();
      if (json()) {
        std::vector<std::string> ms;
        for (const auto& m : r.members)
          ms.push_back(json_object()
                           .num("ID", m.id)
                           .str("name", m.name)
                           .strs("peerURLs", m.peer_urls)
                           .strs("clientURLs", m.client_urls)
                           .flag("isLearner", m.is_learner)
                           .str());
        std::printf("%s\n", json_object().obj("header", header_json(r.header)).raw("members", json_array(ms)).str().c_str());
      } else {
        for (const auto& m : r.members)
          std::printf("%s, %s, %s, %s, %s, %s\n", hex(m.id).c_str(), m.name.empty() ? "unstarted" : "started",
                      m.name.c_str(), join(m.peer_urls, ",").c_str(), join(m.client_urls, ",").c_str(),
                      m.is_learner ? "true" : "false");
      }
      co_return ok;
    }
    if (sub == "add") {
      auto [ec, r] = co_await members.async_member_add(split_commas(args.peer_urls), args.learner, as_result);
      if (ec) fail("cannot add a member at '" + args.peer_urls + "'", ec);
      std::printf("Member %16" PRIx64 " added %sto cluster %16" PRIx64 "\n", r.added.id,
                  args.learner ? "as learner " : "", r.header.cluster_id);
      std::vector<std::string> conf;
      for (const auto& m : r.members)
        for (const auto& u : m.peer_urls) conf.push_back((m.id == r.added.id ? args.args[1] : m.name) + "=" + u);
      std::printf("\nETCD_NAME=%s\nETCD_INITIAL_CLUSTER=%s\nETCD_INITIAL_ADVERTISE_PEER_URLS=%s\n"
                  "ETCD_INITIAL_CLUSTER_STATE=\"existing\"\n",
                  quote(args.args[1]).c_str(), quote(join(conf, ",")).c_str(), quote(args.peer_urls).c_str());
      co_return ok;
    }
    const auto id = parse_id("member " + sub, args.args[1]);
    error_code ec;
    coetcd::member_list_result r;
    const char* done = "";
    if (sub == "remove") {
      std::tie(ec, r) = co_await members.async_member_remove(id, as_result);
      done = "removed from";
    } else if (sub == "update") {
      std::tie(ec, r) = co_await members.async_member_update(id, split_commas(args.peer_urls), as_result);
      done = "updated in";
    } else {
      std::tie(ec, r) = co_await members.async_member_promote(id, as_result);
      done = "promoted in";
    }
    if (ec) fail("cannot " + sub + " member " + hex(id), ec);
    std::printf("Member %16" PRIx64 " %s cluster %16" PRIx64 "\n", id, done, r.header.cluster_id);
    co_return ok;
  }

  asio::awaitable<int> endpoint() {
    const auto& sub = args.args[0];
    std::vector<std::string> rows;  // json items
    int code = ok;
    for (const auto& ep : co_await endpoints()) {
      if (sub == "status") {
        auto [ec, s] = co_await ops.async_status(ep, as_result);
        if (ec) {
          std::fprintf(stderr, "coetcd: endpoint status: failed to get the status of %s: %s\n", ep.c_str(),
                       ec.message().c_str());
          code = failed;
          continue;
        }
        if (json()) {
          auto st = json_object()
                        .obj("header", header_json(s.header))
                        .str("version", s.version)
                        .num("dbSize", s.db_size)
                        .num("leader", s.leader)
                        .num("raftIndex", s.raft_index)
                        .num("raftTerm", s.raft_term)
                        .num("raftAppliedIndex", s.raft_applied_index)
                        .strs("errors", s.errors)
                        .num("dbSizeInUse", s.db_size_in_use)
                        .flag("isLearner", s.is_learner);
          rows.push_back(json_object().str("Endpoint", ep).raw("Status", st.str()).str());
        } else {
          std::printf("%s, %s, %s, %s, %s, %s, %" PRIu64 ", %" PRIu64 ", %" PRIu64 ", %s\n", ep.c_str(),
                      hex(s.header.member_id).c_str(), s.version.c_str(), human_bytes(s.db_size).c_str(),
                      s.leader == s.header.member_id ? "true" : "false", s.is_learner ? "true" : "false",
                      s.raft_term, s.raft_index, s.raft_applied_index, join(s.errors, ", ").c_str());
        }
      } else if (sub == "health") {
        auto [ec, h] = co_await ops.async_health(ep, as_result);
        if (ec) fail("cannot ask " + ep, ec);
        if (!h.healthy) code = failed;
        if (json()) {
          rows.push_back(json_object()
                             .str("endpoint", ep)
                             .raw("health", h.healthy ? "true" : "false")
                             .str("took", go_duration(h.took))
                             .str("error", h.healthy ? "" : health_error(h))
                             .str());
        } else if (h.healthy) {
          std::fprintf(stderr, "%s is healthy: successfully committed proposal: took = %s\n", ep.c_str(),
                       go_duration(h.took).c_str());
        } else {
          std::fprintf(stderr, "%s is unhealthy: failed to commit proposal: %s\n", ep.c_str(), health_error(h).c_str());
        }
      } else {
        auto [ec, h] = co_await ops.async_hash_kv(ep, 0, as_result);
        if (ec) {
          std::fprintf(stderr, "coetcd: endpoint hashkv: failed to get the hash of %s: %s\n", ep.c_str(),
                       ec.message().c_str());
          code = failed;
          continue;
        }
        if (json()) {
          auto hk = json_object().obj("header", header_json(h.header)).num("hash", std::uint64_t{h.hash}).num("compact_revision", h.compact_revision);
          rows.push_back(json_object().str("Endpoint", ep).raw("HashKV", hk.str()).str());
        } else {
          std::printf("%s, %" PRIu32 "\n", ep.c_str(), h.hash);
        }
      }
    }
    if (json()) std::printf("%s\n", json_array(rows).c_str());
    if (code != ok && sub == "health") std::fprintf(stderr, "coetcd: endpoint health: unhealthy cluster\n");
    co_return code;
  }

  asio::awaitable<int> alarm() {
    const bool disarm = args.args[0] == "disarm";
    error_code ec;
    coetcd::alarm_result r;
    // (no ?: around co_await: g++ 12 mishandles the temporaries)
    if (disarm) std::tie(ec, r) = co_await ops.async_alarm_disarm(0, coetcd::alarm_type::none, as_result);
    else std::tie(ec, r) = co_await ops.async_alarm_list(as_result);
    if (ec) fail(disarm ? "cannot disarm the alarms" : "cannot list the alarms", ec);

    if (json()) {
      std::vector<std::string> as;
      for (const auto& a : r.alarms)
        as.push_back(json_object().num("memberID", a.member_id).num("alarm", std::int64_t{static_cast<int>(a.type)}).str());
      json_object out;
      out.obj("header", header_json(r.header));
      if (!as.empty()) out.raw("alarms", json_array(as));
      std::printf("%s\n", out.str().c_str());
    } else {
      for (const auto& a : r.alarms)
        std::printf("memberID:%" PRIu64 " alarm:%s \n", a.member_id, alarm_name(a.type));
    }
    co_return ok;
  }

  asio::awaitable<int> defrag() {
    int code = ok;
    for (const auto& ep : co_await endpoints()) {
      auto [ec, h] = co_await ops.async_defragment(ep, as_result);
      if (ec) {
        std::fprintf(stderr, "Failed to defragment etcd member[%s] (%s)\n", ep.c_str(), ec.message().c_str());
        code = failed;
      } else {
        std::printf("Finished defragmenting etcd member[%s]\n", ep.c_str());
      }
    }
    co_return code;
  }

  asio::awaitable<int> snapshot() {
    const auto& path = args.args[1];
    const coetcd::snapshot_options o{.endpoint = client.options().endpoints.front()};
    auto [ec, r] = co_await ops.async_snapshot(path, o, as_result);
    if (ec) fail("cannot save a snapshot to '" + path + "'", ec);
    std::printf("Snapshot saved at %s\n", path.c_str());
    co_return ok;
  }

  asio::awaitable<int> move_leader() {
    const auto target = parse_id("move-leader", args.args[0]);
    auto [sec, s] = co_await ops.async_status(client.options().endpoints.front(), as_result);
    if (sec) fail("cannot find the leader", sec);
    auto [ec, h] = co_await ops.async_move_leader(target, as_result);
    if (ec) fail("cannot move the leadership to " + hex(target), ec);
    std::printf("Leadership transferred from %s to %s\n", hex(s.leader).c_str(), hex(target).c_str());
    co_return ok;
  }
};

}  // namespace

bool is_cluster_command(const std::string& command) {
  return command == "member" || command == "endpoint" || command == "alarm" || command == "defrag" ||
         command == "snapshot" || command == "move-leader";
}

void check_cluster_command(const cli& c) {
  const auto& a = c.args;
  const auto sub = a.empty() ? std::string() : a[0];
  auto bad = [&](const char* shape) { throw usage_error{usage, "usage: coetcd " + c.command + " " + shape}; };
  if (c.command == "member") {
    if (sub == "list") {
      if (a.size() != 1) bad("list");
    } else if (sub == "add") {
      if (a.size() != 2 || c.peer_urls.empty()) bad("add NAME --peer-urls URLS [--learner]");
    } else if (sub == "update") {
      if (a.size() != 2 || c.peer_urls.empty()) bad("update ID --peer-urls URLS");
    } else if (sub == "remove" || sub == "promote") {
      if (a.size() != 2) bad("remove|promote ID");
    } else bad("list|add|remove|update|promote ...");
  } else if (c.command == "endpoint") {
    if (a.size() != 1 || (sub != "status" && sub != "health" && sub != "hashkv")) bad("status|health|hashkv [--cluster]");
  } else if (c.command == "alarm") {
    if (a.size() != 1 || (sub != "list" && sub != "disarm")) bad("list|disarm");
  } else if (c.command == "defrag") {
    if (!a.empty()) bad("[--cluster]");
  } else if (c.command == "snapshot") {
    if (a.size() != 2 || sub != "save") bad("save FILE");
  } else if (c.command == "move-leader") {
    if (a.size() != 1) bad("ID");
  }
  if (c.write_out != "simple" && c.write_out != "json") throw usage_error{usage, "-w: simple or json, not '" + c.write_out + "'"};
  if (c.learner && !(c.command == "member" && sub == "add")) throw usage_error{usage, "--learner goes with member add"};
  if (!c.peer_urls.empty() && !(c.command == "member" && (sub == "add" || sub == "update")))
    throw usage_error{usage, "--peer-urls goes with member add and member update"};
  if (c.whole_cluster && c.command != "endpoint" && c.command != "defrag")
    throw usage_error{usage, "--cluster goes with endpoint and defrag"};
}

asio::awaitable<int> run_cluster_command(const cli& c, coetcd::client& client) {
  runner r{c, client};
  if (c.command == "member") co_return co_await r.member();
  if (c.command == "endpoint") co_return co_await r.endpoint();
  if (c.command == "alarm") co_return co_await r.alarm();
  if (c.command == "defrag") co_return co_await r.defrag();
  if (c.command == "snapshot") co_return co_await r.snapshot();
  co_return co_await r.move_leader();
}

}  // namespace coetcd_cli
