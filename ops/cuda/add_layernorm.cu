// The residual add and the LayerNorm after it in one kernel: one warp per row (8 rows per
// 256-thread block), as layernorm's forward. The first pass reads x and y, writes h = x + y
// rounded to the storage dtype (the add kernel's arithmetic) and sums it; the variance and the
// normalised output are layernorm's own passes (ops/cuda/layernorm_row.cuh) over the h the lane
// has just written, from cache. Unfused, the add wrote h and layernorm launched again to read it
// back from memory: the fusion saves that launch and that read of the (N, C) activation.
#include "ops/cuda/add_layernorm.h"
#include "ops/cuda/layernorm_row.cuh"

namespace keel::cuda {

namespace {
using namespace dev;

constexpr int kRowsPerBlock = 8;  // warps per block, one row each

// x, y (N, C), w (C), b (C) or null -> h (N, C), out (N, C), mean (N), rstd (N). h is not
// __restrict__: each lane reads back the elements of h it wrote.
template <typename T, bool kVec>
__global__ void add_layernorm_kernel(const T* __restrict__ x, const T* __restrict__ y, const T* __restrict__ w,
                                     const T* __restrict__ b, T* h, T* __restrict__ out, float* __restrict__ mean,
                                     float* __restrict__ rstd, int64_t N, int64_t C, float eps) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t(gridDim.x) * kRowsPerBlock;
  for (int64_t r = blockIdx.x * int64_t(kRowsPerBlock) + (threadIdx.x >> 5); r < N; r += warps) {
    const T *xr = x + r * C, *yr = y + r * C;
    T* hr = h + r * C;
    float s = 0.0f;  // the sum of h as stored, which is what layernorm(x + y) would have read
    if constexpr (kVec) {
      constexpr int V = Pack<T>::N;
      for (int64_t k = lane; k < C / V; k += 32) {
        Pack<T> px = load_pack(xr + k * V), py = load_pack(yr + k * V), ph;
#pragma unroll
        for (int j = 0; j < V; ++j) {
          ph.v[j] = from_f32<T>(to_f32(px.v[j]) + to_f32(py.v[j]));
          s += to_f32(ph.v[j]);
        }
        store_pack(hr + k * V, ph);
      }
    } else {
      for (int64_t c = lane; c < C; c += 32) {
        const T v = from_f32<T>(to_f32(xr[c]) + to_f32(yr[c]));
        hr[c] = v;
        s += to_f32(v);
      }
    }
    normalize_row<T, kVec>(hr, warp_sum(s) / static_cast<float>(C), w, b, out + r * C, mean + r, rstd + r, C, eps,
                           lane);
  }
}

}  // namespace

// x, y (N, C), weight (C), bias (C) or undefined -> out (N, C); h (N, C), mean, rstd (N)
Tensor add_layernorm_forward(const Tensor& x, const Tensor& y, const Tensor& weight, const Tensor& bias, double eps,
                             Tensor& h, Tensor& mean, Tensor& rstd) {
  require_device(x, "add_layernorm");
  const int64_t N = x.size(0), C = x.size(1);
  h = empty({N, C}, {x.dtype(), x.device()});
  Tensor out = empty({N, C}, {x.dtype(), x.device()});
  mean = empty({N}, {DType::f32, x.device()});
  rstd = empty({N}, {DType::f32, x.device()});
  if (N == 0 || C == 0) return out;
  visit_float(x.dtype(), "add_layernorm", [&]<typename T>() {
    Where wh = where(x);
    const T *px = ptr<const T>(x), *py = ptr<const T>(y), *pw = ptr<const T>(weight);
    const T* pb = bias.defined() ? ptr<const T>(bias) : nullptr;
    T *ph = ptr<T>(h), *po = ptr<T>(out);
    const bool vec = (C * sizeof(T)) % 16 == 0 && plan::vector_head(C, sizeof(T), {px, py, pw, ph, po}) == 0 &&
                     (!pb || plan::vector_head(C, sizeof(T), {pb, po}) == 0);
    const int blocks = static_cast<int>(
        std::min<int64_t>((N + kRowsPerBlock - 1) / kRowsPerBlock, int64_t(sm_count(wh.device)) * 32));
    const float e = static_cast<float>(eps);
    float *pm = ptr<float>(mean), *pr = ptr<float>(rstd);
    if (vec)
      launch_kernel(add_layernorm_kernel<T, true>, blocks, 32 * kRowsPerBlock, 0, wh.stream, px, py, pw, pb, ph, po, pm,
                    pr, N, C, e);
    else
      launch_kernel(add_layernorm_kernel<T, false>, blocks, 32 * kRowsPerBlock, 0, wh.stream, px, py, pw, pb, ph, po,
                    pm, pr, N, C, e);
    KEEL_CHECK_LAUNCH();
  });
  return out;
}

}  // namespace keel::cuda
