// CPU kernels of layernorm: one row of C channels at a time, chunks of rows spread over the
// threads. Row statistics are accumulated in double, so f32 results do not depend on C's size.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/factory.h"
#include "core/parallel.h"
#include "ops/cpu/layernorm.h"

namespace keel::cpu {

namespace {
// Elements per chunk of rows: 14-18 us of work at 1.7-2.2 ns an element (core/parallel.h,
// "Chunk sizes"; docs/benchmarks.md, "CPU threads").
constexpr int64_t kGrain = int64_t{1} << 13;
}  // namespace

// x (N, C), weight (C), bias (C) or undefined -> y (N, C), mean (N), rstd (N)
Tensor layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, Tensor& mean,
                         Tensor& rstd) {
  int64_t N = x.size(0), C = x.size(1);
  Tensor y = empty({N, C}, {x.dtype()});
  mean = empty({N}, {x.dtype()});
  rstd = empty({N}, {x.dtype()});
  visit_dtype<CpuFloat>(x.dtype(), "layernorm", [&]<typename T>() {
    const T* px = x.data<T>();
    const T* w = weight.data<T>();
    const T* b = bias.defined() ? bias.data<T>() : nullptr;
    T *py = y.data<T>(), *pm = mean.data<T>(), *pr = rstd.data<T>();
    parallel::for_rows(N, C, kGrain, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const T* row = px + r * C;
        double s = 0;
        for (int64_t c = 0; c < C; ++c) s += row[c];
        double m = C > 0 ? s / C : 0.0;
        double v = 0;  // two passes: the variance of a row with a large mean stays accurate
        for (int64_t c = 0; c < C; ++c) v += (row[c] - m) * (row[c] - m);
        double rs = 1.0 / std::sqrt((C > 0 ? v / C : 0.0) + eps);
        pm[r] = static_cast<T>(m);
        pr[r] = static_cast<T>(rs);
        T* out = py + r * C;
        for (int64_t c = 0; c < C; ++c) {
          T n = static_cast<T>((row[c] - m) * rs);
          out[c] = b ? n * w[c] + b[c] : n * w[c];
        }
      }
    });
  });
  return y;
}

// grad, x (N, C), weight (C), mean, rstd (N), dx_add (N, C) or undefined -> dx (N, C), dweight (C),
// dbias (C). With xhat = (x - mean) * rstd and g = grad * weight:
//   dx = rstd * (g - mean_c(g) - xhat * mean_c(g * xhat)) [+ dx_add],
//   dweight = sum_rows(grad * xhat),  dbias = sum_rows(grad).
// dx is rounded to T before dx_add is added (in double, then rounded again): exactly what the
// autograd engine's accumulation of two gradients of one tensor computes (core/autograd.cpp), so
// add_layernorm's gradients are bit-identical to those of x + y then layernorm.
void layernorm_backward(const Tensor& grad, const Tensor& x, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd, bool need_x, bool need_weight, bool need_bias, Tensor& dx,
                        Tensor& dweight, Tensor& dbias, const Tensor& dx_add) {
  int64_t N = x.size(0), C = x.size(1);
  if (need_x) dx = empty({N, C}, {x.dtype()});
  bool need_params = need_weight || need_bias;
  // Each chunk of rows sums dweight and dbias over its rows; the partial sums are added after,
  // in chunk order. The chunks depend on N and C alone, so the sums do not depend on the threads.
  const int64_t rows = (kGrain + C - 1) / std::max<int64_t>(C, 1), chunks = parallel::chunks_of(N, rows);
  std::vector<double> partial(need_params ? static_cast<size_t>(std::max<int64_t>(chunks, 1)) * 2 * C : 0, 0.0);
  visit_dtype<CpuFloat>(x.dtype(), "layernorm", [&]<typename T>() {
    const T *pg = grad.data<T>(), *px = x.data<T>();
    const T* w = need_x ? weight.data<T>() : nullptr;  // weight only scales dx
    const T *pm = mean.data<T>(), *pr = rstd.data<T>();
    T* pdx = need_x ? dx.data<T>() : nullptr;
    const T* pa = dx_add.defined() ? dx_add.data<T>() : nullptr;
    parallel::for_each_chunk(chunks, [&](int64_t chunk) {
      double* pw = need_params ? partial.data() + static_cast<size_t>(chunk) * 2 * C : nullptr;
      for (int64_t r = chunk * rows; r < std::min(N, (chunk + 1) * rows); ++r) {
        const T *g = pg + r * C, *row = px + r * C;
        double m = pm[r], rs = pr[r];
        if (need_params)
          for (int64_t c = 0; c < C; ++c) {
            pw[c] += g[c] * ((row[c] - m) * rs);
            pw[C + c] += g[c];
          }
        if (!need_x) continue;
        double sg = 0, sgx = 0;
        for (int64_t c = 0; c < C; ++c) {
          double gw = static_cast<double>(g[c]) * w[c];
          sg += gw;
          sgx += gw * ((row[c] - m) * rs);
        }
        sg /= C;
        sgx /= C;
        T* out = pdx + r * C;
        for (int64_t c = 0; c < C; ++c)
          out[c] = static_cast<T>(rs * (static_cast<double>(g[c]) * w[c] - sg - (row[c] - m) * rs * sgx));
        if (pa)
          for (int64_t c = 0; c < C; ++c)
            out[c] = static_cast<T>(static_cast<double>(pa[r * C + c]) + static_cast<double>(out[c]));
      }
    });
    if (!need_params) return;
    for (int64_t t = 1; t < chunks; ++t)
      for (int64_t c = 0; c < 2 * C; ++c) partial[c] += partial[static_cast<size_t>(t) * 2 * C + c];
    if (need_weight) {
      dweight = empty({C}, {x.dtype()});
      T* p = dweight.data<T>();
      for (int64_t c = 0; c < C; ++c) p[c] = static_cast<T>(partial[c]);
    }
    if (need_bias) {
      dbias = empty({C}, {x.dtype()});
      T* p = dbias.data<T>();
      for (int64_t c = 0; c < C; ++c) p[c] = static_cast<T>(partial[C + c]);
    }
  });
}

}  // namespace keel::cpu
