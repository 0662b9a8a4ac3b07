// Device code one warp runs on one row of layer normalisation, shared by layernorm's forward
// kernel (ops/cuda/layernorm.cu) and add_layernorm's (ops/cuda/add_layernorm.cu), so the two
// normalise a row with the same arithmetic. kVec: 16-byte packs (every row starts on a 16-byte
// boundary: C * sizeof(T) a multiple of 16 and aligned bases), else scalars.
#pragma once

#include "ops/cuda/common.cuh"

namespace keel::cuda::dev {

// Calls f(c, x[c] as f32) for the lane's share of row x (C).
template <typename T, bool kVec, typename F>
__device__ __forceinline__ void for_row(const T* x, int64_t C, int lane, F&& f) {
  if constexpr (kVec) {
    constexpr int V = Pack<T>::N;
    for (int64_t k = lane; k < C / V; k += 32) {
      Pack<T> p = load_pack(x + k * V);
#pragma unroll
      for (int j = 0; j < V; ++j) f(k * V + j, to_f32(p.v[j]));
    }
  } else {
    for (int64_t c = lane; c < C; c += 32) f(c, to_f32(x[c]));
  }
}

// row (C) whose mean is m, w (C), b (C) or null -> out (C) = (row - m) rstd w + b, and
// *mean, *rstd written by lane 0. The variance is a second pass over the row (the sum of
// squared deviations: exact for rows with a large mean, where E[x^2] - E[x]^2 cancels).
// Every lane reads only the elements of `row` for_row gives it, so a row this lane wrote
// itself just before needs no barrier.
template <typename T, bool kVec>
__device__ __forceinline__ void normalize_row(const T* row, float m, const T* __restrict__ w, const T* __restrict__ b,
                                              T* __restrict__ out, float* mean, float* rstd, int64_t C, float eps,
                                              int lane) {
  float q = 0.0f;
  for_row<T, kVec>(row, C, lane, [&](int64_t, float v) { q += (v - m) * (v - m); });
  const float rs = 1.0f / sqrtf(warp_sum(q) / static_cast<float>(C) + eps);
  if (lane == 0) *mean = m, *rstd = rs;
  if constexpr (kVec) {
    constexpr int V = Pack<T>::N;
    for (int64_t k = lane; k < C / V; k += 32) {
      Pack<T> px = load_pack(row + k * V), pw = load_pack(w + k * V), pb, po;
      if (b) pb = load_pack(b + k * V);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float n = (to_f32(px.v[j]) - m) * rs * to_f32(pw.v[j]);
        po.v[j] = from_f32<T>(b ? n + to_f32(pb.v[j]) : n);
      }
      store_pack(out + k * V, po);
    }
  } else {
    for (int64_t c = lane; c < C; c += 32) {
      const float n = (to_f32(row[c]) - m) * rs * to_f32(w[c]);
      out[c] = from_f32<T>(b ? n + to_f32(b[c]) : n);
    }
  }
}

}  // namespace keel::cuda::dev
