// softmax and log_softmax on the device, along any dim of a contiguous tensor (O, n, I).
//  - I == 1 (the last dim, the common case): one block per row; a single pass of online
//    softmax (running max and rescaled sum, merged across the block) reads the row once, a
//    second pass writes it; 16-byte packs with a scalar head and tail, so rows of odd length
//    that start off a 16-byte boundary still vectorise.
//  - I > 1: no transpose; one thread per (o, i) row walking the n elements at stride I, so a
//    warp reads 32 neighbouring rows' elements side by side (coalesced).
// Statistics in f32.
#include "ops/cuda/common.cuh"
#include "ops/cuda/softmax.h"

namespace keel::cuda {

namespace {
using namespace dev;

// x, y (R, n); vec: x and y share their alignment, so one head serves both.
template <typename T>
__global__ void softmax_rows_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t R, int64_t n, bool vec,
                                    bool log) {
  KEEL_SHARED(float[64], scratch);
  for (int64_t r = blockIdx.x; r < R; r += gridDim.x) {
    const T* in = x + r * n;
    const int64_t head = vec ? row_head(in, n) : n;
    MaxSum ms{-INFINITY, 0.0f};
    row_fold<T>(in, nullptr, n, head, [&](int64_t, float v, float) { ms = push(ms, v); });
    ms = block_merge(ms, scratch);
    const float m = ms.m, ls = logf(ms.s), inv = 1.0f / ms.s;
    if (log)
      row_map<T>(in, nullptr, y + r * n, n, head, [&](int64_t, float v, float) { return (v - m) - ls; });
    else
      row_map<T>(in, nullptr, y + r * n, n, head, [&](int64_t, float v, float) { return expf(v - m) * inv; });
  }
}

// y, g, dx (R, n): softmax dx = y (g - sum(g y)); log_softmax dx = g - exp(y) sum(g).
template <typename T>
__global__ void softmax_rows_backward_kernel(const T* __restrict__ y, const T* __restrict__ g, T* __restrict__ dx,
                                             int64_t R, int64_t n, bool vec, bool log) {
  KEEL_SHARED(float[32], scratch);
  for (int64_t r = blockIdx.x; r < R; r += gridDim.x) {
    const T *yr = y + r * n, *gr = g + r * n;
    const int64_t head = vec ? row_head(yr, n) : n;
    float s = 0.0f;
    row_fold<T>(yr, gr, n, head, [&](int64_t, float yv, float gv) { s += log ? gv : gv * yv; });
    s = block_sum(s, scratch);
    if (log)
      row_map<T>(yr, gr, dx + r * n, n, head, [&](int64_t, float yv, float gv) { return gv - expf(yv) * s; });
    else
      row_map<T>(yr, gr, dx + r * n, n, head, [&](int64_t, float yv, float gv) { return yv * (gv - s); });
  }
}

// x, y (O, n, I), I > 1: one thread per (o, i).
template <typename T>
__global__ void softmax_strided_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t O, int64_t n, int64_t I,
                                       bool log) {
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < O * I; p += int64_t(gridDim.x) * blockDim.x) {
    const int64_t base = (p / I) * n * I + p % I;
    MaxSum ms{-INFINITY, 0.0f};
    for (int64_t j = 0; j < n; ++j) ms = push(ms, to_f32(x[base + j * I]));
    const float ls = logf(ms.s), inv = 1.0f / ms.s;
    for (int64_t j = 0; j < n; ++j) {
      const float v = to_f32(x[base + j * I]) - ms.m;
      y[base + j * I] = from_f32<T>(log ? v - ls : expf(v) * inv);
    }
  }
}

