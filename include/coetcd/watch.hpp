// Plain value types for etcd watches.
#pragma once

#include <coetcd/kv.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace coetcd {

/// Options of a watch (client::async_watch). Trivially destructible, like the KV option
/// structs (see kv.hpp).
struct watch_options {
  std::string_view range_end;           ///< watch [key, range_end); ignored when `prefix` or `from_key` is set
  bool prefix = false;              ///< watch every key starting with the key (an empty key: every key of the client's namespace, or of the cluster)
  std::int64_t start_revision = 0;  ///< first revision to report (0: changes after creation)
  bool prev_kv = false;             ///< report each changed key's previous value
  bool no_put = false;              ///< do not report puts
  bool no_delete = false;           ///< do not report deletes
  bool progress_notify = false;     ///< let the server send empty progress batches when idle
  bool from_key = false;            ///< watch every key >= the key (an empty key: as `prefix`)
};

static_assert(std::is_trivially_destructible_v<watch_options>);

/// One change of a key.
struct watch_event {
  /// Whether the key was put or deleted.
  enum class kind { put, del };
  /// @var kind::put
  /// The key was put (created or modified).
  /// @var kind::del
  /// The key was deleted.
  kind type = kind::put;            ///< what happened
  key_value kv;                     ///< for a delete: the key and the deletion's mod_revision
  std::optional<key_value> prev_kv; ///< when watch_options::prev_kv was set and there was one
};

/// What one async_next delivers: the events of one or more revisions, in revision order.
/// An empty `events` is a progress notification: everything up to header.revision was reported.
struct watch_batch {
  response_header header;           ///< the response's header
  std::vector<watch_event> events;  ///< in revision order; empty for a progress notification
  /// Set with error::compacted: the oldest revision still available. Re-read state, re-watch from it.
  std::int64_t compact_revision = 0;
};

}  // namespace coetcd
