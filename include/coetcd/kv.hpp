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
  std::uint64_t cluster_id = 0;  ///< ID of the cluster that answered
  std::uint64_t member_id = 0;   ///< ID of the member that answered
  std::int64_t revision = 0;  ///< store revision when the request was applied
  std::uint64_t raft_term = 0;   ///< raft term when the request was applied
};

/// A key and its metadata, as etcd stores them.
struct key_value {
  std::string key;                   ///< the key (bytes)
  std::string value;                 ///< the value (bytes)
  std::int64_t create_revision = 0;  ///< revision of the put that created the key
  std::int64_t mod_revision = 0;     ///< revision of its last put (a watch's delete: of the delete)
  std::int64_t version = 0;          ///< puts since its creation (0: deleted)
  std::int64_t lease = 0;            ///< lease the key is attached to (0: none)
};

/// Order of a get's keys.
enum class sort_order { none, ascend, descend };
/// @var sort_order::none
/// etcd's order: by key, ascending.
/// @var sort_order::ascend
/// Ascending by get_options::target.
/// @var sort_order::descend
/// Descending by get_options::target.

/// What a get's keys are sorted by.
enum class sort_target { key, version, create_revision, mod_revision, value };
/// @var sort_target::key
/// The key (bytes).
/// @var sort_target::version
/// key_value::version.
/// @var sort_target::create_revision
/// key_value::create_revision.
/// @var sort_target::mod_revision
/// key_value::mod_revision.
/// @var sort_target::value
/// The value (bytes).

// Option structs are trivially destructible on purpose: g++ 12.2 destroys brace-initialised
// temporaries with non-trivial destructors twice when they live across a co_await, so
// `co_await c.async_get("k", {.prefix = true}, use_awaitable)` must not create one. Views in
// options are copied when the operation is initiated.

/// Options of a get (etcd Range). By default a get reads the single key given.
struct get_options {
  /// Read [key, range_end). Ignored when `prefix` or `from_key` is set. Mind that `"\0"` as a
  /// C++ string literal is an empty view (one key): for "every key >= key" set `from_key`.
  std::string_view range_end;
  bool prefix = false;        ///< read every key starting with `key` (an empty key: every key of the client's namespace, or of the cluster)
  std::int64_t limit = 0;     ///< at most this many keys (0: no limit)
  std::int64_t revision = 0;  ///< read at this revision (0: latest)
  sort_order order = sort_order::none;     ///< order of the keys returned
  sort_target target = sort_target::key;  ///< what `order` sorts by
  bool serializable = false;  ///< serve from the contacted member without a quorum read
  bool keys_only = false;     ///< return keys without their values
  bool count_only = false;    ///< return only get_result::count, no keys
  std::int64_t min_mod_revision = 0;     ///< only keys modified at or after this revision (0: any)
  std::int64_t max_mod_revision = 0;     ///< only keys modified at or before this revision (0: any)
  std::int64_t min_create_revision = 0;  ///< only keys created at or after this revision (0: any)
  std::int64_t max_create_revision = 0;  ///< only keys created at or before this revision (0: any)
  bool from_key = false;      ///< read every key >= `key` (Go's WithFromKey; range end "\0"; an empty key: as `prefix`); last, so positional initialisers keep their meaning
};

/// The answer to a get.
struct get_result {
  response_header header;      ///< the response's header
  std::vector<key_value> kvs;  ///< the keys read (without values when `keys_only`)
  bool more = false;        ///< more keys exist in the range than `limit` returned
  std::int64_t count = 0;   ///< number of keys in the range
};

/// Options of a put.
struct put_options {
  std::int64_t lease = 0;      ///< attach the key to this lease (0: none)
  bool prev_kv = false;        ///< return the previous key-value pair
  bool ignore_value = false;   ///< keep the current value (key must exist)
  bool ignore_lease = false;   ///< keep the current lease (key must exist)
};

/// The answer to a put.
struct put_result {
  response_header header;            ///< the response's header
  std::optional<key_value> prev_kv;  ///< the pair before, if put_options::prev_kv and there was one
};

/// Options of a delete (etcd DeleteRange). By default a delete removes the single key given.
struct delete_options {
  std::string_view range_end;   ///< delete [key, range_end); ignored when `prefix` or `from_key` is set
  bool prefix = false;     ///< delete every key starting with `key` (an empty key: every key of the client's namespace; refused without one)
  bool prev_kv = false;    ///< return the deleted pairs
  bool from_key = false;   ///< delete every key >= `key` (an empty key: as `prefix`)
};

/// The answer to a delete.
struct delete_result {
  response_header header;           ///< the response's header
  std::int64_t deleted = 0;         ///< number of keys deleted
  std::vector<key_value> prev_kvs;  ///< the deleted pairs, when delete_options::prev_kv was set
};

static_assert(std::is_trivially_destructible_v<get_options>);
static_assert(std::is_trivially_destructible_v<put_options>);
static_assert(std::is_trivially_destructible_v<delete_options>);

/// The range end that covers every key starting with `prefix` (etcd's prefix convention).
std::string prefix_range_end(std::string_view prefix);

}  // namespace coetcd
