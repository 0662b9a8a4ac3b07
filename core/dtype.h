// Element types. f64 exists for gradient checks on the CPU; bf16/f16 are storage types whose
// arithmetic is done in f32 (that is what the GPU kernels do too).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

namespace keel {

enum class DType : uint8_t { f32, f64, bf16, f16, i32, i64 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);  // "f32", "bf16", ...
bool is_floating(DType t);        // f32, f64, bf16, f16

// bfloat16: the top 16 bits of an f32. Conversion rounds to nearest even, NaN stays NaN.
struct bf16 {
  uint16_t bits = 0;
  bf16() = default;
  explicit bf16(float f) {
    uint32_t u = std::bit_cast<uint32_t>(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep it quiet, never round it to inf
      bits = static_cast<uint16_t>((u >> 16) | 0x40);
      return;
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    bits = static_cast<uint16_t>(u >> 16);
  }
  operator float() const { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }
};

// IEEE binary16. Conversion rounds to nearest even; overflow becomes inf, tiny values denormals.
struct f16 {
  uint16_t bits = 0;
  f16() = default;
  explicit f16(float f);
  operator float() const;
};

template <typename T> struct dtype_of_t;
template <> struct dtype_of_t<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of_t<double> { static constexpr DType value = DType::f64; };
template <> struct dtype_of_t<bf16> { static constexpr DType value = DType::bf16; };
template <> struct dtype_of_t<f16> { static constexpr DType value = DType::f16; };
template <> struct dtype_of_t<int32_t> { static constexpr DType value = DType::i32; };
template <> struct dtype_of_t<int64_t> { static constexpr DType value = DType::i64; };
template <typename T> inline constexpr DType dtype_of = dtype_of_t<T>::value;

// The one dtype dispatch of keel's host code: calls f.template operator()<T>() with T the C++
// type of `t`, chosen from a set of types, so a kernel is written once as a template:
//   visit_dtype<CpuFloat>(x.dtype(), "gelu", [&]<typename T>() { ... x.data<T>() ... });
// A dtype outside the set raises DTypeError naming `op` and the dtypes it accepts. The form
// without a set and without `op` accepts every dtype (copies, fills, communication).
template <typename... Ts> struct DTypes {};
using AnyDType = DTypes<float, double, bf16, f16, int32_t, int64_t>;
using FloatDType = DTypes<float, double, bf16, f16>;  // every floating type (storage included)
using CpuFloat = DTypes<float, double>;              // what the CPU kernels compute in
using IndexDType = DTypes<int32_t, int64_t>;         // token ids, targets, argmax

// Raises DTypeError: `op` got `t`, which is none of `accepted`; the hint names the first one.
[[noreturn]] void throw_dtype_not_in(const char* op, DType t, const DType* accepted, size_t n);

namespace detail {
template <typename F, typename T, typename... Rest>
decltype(auto) visit_first_match(DType t, F& f) {
  if constexpr (sizeof...(Rest) == 0) return f.template operator()<T>();
  else if (t == dtype_of<T>) return f.template operator()<T>();
  else return visit_first_match<F, Rest...>(t, f);
}
}  // namespace detail

template <typename Set, typename F>
decltype(auto) visit_dtype(DType t, const char* op, F&& f) {
  return [&]<typename... Ts>(DTypes<Ts...>) -> decltype(auto) {
    if (!((t == dtype_of<Ts>) || ...)) {
      static constexpr DType accepted[] = {dtype_of<Ts>...};
      throw_dtype_not_in(op, t, accepted, sizeof...(Ts));
    }
    return detail::visit_first_match<F, Ts...>(t, f);
  }(Set{});
}

template <typename F>
decltype(auto) visit_dtype(DType t, F&& f) {
  return visit_dtype<AnyDType>(t, "visit_dtype", std::forward<F>(f));
}

}  // namespace keel
