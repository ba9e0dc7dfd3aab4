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

/// How a compare's subject is compared with its operand.
enum class compare_op { equal, greater, less, not_equal };
/// @var compare_op::equal
/// `==`
/// @var compare_op::greater
/// `>`
/// @var compare_op::less
/// `<`
/// @var compare_op::not_equal
/// `!=`

/// One condition of a txn. Build with the named constructors:
///   compare::version("k") == 0, compare::value("k") != "x", compare::create_revision("k") < 5
/// Revisions, versions and leases compare with integers and values with strings; the other
/// way round does not compile (a revision compared with its decimal text would compare with
/// something else on the server).
class compare {
 public:
  /// What a compare looks at.
  enum class target { version, create_revision, mod_revision, value, lease };
  /// @var target::version
  /// key_value::version
  /// @var target::create_revision
  /// key_value::create_revision
  /// @var target::mod_revision
  /// key_value::mod_revision
  /// @var target::value
  /// key_value::value
  /// @var target::lease
  /// key_value::lease
  class number;
  class text;

  /// The key's version (puts since its creation; 0: the key does not exist).
  static number version(std::string key);
  /// The key's create revision (0: the key does not exist).
  static number create_revision(std::string key);
  /// The key's mod revision (0: the key does not exist).
  static number mod_revision(std::string key);
  /// The key's lease (0: none).
  static number lease(std::string key);
  /// The key's value.
  static text value(std::string key);

  /// What is compared.
  target what() const noexcept { return target_; }
  /// How it is compared.
  compare_op op() const noexcept { return op_; }
  /// The key (the first of the range, if there is one).
  const std::string& key() const noexcept { return key_; }
  /// End of the range of keys compared (empty: the key alone).
  const std::string& range_end() const noexcept { return range_end_; }
  /// What it is compared with: an integer, or a string for a value.
  const std::variant<std::int64_t, std::string>& operand() const noexcept { return operand_; }

 private:
  template <class Subject, class Operand>
  friend class compare_subject;
  compare(target t, std::string key, std::string range_end, compare_op op, std::variant<std::int64_t, std::string> v)
      : target_(t), op_(op), key_(std::move(key)), range_end_(std::move(range_end)), operand_(std::move(v)) {}

  target target_;
  compare_op op_ = compare_op::equal;
  std::string key_;
  std::string range_end_;
  std::variant<std::int64_t, std::string> operand_ = std::int64_t{0};
};

/// The left side of a compare: what is compared, of which keys.
template <class Subject, class Operand>
class compare_subject {
 public:
  /// Compare every key in [key, range_end). Mind that `"\0"` written as a C++ string literal is
  /// an empty string: for "every key >= key" use from_key().
  Subject& range(std::string range_end) {
    range_end_ = std::move(range_end);
    return static_cast<Subject&>(*this);
  }
  /// Compare every key starting with the key.
  Subject& prefix() {
    range_end_ = prefix_range_end(key_);
    return static_cast<Subject&>(*this);
  }
  /// Compare every key >= the key (etcd's range end "\0").
  Subject& from_key() {
    range_end_ = std::string(1, '\0');
    return static_cast<Subject&>(*this);
  }

 /// @cond INTERNAL
 protected:
  compare_subject(compare::target t, std::string key) : target_(t), key_(std::move(key)) {}
  compare with(compare_op op, Operand v) const {
    return compare(target_, key_, range_end_, op, std::variant<std::int64_t, std::string>(std::move(v)));
  }
  /// @endcond

 private:
  compare::target target_;
  std::string key_;
  std::string range_end_;
};

/// A version, create or mod revision, or lease: compared with integers.
class compare::number : public compare_subject<compare::number, std::int64_t> {
 public:
  /// Holds when the number equals `v`.
  template <std::integral T>
  compare operator==(T v) const { return with(compare_op::equal, static_cast<std::int64_t>(v)); }
  /// Holds when the number differs from `v`.
  template <std::integral T>
  compare operator!=(T v) const { return with(compare_op::not_equal, static_cast<std::int64_t>(v)); }
  /// Holds when the number is less than `v`.
  template <std::integral T>
  compare operator<(T v) const { return with(compare_op::less, static_cast<std::int64_t>(v)); }
  /// Holds when the number is greater than `v`.
  template <std::integral T>
  compare operator>(T v) const { return with(compare_op::greater, static_cast<std::int64_t>(v)); }

 private:
  friend class compare;
  number(target t, std::string key) : compare_subject(t, std::move(key)) {}
};

/// A value: compared with strings (bytes).
class compare::text : public compare_subject<compare::text, std::string> {
 public:
  /// Holds when the value equals `v`.
  compare operator==(std::string_view v) const { return with(compare_op::equal, std::string(v)); }
  /// Holds when the value differs from `v`.
  compare operator!=(std::string_view v) const { return with(compare_op::not_equal, std::string(v)); }
  /// Holds when the value is less than `v` (bytewise).
  compare operator<(std::string_view v) const { return with(compare_op::less, std::string(v)); }
  /// Holds when the value is greater than `v` (bytewise).
  compare operator>(std::string_view v) const { return with(compare_op::greater, std::string(v)); }
  // An integer is not a value (and a literal 0 would pass as a null `const char*`).
  /// Does not compile: a value compares with strings.
  template <std::integral T>
  compare operator==(T) const = delete;
  /// Does not compile: a value compares with strings.
  template <std::integral T>
  compare operator!=(T) const = delete;
  /// Does not compile: a value compares with strings.
  template <std::integral T>
  compare operator<(T) const = delete;
  /// Does not compile: a value compares with strings.
  template <std::integral T>
  compare operator>(T) const = delete;

