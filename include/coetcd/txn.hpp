// etcd transactions: if every compare holds, run the `then` operations, else the `otherwise` ones,
// atomically at one revision. Operations may be gets, puts, deletes and nested txns.
#pragma once

#include <coetcd/kv.hpp>

#include <concepts>
#include <cstdint>
#include <memory>
#include <string>
#include <variant>
#include <vector>

namespace coetcd {

enum class compare_op { equal, greater, less, not_equal };

/// One condition of a txn. Build with the named constructors:
///   compare::version("k") == 0, compare::value("k") != "x", compare::create_revision("k") < 5
class compare {
 public:
  enum class target { version, create_revision, mod_revision, value, lease };

  static compare version(std::string key) { return compare(target::version, std::move(key)); }
  static compare create_revision(std::string key) { return compare(target::create_revision, std::move(key)); }
  static compare mod_revision(std::string key) { return compare(target::mod_revision, std::move(key)); }
  static compare value(std::string key) { return compare(target::value, std::move(key)); }
  static compare lease(std::string key) { return compare(target::lease, std::move(key)); }

  /// Compare every key in [key, range_end) instead of one key ("\0": all keys >= key).
  compare& range(std::string range_end) { range_end_ = std::move(range_end); return *this; }
  /// Compare every key starting with the key.
  compare& prefix();

  template <std::integral T>
  compare operator==(T v) const { return with(compare_op::equal, static_cast<std::int64_t>(v)); }
  template <std::integral T>
  compare operator!=(T v) const { return with(compare_op::not_equal, static_cast<std::int64_t>(v)); }
  template <std::integral T>
  compare operator<(T v) const { return with(compare_op::less, static_cast<std::int64_t>(v)); }
  template <std::integral T>
  compare operator>(T v) const { return with(compare_op::greater, static_cast<std::int64_t>(v)); }
  compare operator==(std::string v) const { return with(compare_op::equal, std::move(v)); }
  compare operator!=(std::string v) const { return with(compare_op::not_equal, std::move(v)); }
  compare operator<(std::string v) const { return with(compare_op::less, std::move(v)); }
  compare operator>(std::string v) const { return with(compare_op::greater, std::move(v)); }
  compare operator==(const char* v) const { return *this == std::string(v); }
  compare operator!=(const char* v) const { return *this != std::string(v); }

  target what() const noexcept { return target_; }
  compare_op op() const noexcept { return op_; }
  const std::string& key() const noexcept { return key_; }
  const std::string& range_end() const noexcept { return range_end_; }
  const std::variant<std::int64_t, std::string>& operand() const noexcept { return operand_; }

 private:
  compare(target t, std::string key) : target_(t), key_(std::move(key)) {}
  compare with(compare_op op, std::variant<std::int64_t, std::string> v) const {
    compare c = *this;
    c.op_ = op;
    c.operand_ = std::move(v);
    return c;
  }

  target target_;
  compare_op op_ = compare_op::equal;
  std::string key_;
  std::string range_end_;
  std::variant<std::int64_t, std::string> operand_ = std::int64_t{0};
};

class txn;

/// One operation inside a txn.
class txn_op {
 public:
  // Each operation owns its strings; `range_end` is the owned copy of options.range_end.
  struct get_op { std::string key; std::string range_end; get_options options; };
  struct put_op { std::string key; std::string value; put_options options; };
  struct delete_op { std::string key; std::string range_end; delete_options options; };

  static txn_op get(std::string_view key, get_options o = {}) {
    return txn_op(get_op{std::string(key), std::string(o.range_end), o});
  }
  static txn_op put(std::string_view key, std::string_view value, put_options o = {}) {
    return txn_op(put_op{std::string(key), std::string(value), o});
  }
  static txn_op del(std::string_view key, delete_options o = {}) {
    return txn_op(delete_op{std::string(key), std::string(o.range_end), o});
  }
  static txn_op nested(txn t);

  const auto& value() const noexcept { return value_; }

 private:
  template <class T>
  explicit txn_op(T v) : value_(std::move(v)) {}
  std::variant<get_op, put_op, delete_op, std::shared_ptr<const txn>> value_;
};

/// A transaction under construction: txn().when(...).then(...).otherwise(...).
class txn {
 public:
  txn& when(compare c) { compares_.push_back(std::move(c)); return *this; }
  txn& then(txn_op op) { success_.push_back(std::move(op)); return *this; }
  txn& otherwise(txn_op op) { failure_.push_back(std::move(op)); return *this; }

  const std::vector<compare>& compares() const noexcept { return compares_; }
  const std::vector<txn_op>& success() const noexcept { return success_; }
  const std::vector<txn_op>& failure() const noexcept { return failure_; }

 private:
  std::vector<compare> compares_;
  std::vector<txn_op> success_;
  std::vector<txn_op> failure_;
};

inline txn_op txn_op::nested(txn t) { return txn_op(std::make_shared<const txn>(std::move(t))); }

struct op_result;

struct txn_result {
  response_header header;
  bool succeeded = false;             ///< every compare held: the `then` branch ran
  std::vector<op_result> responses;   ///< one per operation of the branch that ran
};

/// The result of one txn operation: which alternative matches the operation's kind.
struct op_result {
  std::variant<get_result, put_result, delete_result, txn_result> value;

  const get_result& get() const { return std::get<get_result>(value); }
  const put_result& put() const { return std::get<put_result>(value); }
  const delete_result& del() const { return std::get<delete_result>(value); }
  const txn_result& nested() const { return std::get<txn_result>(value); }
};

}  // namespace coetcd
