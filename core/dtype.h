// Element types. f64 exists for gradient checks on the CPU; bf16/f16 are storage types whose
// arithmetic is done in f32 (that is what the GPU kernels do too).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>

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

// Calls f.template operator()<T>() with the C++ type T of `t`:
//   visit_dtype(x.dtype(), [&]<typename T>() { fill<T>(...); });
template <typename F>
decltype(auto) visit_dtype(DType t, F&& f) {
  switch (t) {
    case DType::f32: return f.template operator()<float>();
    case DType::f64: return f.template operator()<double>();
    case DType::bf16: return f.template operator()<bf16>();
    case DType::f16: return f.template operator()<f16>();
    case DType::i32: return f.template operator()<int32_t>();
    case DType::i64: return f.template operator()<int64_t>();
  }
  return f.template operator()<float>();  // unreachable: every enumerator is handled above
}

}  // namespace keel
