#include "core/dtype.h"

#include <cstring>

#include "core/error.h"

namespace keel {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::i32: return 4;
    case DType::i64: return 8;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
  }
  return "?";
}

void throw_dtype_not_in(const char* op, DType t, const DType* accepted, size_t n) {
  std::string list;
  for (size_t i = 0; i < n; ++i) list += std::string(i == 0 ? "" : i + 1 == n ? " or " : ", ") + dtype_name(accepted[i]);
  throw DTypeError(op, "expected " + list + ", got " + dtype_name(t),
                   std::string("convert with .to(DType::") + dtype_name(accepted[0]) + ")");
}

bool is_floating(DType t) { return t == DType::f32 || t == DType::f64 || t == DType::bf16 || t == DType::f16; }

// Float -> half by hand (the host compiler has no portable _Float16 here). The logic follows the
// bit layouts: f32 = 1 sign, 8 exponent (bias 127), 23 mantissa; f16 = 1, 5 (bias 15), 10.
f16::f16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t mag = x & 0x7fffffffu;
  if (mag > 0x7f800000u) {  // NaN
    bits = static_cast<uint16_t>(sign | 0x7e00u);
    return;
  }
  if (mag >= 0x477ff000u) {  // rounds to >= 65520: overflow to inf
    bits = static_cast<uint16_t>(sign | 0x7c00u);
    return;
  }
  if (mag < 0x38800000u) {  // below the smallest normal half (2^-14): denormal or zero
    // Add 0.5 (as a float) so the FPU's round-to-nearest-even does the rounding for us.
    float d = std::bit_cast<float>(mag) + 0.5f;
    bits = static_cast<uint16_t>(sign | (std::bit_cast<uint32_t>(d) - 0x3f000000u));
    return;
  }
  uint32_t odd = (mag >> 13) & 1u;
  mag += 0xc8000fffu + odd;  // rebias exponent (-112 << 23) and round to nearest even
  bits = static_cast<uint16_t>(sign | (mag >> 13));
}

f16::operator float() const {
  uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  uint32_t exp = (bits >> 10) & 0x1fu;
  uint32_t man = bits & 0x3ffu;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (man << 13));  // inf/NaN
  if (exp == 0) {  // zero or denormal: value = man * 2^-24
    float v = static_cast<float>(man) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (man << 13));
}

}  // namespace keel
