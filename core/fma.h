// a * b + c for host code that must round the same way wherever it runs: in a vectorized loop
// and in its scalar remainder, on every thread count and shard boundary.
//
// One rounding where the hardware fuses the two (FP_FAST_FMAF, FP_FAST_FMA: x86-64-v3, Arm);
// else two, since a library fma without the hardware costs more than the rest of a kernel.
// Spelled as a call, a multiply-add is never left to the compiler, which may fuse `a * b + c`
// (GCC does by default) and, in `a * b + c * d`, may fuse either product: its choice can differ
// between the vector loop and the scalar one.
#pragma once

#include <cmath>

namespace keel {

inline float fmadd(float a, float b, float c) {
#ifdef FP_FAST_FMAF
  return std::fma(a, b, c);
#else
  return a * b + c;
#endif
}

inline double fmadd(double a, double b, double c) {
#ifdef FP_FAST_FMA
  return std::fma(a, b, c);
#else
  return a * b + c;
#endif
}

}  // namespace keel
