// CPU kernels of GELU (tanh form), elementwise over flat contiguous buffers.
//
// GPT-2's GELU is 0.5 x (1 + tanh(u)) with u = beta (x + alpha x^3). Since 0.5 (1 + tanh(u)) is
// the logistic sigmoid of 2u, the kernels compute the same function as x * s with
// s = 1 / (1 + exp(-2u)): one vectorized exp (Eigen's, a few ulp) instead of the C library's
// scalar tanh, which cost 13 ns an element (100 ms of a 420 ms demo-model step on 2 cores), and
// no cancellation in 1 + tanh(u) for negative x, where tanh(u) is close to -1.
#include "ops/cpu/gelu.h"

#include <Eigen/Core>
#include <algorithm>
#include <numbers>

#include "core/factory.h"
#include "core/parallel.h"

namespace keel::cpu {

namespace {
constexpr double kAlpha = 0.044715;
// sqrt(2 / pi)
constexpr double kBeta = std::numbers::sqrt2 * std::numbers::inv_sqrtpi;
// Elements per chunk of the threads: about 15 us of work at 0.9 ns an element (core/parallel.h,
// "Chunk sizes"; docs/benchmarks.md, "CPU threads").
constexpr int64_t kGrain = int64_t{1} << 14;
// exp(-2u) is capped here, so s never underflows to a subnormal for very negative x (where the
// GELU is 0 to within 1e-34 either way).
constexpr double kMaxExp = 80;
// The elements a kernel handles at a time: its temporaries stay in registers and L1.
constexpr int64_t kBlock = 256;

template <typename T>
using Arr = Eigen::Array<T, Eigen::Dynamic, 1>;

// x (n) -> s (n) = sigmoid(2u(x)) = 0.5 (1 + tanh(u(x)))
template <typename T>
void sigmoid_2u(const T* x, T* s, int64_t n) {
  const Eigen::Map<const Arr<T>> X(x, n);
  const T a = static_cast<T>(kAlpha), mb2 = static_cast<T>(-2 * kBeta), cap = static_cast<T>(kMaxExp);
  Eigen::Map<Arr<T>>(s, n) = T(1) / (T(1) + (mb2 * (X + a * X.cube())).min(cap).exp());
}

}  // namespace

template <typename T>
void gelu_forward_span(const T* x, T* y, int64_t n) {
  alignas(64) T s[kBlock];
  for (int64_t i = 0; i < n; i += kBlock) {
    const int64_t m = std::min(kBlock, n - i);
    sigmoid_2u(x + i, s, m);
    Eigen::Map<Arr<T>>(y + i, m) = Eigen::Map<const Arr<T>>(x + i, m) * Eigen::Map<const Arr<T>>(s, m);
  }
}

// gelu'(x) = 0.5 (1 + t) + 0.5 x (1 - t^2) beta (1 + 3 alpha x^2), with t = tanh(u) = 2s - 1 from
// the vectorized sigmoid. Near x = -0.75 the two terms cancel (gelu' crosses 0), so the result is
// only as good as their rounding: this keeps the tanh form's order of operations, the one the
// CUDA kernels use (ops/cuda/gelu.cu), so that the CPU and the GPU round alike there. (The
// algebraically equal s + 2 beta x s (1 - s) (...) differs from it by 1e-7 where gelu' is 1e-3.)
template <typename T>
void gelu_backward_span(const T* grad, const T* x, T* dx, int64_t n) {
  alignas(64) T s[kBlock];
  const T b = static_cast<T>(kBeta), three_a = static_cast<T>(3 * kAlpha), half = static_cast<T>(0.5);
  for (int64_t i = 0; i < n; i += kBlock) {
    const int64_t m = std::min(kBlock, n - i);
    sigmoid_2u(x + i, s, m);
    const Eigen::Map<const Arr<T>> X(x + i, m), G(grad + i, m);
    const Arr<T> t = T(2) * Eigen::Map<const Arr<T>>(s, m) - T(1);
    Eigen::Map<Arr<T>>(dx + i, m) =
        G * (half * (T(1) + t) + half * X * (T(1) - t * t) * b * (T(1) + three_a * X.square()));
  }
}

template void gelu_forward_span<float>(const float*, float*, int64_t);
template void gelu_forward_span<double>(const double*, double*, int64_t);
template void gelu_backward_span<float>(const float*, const float*, float*, int64_t);
template void gelu_backward_span<double>(const double*, const double*, double*, int64_t);

// x (N) -> (N)
Tensor gelu_forward(const Tensor& x) {
  Tensor y = empty({x.numel()}, {x.dtype()});
  visit_dtype<CpuFloat>(x.dtype(), "gelu", [&]<typename T>() {
    const T* px = x.data<T>();
    T* py = y.data<T>();
    parallel::for_range(x.numel(), kGrain, [&](int64_t b, int64_t e) { gelu_forward_span(px + b, py + b, e - b); });
  });
  return y;
}

// grad, x (N) -> (N)
Tensor gelu_backward(const Tensor& grad, const Tensor& x) {
  Tensor dx = empty({x.numel()}, {x.dtype()});
  visit_dtype<CpuFloat>(x.dtype(), "gelu", [&]<typename T>() {
    const T *px = x.data<T>(), *pg = grad.data<T>();
    T* pd = dx.data<T>();
    parallel::for_range(x.numel(), kGrain,
                        [&](int64_t b, int64_t e) { gelu_backward_span(pg + b, px + b, pd + b, e - b); });
  });
  return dx;
}

}  // namespace keel::cpu