 private:
  friend class compare;
  text(target t, std::string key) : compare_subject(t, std::move(key)) {}
};

inline compare::number compare::version(std::string key) { return number(target::version, std::move(key)); }
inline compare::number compare::create_revision(std::string key) {
  return number(target::create_revision, std::move(key));
}
inline compare::number compare::mod_revision(std::string key) { return number(target::mod_revision, std::move(key)); }
inline compare::number compare::lease(std::string key) { return number(target::lease, std::move(key)); }
inline compare::text compare::value(std::string key) { return text(target::value, std::move(key)); }

class txn;

/// One operation inside a txn.
class txn_op {
 public:
  // Each operation owns its strings; `range_end` is the owned copy of options.range_end.
  /// A get (see get()).
  struct get_op { std::string key; std::string range_end; get_options options; };
  /// A put (see put()).
  struct put_op { std::string key; std::string value; put_options options; };
  /// A delete (see del()).
  struct delete_op { std::string key; std::string range_end; delete_options options; };
  /// @var get_op::key
  /// The key read.
  /// @var get_op::range_end
  /// Owned copy of options.range_end (the view in `options` is not used).
  /// @var get_op::options
  /// The get's options.
  /// @var put_op::key
  /// The key written.
  /// @var put_op::value
  /// The value written.
  /// @var put_op::options
  /// The put's options.
  /// @var delete_op::key
  /// The key deleted.
  /// @var delete_op::range_end
  /// Owned copy of options.range_end (the view in `options` is not used).
  /// @var delete_op::options
  /// The delete's options.

  /// Reads `key` as client::async_get does; `key` and `o.range_end` are copied.
  static txn_op get(std::string_view key, get_options o = {}) {
    return txn_op(get_op{std::string(key), std::string(o.range_end), o});
  }
  /// Writes `key` as client::async_put does; `key` and `value` are copied.
  static txn_op put(std::string_view key, std::string_view value, put_options o = {}) {
    return txn_op(put_op{std::string(key), std::string(value), o});
  }
  /// Deletes as client::async_delete does; `key` and `o.range_end` are copied.
  static txn_op del(std::string_view key, delete_options o = {}) {
    return txn_op(delete_op{std::string(key), std::string(o.range_end), o});
  }
  /// Runs `t` inside this txn (its result: op_result::nested()).
  static txn_op nested(txn t);

  /// The operation: a get_op, put_op, delete_op, or a nested txn.
  const auto& value() const noexcept { return value_; }

 private:
  template <class T>
  explicit txn_op(T v) : value_(std::move(v)) {}
  std::variant<get_op, put_op, delete_op, std::shared_ptr<const txn>> value_;
};

/// A transaction under construction: txn().when(...).then(...).otherwise(...).
class txn {
 public:
  /// Adds a condition: the `then` branch runs only if every condition holds.
  txn& when(compare c) { compares_.push_back(std::move(c)); return *this; }
  /// Adds several conditions: a multi_lock::hold's fence(), say.
  txn& when(std::vector<compare> cs) {
    for (auto& c : cs) compares_.push_back(std::move(c));
    return *this;
  }
  /// Adds an operation to the branch that runs when every condition holds.
  txn& then(txn_op op) { success_.push_back(std::move(op)); return *this; }
  /// Adds an operation to the branch that runs otherwise.
  txn& otherwise(txn_op op) { failure_.push_back(std::move(op)); return *this; }

  /// The conditions, in the order added.
  const std::vector<compare>& compares() const noexcept { return compares_; }
  /// The `then` operations, in the order added.
  const std::vector<txn_op>& success() const noexcept { return success_; }
  /// The `otherwise` operations, in the order added.
  const std::vector<txn_op>& failure() const noexcept { return failure_; }

 private:
  std::vector<compare> compares_;
  std::vector<txn_op> success_;
  std::vector<txn_op> failure_;
};

inline txn_op txn_op::nested(txn t) { return txn_op(std::make_shared<const txn>(std::move(t))); }

struct op_result;

/// The answer to a txn (client::async_txn, or a nested txn's op_result).
struct txn_result {
  response_header header;             ///< the response's header
  bool succeeded = false;             ///< every compare held: the `then` branch ran
  std::vector<op_result> responses;   ///< one per operation of the branch that ran
};

/// The result of one txn operation: which alternative matches the operation's kind.
struct op_result {
  std::variant<get_result, put_result, delete_result, txn_result> value;  ///< the result

  /// The result of a get; throws std::bad_variant_access for another kind.
  const get_result& get() const { return std::get<get_result>(value); }
  /// The result of a put; throws std::bad_variant_access for another kind.
  const put_result& put() const { return std::get<put_result>(value); }
  /// The result of a delete; throws std::bad_variant_access for another kind.
  const delete_result& del() const { return std::get<delete_result>(value); }
  /// The result of a nested txn; throws std::bad_variant_access for another kind.
  const txn_result& nested() const { return std::get<txn_result>(value); }
};

}  // namespace coetcd
