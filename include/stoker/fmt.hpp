// stoker/fmt.hpp: opt-in {fmt} formatters for stoker's printable types, so that
// fmt::format("{}", x) works for a MemoryEstimate, a Diagnosis, a Verdict, a Shape and a DType.
// Each is built on the type's to_string(); stoker itself neither needs nor exposes {fmt}: include
// this header (and link fmt::fmt) only in code that formats with {fmt}.
#pragma once

#include <string>
#include <string_view>

#include <fmt/format.h>

#include "stoker/diagnose.hpp"
#include "stoker/memory.hpp"
#include "stoker/tensor.hpp"

namespace stoker::detail {

// A formatter of T that writes to_string(value) as a string would be written.
template <class T>
struct ToStringFormatter : fmt::formatter<std::string_view> {
  auto format(const T& value, fmt::format_context& ctx) const {
    const std::string text(to_string(value));
    return fmt::formatter<std::string_view>::format(text, ctx);
  }
};

}  // namespace stoker::detail

template <>
struct fmt::formatter<stoker::MemoryEstimate>
    : stoker::detail::ToStringFormatter<stoker::MemoryEstimate> {};
template <>
struct fmt::formatter<stoker::Diagnosis> : stoker::detail::ToStringFormatter<stoker::Diagnosis> {};
template <>
struct fmt::formatter<stoker::Verdict> : stoker::detail::ToStringFormatter<stoker::Verdict> {};
template <>
struct fmt::formatter<stoker::Shape> : fmt::formatter<std::string_view> {
  auto format(const stoker::Shape& shape, fmt::format_context& ctx) const {
    const std::string text = shape.to_string();
    return fmt::formatter<std::string_view>::format(text, ctx);
  }
};
template <>
struct fmt::formatter<stoker::DType> : fmt::formatter<std::string_view> {
  auto format(stoker::DType dtype, fmt::format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(stoker::dtype_name(dtype), ctx);
  }
};
