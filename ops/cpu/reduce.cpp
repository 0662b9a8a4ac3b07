// CPU reductions over one dimension. The input is viewed as (outer, n, inner) with the
// reduced dimension in the middle; sums accumulate in double so long rows stay accurate.
#include "ops/cpu/reduce.h"

#include <algorithm>
#include <cmath>

#include "core/parallel.h"

namespace keel::cpu {

namespace {
// Elements read per chunk of the threads: about 10 us of summing (core/parallel.h, "Chunk
// sizes"; docs/benchmarks.md, "CPU threads").
constexpr int64_t kGrain = int64_t{1} << 15;
}  // namespace

// x (outer, n, inner) contiguous -> out (outer, inner), and for max the argmax (outer, inner) i64
// (NaN wins, then the first maximum).
void reduce_dim(Reduce kind, const Tensor& x, int64_t outer, int64_t n, int64_t inner, Tensor& out,
                Tensor* argmax) {
  visit_dtype<CpuFloat>(x.dtype(), "reduce", [&]<typename T>() {
    const T* px = x.data<T>();
    T* po = out.data<T>();
    int64_t* pi = argmax ? argmax->data<int64_t>() : nullptr;
    parallel::for_rows(outer, n * inner, kGrain, [&](int64_t o0, int64_t o1) {
      for (int64_t o = o0; o < o1; ++o) {
        for (int64_t i = 0; i < inner; ++i) {
          const T* row = px + o * n * inner + i;
          if (kind == Reduce::sum) {
            double acc = 0;
            for (int64_t j = 0; j < n; ++j) acc += row[j * inner];
            po[o * inner + i] = static_cast<T>(acc);
          } else {
            // PyTorch's rule: a NaN beats every number, so the max of a row holding one is NaN
            // and the argmax is the first NaN (the scan stops there); otherwise the first maximum
            // wins (strict >). A plain > alone would skip NaNs that are not at the start.
            int64_t best = 0;
            for (int64_t j = 1; j < n && !std::isnan(row[best * inner]); ++j) {
              const T v = row[j * inner];
              if (std::isnan(v) || v > row[best * inner]) best = j;
            }
            po[o * inner + i] = row[best * inner];
            if (pi) pi[o * inner + i] = best;
          }
        }
      }
    });
  });
}

// g (outer, inner), idx (outer, inner) -> gx (outer, n, inner) zero except at the argmax.
void scatter_max_grad(const Tensor& g, const Tensor& idx, int64_t outer, int64_t n, int64_t inner, Tensor& gx) {
  visit_dtype<CpuFloat>(g.dtype(), "max backward", [&]<typename T>() {
    const T* pg = g.data<T>();
    const int64_t* pi = idx.data<int64_t>();
    T* px = gx.data<T>();
    std::fill(px, px + outer * n * inner, T(0));
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) px[(o * n + pi[o * inner + i]) * inner + i] = pg[o * inner + i];
  });
}

}  // namespace keel::cpu