template <typename T>
__global__ void softmax_strided_backward_kernel(const T* __restrict__ y, const T* __restrict__ g, T* __restrict__ dx,
                                                int64_t O, int64_t n, int64_t I, bool log) {
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < O * I; p += int64_t(gridDim.x) * blockDim.x) {
    const int64_t base = (p / I) * n * I + p % I;
    float s = 0.0f;
    for (int64_t j = 0; j < n; ++j) {
      const float gv = to_f32(g[base + j * I]);
      s += log ? gv : gv * to_f32(y[base + j * I]);
    }
    for (int64_t j = 0; j < n; ++j) {
      const float yv = to_f32(y[base + j * I]), gv = to_f32(g[base + j * I]);
      dx[base + j * I] = from_f32<T>(log ? gv - expf(yv) * s : yv * (gv - s));
    }
  }
}

struct Rows {
  int64_t outer = 1, n = 1, inner = 1;
};
Rows rows_around(const Shape& shape, int64_t dim) {
  Rows r;
  r.n = shape[dim];
  for (int64_t d = 0; d < dim; ++d) r.outer *= shape[d];
  for (size_t d = dim + 1; d < shape.size(); ++d) r.inner *= shape[d];
  return r;
}

bool same_alignment(const void* a, const void* b) {
  return (reinterpret_cast<uintptr_t>(a) & 15u) == (reinterpret_cast<uintptr_t>(b) & 15u);
}
}  // namespace

// x (O, n, I) -> y (O, n, I)
Tensor softmax_forward(const Tensor& x, int64_t dim, bool log) {
  require_device(x, "softmax");
  Tensor y = empty(x.shape(), {x.dtype(), x.device()});
  const Rows r = rows_around(x.shape(), dim);
  if (x.numel() == 0) return y;
  visit_float(x.dtype(), log ? "log_softmax" : "softmax", [&]<typename T>() {
    Where w = where(x);
    const T* px = ptr<const T>(x);
    T* py = ptr<T>(y);
    const int64_t cap = int64_t(sm_count(w.device)) * 32;
    if (r.inner == 1) {
      const int blocks = static_cast<int>(std::min(r.outer, cap));
      launch_kernel(softmax_rows_kernel<T>, blocks, row_threads(r.n, sizeof(T)), 0, w.stream, px, py, r.outer, r.n,
                                                                                   same_alignment(px, py), log);
    } else {
      launch_kernel(softmax_strided_kernel<T>, grid_for(r.outer * r.inner, kThreads, w.device), kThreads, 0, w.stream,
          px, py, r.outer, r.n, r.inner, log);
    }
    KEEL_CHECK_LAUNCH();
  });
  return y;
}

// y, grad (O, n, I) -> dx (O, n, I)
Tensor softmax_backward(const Tensor& y, const Tensor& grad, int64_t dim, bool log) {
  require_device(y, "softmax backward");
  Tensor dx = empty(y.shape(), {y.dtype(), y.device()});
  const Rows r = rows_around(y.shape(), dim);
  if (y.numel() == 0) return dx;
  visit_float(y.dtype(), log ? "log_softmax backward" : "softmax backward", [&]<typename T>() {
    Where w = where(y);
    const T *py = ptr<const T>(y), *pg = ptr<const T>(grad);
    T* pd = ptr<T>(dx);
    const int64_t cap = int64_t(sm_count(w.device)) * 32;
    if (r.inner == 1) {
      const int blocks = static_cast<int>(std::min(r.outer, cap));
      const bool vec = same_alignment(py, pg) && same_alignment(py, pd);
      launch_kernel(softmax_rows_backward_kernel<T>, blocks, row_threads(r.n, sizeof(T)), 0, w.stream, py, pg, pd, r.outer, r.n,
                                                                                            vec, log);
    } else {
      launch_kernel(softmax_strided_backward_kernel<T>, grid_for(r.outer * r.inner, kThreads, w.device), kThreads, 0, w.stream,
          py, pg, pd, r.outer, r.n, r.inner, log);
    }
    KEEL_CHECK_LAUNCH();
  });
  return dx;
}

}  // namespace keel::cuda
