// exp for the CPU's softmax-shaped kernels (cross-entropy, attention): for f32 in plain
// arithmetic, which the compiler turns into vector instructions (8 floats at a time on AVX2)
// wherever it sits in a simple loop over an array.
//
// The softmax-shaped kernels take exp of x - max, x - lse: arguments at or below zero. Eigen's
// vectorized exp also handles the whole float range, infinities and overflow, and pays for it in
// every element; this one is the same method and polynomial (Cody-Waite reduction by ln 2, then
// the Cephes degree-6 polynomial for exp on [-ln2/2, ln2/2]) without those branches, and 2^k
// built straight into the exponent bits: about half of Eigen's instructions, and 1.02 ulp at
// worst over [-87.3, 0] against double exp (Eigen's: 1.25). Every operation is a single IEEE
// rounding (the multiply-adds are keel::fmadd, core/fma.h), so the vector and scalar loops give
// the same bits.
#pragma once

#include <Eigen/Core>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/fma.h"

namespace keel::cpu {

// x <= 88 -> exp(x): 1.02 ulp from 88 down to -87.3, where exp reaches float's smallest normal
// number (1.2e-38); below, a denormal or 0, and 0 from -88 down (-inf included); NaN for NaN (the
// comparison passes it through). Past 88.7 k no longer fits the exponent field and the result is
// meaningless: the callers pass x - max or x - lse, never above 0.
inline float exp_f32(float x) {
  x = x < -88.0f ? -88.0f : x;  // one vector max, NaN kept
  // k = round(x / ln 2): adding 1.5 * 2^23 leaves the integer k in t's low mantissa bits.
  const float shifter = 12582912.0f;
  const float t = fmadd(x, 1.44269504088896341f, shifter);
  const float k = t - shifter;
  // r = x - k ln 2 in two steps (ln 2 = 0.693359375 - 2.12194440e-4, the first exact in a few
  // bits), so r is exact to float precision: |r| <= ln2 / 2.
  float r = fmadd(k, -0.693359375f, x);
  r = fmadd(k, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = fmadd(p, r, 1.3981999507e-3f);
  p = fmadd(p, r, 8.3334519073e-3f);
  p = fmadd(p, r, 4.1665795894e-2f);
  p = fmadd(p, r, 1.6666665459e-1f);
  p = fmadd(p, r, 5.0000001201e-1f);
  p = fmadd(p * r, r, r) + 1.0f;  // exp(r) = 1 + r + r^2 p(r)
  // 2^k: k + 127 into the exponent field. k is in [-127, 127]; at -127 the field is 0 and so is
  // the result, which is what x <= -88 asks for.
  uint32_t bits;
  std::memcpy(&bits, &t, sizeof bits);
  bits = (bits << 23) + (127u << 23);  // t's low 9 bits are k mod 512
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

// x (n), shift -> out (n) = exp_f32(x - shift); out may be x.
inline void exp_shifted(const float* x, int64_t n, float shift, float* out) {
  if (out == x) {  // one pointer: the compiler vectorizes without checking for overlap
    for (int64_t i = 0; i < n; ++i) out[i] = exp_f32(out[i] - shift);
    return;
  }
  for (int64_t i = 0; i < n; ++i) out[i] = exp_f32(x[i] - shift);
}

// x (n), shift -> out (n) = exp(x - shift) in T, out may be x: exp_shifted for f32, Eigen's
// vectorized exp for f64 (the reference dtype keeps the general one).
template <typename T>
void exp_minus(const T* x, int64_t n, T shift, T* out) {
  if constexpr (std::is_same_v<T, float>)
    exp_shifted(x, n, shift, out);
  else
    Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>(out, n) =
        (Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(x, n) - shift).exp();
}

}  // namespace keel::cpu
