#include "ops/cpu/embedding.h"

#include <algorithm>

#include "core/parallel.h"
#include "ops/common.h"

namespace keel::cpu {

namespace {
// Elements copied per chunk of the threads: about 10 us of copying (core/parallel.h, "Chunk
// sizes"; docs/benchmarks.md, "CPU threads").
constexpr int64_t kGrain = int64_t{1} << 16;
}  // namespace

// weight (V, C), ids (N) -> out (N, C); all contiguous, ids already range-checked.
void embedding_forward(const Tensor& weight, const Tensor& ids, Tensor& out) {
  const int64_t C = weight.size(1), N = ids.numel();
  visit_dtype<CpuFloat>(weight.dtype(), "embedding", [&]<typename T>() {
    const T* w = weight.data<T>();
    T* o = out.data<T>();
    visit_dtype<IndexDType>(ids.dtype(), "embedding", [&]<typename I>() {
      const I* id = ids.data<I>();
      parallel::for_rows(N, C, kGrain, [&](int64_t n0, int64_t n1) {
        for (int64_t n = n0; n < n1; ++n) std::copy_n(w + static_cast<int64_t>(id[n]) * C, C, o + n * C);
      });
    });
  });
}

// g (N, C), ids (N) -> gw (V, C) accumulated. Serial over N: two positions with the same id
// write the same row, so a naive parallel loop would race.
void embedding_backward(const Tensor& g, const Tensor& ids, Tensor& gw) {
  const int64_t C = gw.size(1), N = ids.numel();
  visit_dtype<CpuFloat>(g.dtype(), "embedding backward", [&]<typename T>() {
    const T* pg = g.data<T>();
    T* w = gw.data<T>();
    visit_dtype<IndexDType>(ids.dtype(), "embedding backward", [&]<typename I>() {
      const I* id = ids.data<I>();
      for (int64_t n = 0; n < N; ++n) {
        T* row = w + static_cast<int64_t>(id[n]) * C;
        const T* src = pg + n * C;
        for (int64_t c = 0; c < C; ++c) row[c] += src[c];
      }
    });
  });
}

}  // namespace keel::cpu
