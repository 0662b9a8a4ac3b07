// CPU kernels of GELU (tanh form), elementwise over flat contiguous buffers.
#include "ops/cpu/gelu.h"

#include <cmath>
#include <numbers>

#include "core/factory.h"

namespace keel::cpu {

namespace {
constexpr double kAlpha = 0.044715;
// sqrt(2 / pi)
constexpr double kBeta = std::numbers::sqrt2 * std::numbers::inv_sqrtpi;
// Below this many elements the threads cost more than they save.
constexpr int64_t kParallelMin = int64_t{1} << 15;
}  // namespace

// x (N) -> (N)
Tensor gelu_forward(const Tensor& x) {
  Tensor y = empty({x.numel()}, {x.dtype()});
  int64_t n = x.numel();
  visit_dtype<CpuFloat>(x.dtype(), "gelu", [&]<typename T>() {
    const T* px = x.data<T>();
    T* py = y.data<T>();
    const T a = static_cast<T>(kAlpha), b = static_cast<T>(kBeta), half = static_cast<T>(0.5), one = 1;
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
      T v = px[i];
      py[i] = half * v * (one + std::tanh(b * (v + a * v * v * v)));
    }
  });
  return y;
}

// grad, x (N) -> (N). With u = beta (x + alpha x^3) and t = tanh(u):
//   gelu'(x) = 0.5 (1 + t) + 0.5 x (1 - t^2) beta (1 + 3 alpha x^2).
Tensor gelu_backward(const Tensor& grad, const Tensor& x) {
  Tensor dx = empty({x.numel()}, {x.dtype()});
  int64_t n = x.numel();
  visit_dtype<CpuFloat>(x.dtype(), "gelu", [&]<typename T>() {
    const T *px = x.data<T>(), *pg = grad.data<T>();
    T* pd = dx.data<T>();
    const T a = static_cast<T>(kAlpha), b = static_cast<T>(kBeta), half = static_cast<T>(0.5), one = 1;
    const T three_a = static_cast<T>(3 * kAlpha);
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
      T v = px[i];
      T t = std::tanh(b * (v + a * v * v * v));
      T d = half * (one + t) + half * v * (one - t * t) * b * (one + three_a * v * v);
      pd[i] = pg[i] * d;
    }
  });
  return dx;
}

}  // namespace keel::cpu
