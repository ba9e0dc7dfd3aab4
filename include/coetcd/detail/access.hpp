// detail::access: how coetcd's own types reach a public object's shared state, kept out of the
// public members so that nothing internal reads as API.
#pragma once

namespace coetcd::detail {

/// The only friend of the public types that keep their state behind a shared_ptr: `impl_` of a
/// client, `state_` of a session or a hold. Library code, never user code.
struct access {
  template <class T>
  static const auto& impl(const T& t) noexcept {
    return t.impl_;
  }
  template <class T>
  static const auto& state(const T& t) noexcept {
    return t.state_;
  }
};

}  // namespace coetcd::detail
