// CPU kernels of softmax and log_softmax over any dim of a contiguous tensor, seen as
// (O, n, I): each of the O * I rows has n elements at stride I. Rows run in parallel (chunks of
// whole rows, so no row's sum depends on the thread count); sums
// are accumulated in double.
#include <cmath>
#include <limits>

#include "core/factory.h"
#include "core/parallel.h"
#include "ops/cpu/softmax.h"

namespace keel::cpu {

namespace {
// Elements per chunk of rows: about 11 us of work at 11 ns an element (core/parallel.h,
// "Chunk sizes"; docs/benchmarks.md, "CPU threads").
constexpr int64_t kGrain = int64_t{1} << 10;

struct Rows {
  int64_t outer = 1, n = 1, inner = 1;
};
// shape around dim -> (O, n, I)
Rows rows_around(const Shape& shape, int64_t dim) {
  Rows r;
  r.n = shape[dim];
  for (int64_t d = 0; d < dim; ++d) r.outer *= shape[d];
  for (size_t d = dim + 1; d < shape.size(); ++d) r.inner *= shape[d];
  return r;
}
}  // namespace

// x (O, n, I) -> y (O, n, I)
Tensor softmax_forward(const Tensor& x, int64_t dim, bool log) {
  Tensor y = empty(x.shape(), {x.dtype()});
  Rows r = rows_around(x.shape(), dim);
  int64_t rows = r.outer * r.inner, n = r.n, I = r.inner;
  visit_dtype<CpuFloat>(x.dtype(), log ? "log_softmax" : "softmax", [&]<typename T>() {
    const T* px = x.data<T>();
    T* py = y.data<T>();
    parallel::for_rows(rows, n, kGrain, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        int64_t base = (p / I) * n * I + p % I;
        const T* in = px + base;
        T* out = py + base;
        T m = -std::numeric_limits<T>::infinity();
        for (int64_t j = 0; j < n; ++j) m = std::max(m, in[j * I]);
        double s = 0;
        for (int64_t j = 0; j < n; ++j) s += std::exp(static_cast<double>(in[j * I] - m));
        if (log) {
          // (x - max) - log(sum), not x - lse: x - max is exact, and rounding lse to T would
          // cost an ulp of the logits' magnitude rather than of the result's.
          double ls = std::log(s);
          for (int64_t j = 0; j < n; ++j) out[j * I] = static_cast<T>(static_cast<double>(in[j * I] - m) - ls);
        } else {
          double inv = 1.0 / s;
          for (int64_t j = 0; j < n; ++j)
            out[j * I] = static_cast<T>(std::exp(static_cast<double>(in[j * I] - m)) * inv);
        }
      }
    });
  });
  return y;
}

// y, grad (O, n, I) -> dx (O, n, I)
//   softmax:     dx = y * (g - sum_j(g * y))
//   log_softmax: dx = g - exp(y) * sum_j(g)
Tensor softmax_backward(const Tensor& y, const Tensor& grad, int64_t dim, bool log) {
  Tensor dx = empty(y.shape(), {y.dtype()});
  Rows r = rows_around(y.shape(), dim);
  int64_t rows = r.outer * r.inner, n = r.n, I = r.inner;
  visit_dtype<CpuFloat>(y.dtype(), log ? "log_softmax" : "softmax", [&]<typename T>() {
    const T *py = y.data<T>(), *pg = grad.data<T>();
    T* pd = dx.data<T>();
    parallel::for_rows(rows, n, kGrain, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        int64_t base = (p / I) * n * I + p % I;
        const T *yr = py + base, *g = pg + base;
        T* out = pd + base;
        double s = 0;
        if (log) {
          for (int64_t j = 0; j < n; ++j) s += g[j * I];
          for (int64_t j = 0; j < n; ++j) out[j * I] = static_cast<T>(g[j * I] - std::exp(yr[j * I]) * s);
        } else {
          for (int64_t j = 0; j < n; ++j) s += static_cast<double>(g[j * I]) * yr[j * I];
          for (int64_t j = 0; j < n; ++j) out[j * I] = static_cast<T>(yr[j * I] * (g[j * I] - s));
        }
      }
    });
  });
  return dx;
}

}  // namespace keel::cpu
