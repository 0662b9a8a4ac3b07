// LayerNorm over the last dim on the device, f32 statistics for every storage dtype.
//
// Forward: one warp per row (8 rows per 256-thread block). Two passes over the row for the
// statistics (mean, then the sum of squared deviations: exact for rows with a large mean,
// where E[x^2] - E[x]^2 cancels) and a third to write y; the row is 1.5 KB for C = 768 in
// bf16, so passes two and three read it from L1. Lanes load 16-byte packs when every row
// starts on a 16-byte boundary (C * sizeof(T) a multiple of 16, aligned bases), else scalars.
// mean and rstd are saved in f32 for the backward.
//
// Backward: dx with one warp per row again; dweight and dbias are column sums over the rows,
// done like the column reduction of reduce.cu: blocks of 32 columns x 8 row lanes over a chunk
// of rows write f32 partials, a last small kernel adds the chunks in order (deterministic).
#include "ops/cuda/layernorm.h"
#include "ops/cuda/layernorm_row.cuh"

namespace keel::cuda {

namespace {
using namespace dev;

constexpr int kRowsPerBlock = 8;  // warps per block, one row each

// x (N, C), w (C), b (C) or null -> y (N, C), mean (N), rstd (N)
template <typename T, bool kVec>
__global__ void layernorm_forward_kernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                                         T* __restrict__ y, float* __restrict__ mean, float* __restrict__ rstd,
                                         int64_t N, int64_t C, float eps) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t(gridDim.x) * kRowsPerBlock;
  for (int64_t r = blockIdx.x * int64_t(kRowsPerBlock) + (threadIdx.x >> 5); r < N; r += warps) {
    const T* row = x + r * C;
    float s = 0.0f;
    for_row<T, kVec>(row, C, lane, [&](int64_t, float v) { s += v; });
    normalize_row<T, kVec>(row, warp_sum(s) / static_cast<float>(C), w, b, y + r * C, mean + r, rstd + r, C, eps, lane);
  }
}

// g, x (N, C), w (C), mean, rstd (N), add (N, C) or null -> dx (N, C). With xhat = (x - mean)
// rstd, gw = g w:  dx = rstd (gw - mean_c(gw) - xhat mean_c(gw xhat)) + add, the sum taken in
// f32 before dx is rounded to T (add: add_layernorm's gradient of h from its other uses).
template <typename T, bool kVec>
__global__ void layernorm_dx_kernel(const T* __restrict__ g, const T* __restrict__ x, const T* __restrict__ w,
                                    const float* __restrict__ mean, const float* __restrict__ rstd,
                                    const T* __restrict__ add, T* __restrict__ dx, int64_t N, int64_t C) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t(gridDim.x) * kRowsPerBlock;
  for (int64_t r = blockIdx.x * int64_t(kRowsPerBlock) + (threadIdx.x >> 5); r < N; r += warps) {
    const T *grow = g + r * C, *xrow = x + r * C;
    const float m = mean[r], rs = rstd[r];
    float sg = 0.0f, sgx = 0.0f;
    if constexpr (kVec) {
      constexpr int V = Pack<T>::N;
      for (int64_t k = lane; k < C / V; k += 32) {
        Pack<T> pg = load_pack(grow + k * V), px = load_pack(xrow + k * V), pw = load_pack(w + k * V);
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const float gw = to_f32(pg.v[j]) * to_f32(pw.v[j]);
          sg += gw;
          sgx += gw * (to_f32(px.v[j]) - m) * rs;
        }
      }
    } else {
      for (int64_t c = lane; c < C; c += 32) {
        const float gw = to_f32(grow[c]) * to_f32(w[c]);
        sg += gw;
        sgx += gw * (to_f32(xrow[c]) - m) * rs;
      }
    }
    sg = warp_sum(sg) / static_cast<float>(C);
    sgx = warp_sum(sgx) / static_cast<float>(C);
    T* out = dx + r * C;
    if constexpr (kVec) {
      constexpr int V = Pack<T>::N;
      for (int64_t k = lane; k < C / V; k += 32) {
        Pack<T> pg = load_pack(grow + k * V), px = load_pack(xrow + k * V), pw = load_pack(w + k * V), pa, po;
        if (add) pa = load_pack(add + r * C + k * V);
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const float xhat = (to_f32(px.v[j]) - m) * rs;
          const float d = rs * (to_f32(pg.v[j]) * to_f32(pw.v[j]) - sg - xhat * sgx);
          po.v[j] = from_f32<T>(add ? d + to_f32(pa.v[j]) : d);
        }
        store_pack(out + k * V, po);
      }
    } else {
      for (int64_t c = lane; c < C; c += 32) {
        const float xhat = (to_f32(xrow[c]) - m) * rs;
        const float d = rs * (to_f32(grow[c]) * to_f32(w[c]) - sg - xhat * sgx);
        out[c] = from_f32<T>(add ? d + to_f32(add[r * C + c]) : d);
      }
    }
  }
}

