// Plain value types for etcd's key-value API. No protobuf type appears in coetcd's public headers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace coetcd {

/// The header etcd attaches to every response.
struct response_header {
  std::uint64_t cluster_id = 0;
  std::uint64_t member_id = 0;
  std::int64_t revision = 0;  ///< store revision when the request was applied
  std::uint64_t raft_term = 0;
};

struct key_value {
  std::string key;
  std::string value;
  std::int64_t create_revision = 0;
  std::int64_t mod_revision = 0;
  std::int64_t version = 0;
  std::int64_t lease = 0;
};

enum class sort_order { none, ascend, descend };
enum class sort_target { key, version, create_revision, mod_revision, value };

// Option structs are trivially destructible on purpose: g++ 12.2 destroys brace-initialised
// temporaries with non-trivial destructors twice when they live across a co_await, so
// `co_await c.async_get("k", {.prefix = true}, use_awaitable)` must not create one. Views in
// options are copied when the operation is initiated.

/// Options of a get (etcd Range). By default a get reads the single key given.
struct get_options {
  /// Read [key, range_end). Ignored when `prefix` or `from_key` is set. Mind that `"\0"` as a
  /// C++ string literal is an empty view (one key): for "every key >= key" set `from_key`.
  std::string_view range_end;
  bool prefix = false;        ///< read every key starting with `key`
  std::int64_t limit = 0;     ///< at most this many keys (0: no limit)
  std::int64_t revision = 0;  ///< read at this revision (0: latest)
  sort_order order = sort_order::none;
  sort_target target = sort_target::key;
  bool serializable = false;  ///< serve from the contacted member without a quorum read
  bool keys_only = false;
  bool count_only = false;
  std::int64_t min_mod_revision = 0;
  std::int64_t max_mod_revision = 0;
  std::int64_t min_create_revision = 0;
  std::int64_t max_create_revision = 0;
  bool from_key = false;      ///< read every key >= `key` (Go's WithFromKey; range end "\0"); last, so positional initialisers keep their meaning
};

struct get_result {
  response_header header;
  std::vector<key_value> kvs;
  bool more = false;        ///< more keys exist in the range than `limit` returned
  std::int64_t count = 0;   ///< number of keys in the range
};

struct put_options {
  std::int64_t lease = 0;      ///< attach the key to this lease (0: none)
  bool prev_kv = false;        ///< return the previous key-value pair
  bool ignore_value = false;   ///< keep the current value (key must exist)
  bool ignore_lease = false;   ///< keep the current lease (key must exist)
};

struct put_result {
  response_header header;
  std::optional<key_value> prev_kv;
};

struct delete_options {
  std::string_view range_end;   ///< delete [key, range_end); ignored when `prefix` or `from_key` is set
  bool prefix = false;     ///< delete every key starting with `key`
  bool prev_kv = false;    ///< return the deleted pairs
  bool from_key = false;   ///< delete every key >= `key`
};

struct delete_result {
  response_header header;
  std::int64_t deleted = 0;
  std::vector<key_value> prev_kvs;
};

static_assert(std::is_trivially_destructible_v<get_options>);
static_assert(std::is_trivially_destructible_v<put_options>);
static_assert(std::is_trivially_destructible_v<delete_options>);

/// The range end that covers every key starting with `prefix` (etcd's prefix convention).
std::string prefix_range_end(std::string_view prefix);

}  // namespace coetcd