// g, x (N, C), mean, rstd (N) -> partial (2, chunks, C) f32: [0] sums of g xhat, [1] sums of g
// over each chunk of `rows_per_chunk` rows. Block: 32 x 8 threads on 32 columns of one chunk.
template <typename T>
__global__ void layernorm_params_partial_kernel(const T* __restrict__ g, const T* __restrict__ x,
                                                const float* __restrict__ mean, const float* __restrict__ rstd,
                                                float* __restrict__ partial, int64_t N, int64_t C, int64_t chunks,
                                                int64_t rows_per_chunk) {
  KEEL_SHARED(float[8][33], sw);
  KEEL_SHARED(float[8][33], sb);
  const int64_t tiles = (C + 31) / 32;
  for (int64_t blk = blockIdx.x; blk < chunks * tiles; blk += gridDim.x) {
    const int64_t chunk = blk / tiles, c = (blk % tiles) * 32 + threadIdx.x;
    const int64_t lo = chunk * rows_per_chunk, hi = min(N, lo + rows_per_chunk);
    float aw = 0.0f, ab = 0.0f;
    if (c < C)
      for (int64_t r = lo + threadIdx.y; r < hi; r += blockDim.y) {
        const float gv = to_f32(g[r * C + c]);
        aw += gv * (to_f32(x[r * C + c]) - mean[r]) * rstd[r];
        ab += gv;
      }
    __syncthreads();  // the previous tile's readers are done
    sw[threadIdx.y][threadIdx.x] = aw, sb[threadIdx.y][threadIdx.x] = ab;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
      for (int k = 1; k < int(blockDim.y); ++k) aw += sw[k][threadIdx.x], ab += sb[k][threadIdx.x];
      partial[chunk * C + c] = aw;
      partial[(chunks + chunk) * C + c] = ab;
    }
  }
}

// partial (2, chunks, C) -> dw (C), db (C) (either may be null), chunks added in order.
template <typename T>
__global__ void layernorm_params_final_kernel(const float* __restrict__ partial, int64_t chunks, int64_t C,
                                              T* __restrict__ dw, T* __restrict__ db) {
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < C; c += int64_t(gridDim.x) * blockDim.x) {
    float aw = 0.0f, ab = 0.0f;
    for (int64_t k = 0; k < chunks; ++k) aw += partial[k * C + c], ab += partial[(chunks + k) * C + c];
    if (dw) dw[c] = from_f32<T>(aw);
    if (db) db[c] = from_f32<T>(ab);
  }
}

int row_blocks(int64_t N, int device) {
  return static_cast<int>(std::min<int64_t>((N + kRowsPerBlock - 1) / kRowsPerBlock, int64_t(sm_count(device)) * 32));
}
}  // namespace

// x (N, C), weight (C), bias (C) or undefined -> y (N, C), mean (N), rstd (N)
Tensor layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, Tensor& mean,
                         Tensor& rstd) {
  require_device(x, "layernorm");
  const int64_t N = x.size(0), C = x.size(1);
  Tensor y = empty({N, C}, {x.dtype(), x.device()});
  mean = empty({N}, {DType::f32, x.device()});
  rstd = empty({N}, {DType::f32, x.device()});
  if (N == 0 || C == 0) return y;
  visit_float(x.dtype(), "layernorm", [&]<typename T>() {
    Where w = where(x);
    const T *px = ptr<const T>(x), *pw = ptr<const T>(weight), *pb = bias.defined() ? ptr<const T>(bias) : nullptr;
    T* py = ptr<T>(y);
    const bool vec = (C * sizeof(T)) % 16 == 0 && plan::vector_head(C, sizeof(T), {px, pw, py}) == 0 &&
                     (!pb || plan::vector_head(C, sizeof(T), {pb, py}) == 0);
    const int blocks = row_blocks(N, w.device);
    const float e = static_cast<float>(eps);
    if (vec)
      launch_kernel(layernorm_forward_kernel<T, true>, blocks, 32 * kRowsPerBlock, 0, w.stream, px, pw, pb, py, ptr<float>(mean),
                                                                                     ptr<float>(rstd), N, C, e);
    else
      launch_kernel(layernorm_forward_kernel<T, false>, blocks, 32 * kRowsPerBlock, 0, w.stream, px, pw, pb, py, ptr<float>(mean),
                                                                                      ptr<float>(rstd), N, C, e);
    KEEL_CHECK_LAUNCH();
  });
  return y;
}

// grad, x (N, C), weight (C), mean, rstd (N), dx_add (N, C) or undefined -> dx (N, C), dweight (C), dbias (C)
void layernorm_backward(const Tensor& grad, const Tensor& x, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd, bool need_x, bool need_weight, bool need_bias, Tensor& dx,
                        Tensor& dweight, Tensor& dbias, const Tensor& dx_add) {
  require_device(x, "layernorm backward");
  const int64_t N = x.size(0), C = x.size(1);
  const Device dev = x.device();
  if (need_x) dx = empty({N, C}, {x.dtype(), dev});
  if (need_weight) dweight = empty({C}, {x.dtype(), dev});
  if (need_bias) dbias = empty({C}, {x.dtype(), dev});
  if (C == 0) return;
  visit_float(x.dtype(), "layernorm backward", [&]<typename T>() {
    Where w = where(x);
    const T *pg = ptr<const T>(grad), *px = ptr<const T>(x);
    const float *pm = ptr<const float>(mean), *pr = ptr<const float>(rstd);
    if (need_x && N > 0) {
      const T* pw = ptr<const T>(weight);
      T* pd = ptr<T>(dx);
      const T* pa = dx_add.defined() ? ptr<const T>(dx_add) : nullptr;
      const bool vec = (C * sizeof(T)) % 16 == 0 && plan::vector_head(C, sizeof(T), {pg, px, pw, pd}) == 0 &&
                       (!pa || plan::vector_head(C, sizeof(T), {pa, pd}) == 0);
      const int blocks = row_blocks(N, w.device);
      if (vec)
        launch_kernel(layernorm_dx_kernel<T, true>, blocks, 32 * kRowsPerBlock, 0, w.stream, pg, px, pw, pm, pr, pa, pd, N,
                      C);
      else
        launch_kernel(layernorm_dx_kernel<T, false>, blocks, 32 * kRowsPerBlock, 0, w.stream, pg, px, pw, pm, pr, pa, pd,
                      N, C);
      KEEL_CHECK_LAUNCH();
    }
    if (!need_weight && !need_bias) return;
    const int64_t tiles = (C + 31) / 32;
    int64_t chunks = (int64_t(sm_count(w.device)) * 4 + tiles - 1) / tiles;
    chunks = std::max<int64_t>(1, std::min<int64_t>(chunks, (N + 31) / 32));
    const int64_t rows_per_chunk = std::max<int64_t>(1, (N + chunks - 1) / chunks);
    chunks = std::max<int64_t>(1, (N + rows_per_chunk - 1) / rows_per_chunk);
    Tensor partial = empty({2, chunks, C}, {DType::f32, dev});
    const int blocks = static_cast<int>(std::min<int64_t>(chunks * tiles, int64_t(sm_count(w.device)) * 32));
    launch_kernel(layernorm_params_partial_kernel<T>, blocks, dim3(32, 8), 0, w.stream, pg, px, pm, pr, ptr<float>(partial), N, C,
                                                                             chunks, rows_per_chunk);
    KEEL_CHECK_LAUNCH();
    launch_kernel(layernorm_params_final_kernel<T>, grid_for(C, kThreads, w.device), kThreads, 0, w.stream,
        ptr<const float>(partial), chunks, C, need_weight ? ptr<T>(dweight) : nullptr,
        need_bias ? ptr<T>(dbias) : nullptr);
    KEEL_CHECK_LAUNCH();
  });
}

}  // namespace keel::cuda
