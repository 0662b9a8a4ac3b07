// add_layernorm_linear on the device: one launch for a decode step's residual add, LayerNorm and
// the linear layer after it (c_attn, c_fc with its GELU, or the lm_head), where it took
// add_layernorm's launch and a cuBLAS call. With a batch of a few rows the product is a
// matrix-vector one, bound by reading the weight once, and the add and LayerNorm are a few
// hundred elements: every block redoes them into shared memory (a warp per row, layernorm's own
// arithmetic, ops/cuda/layernorm_row.cuh), block 0 also writes h, and then each warp takes
// output columns: a dot product of a weight row with each normalised row, lanes over C with
// 16-byte loads, a warp sum, the bias and the GELU, one rounding.
#include "ops/cuda/add_layernorm_linear.h"
#include "ops/cuda/gelu.cuh"
#include "ops/cuda/layernorm_row.cuh"

namespace keel::cuda {

namespace {
using namespace dev;

constexpr int kWarps = 8;             // per block
constexpr int kMaxRows = 8;           // a decode step's batch; more rows go to cuBLAS's GEMM
// h and layernorm(h) of every row, in dynamic shared memory: the 48 KB a kernel may use without
// cudaFuncSetAttribute, all of it, so the kernel declares no static shared memory.
constexpr int64_t kSmemBytes = 48 << 10;

// x, y (M, C) (y null: h = x), lnw, lnb (C) (lnb null: none), w (N, C), b (N) or null -> out (M, N),
// and h (M, C) when not null (block 0 writes it). vec: C * sizeof(T) a multiple of 16 and every
// base 16-byte aligned.
template <typename T, bool kVec, bool kGelu>
__global__ void __launch_bounds__(32 * kWarps)
    add_layernorm_linear_kernel(const T* __restrict__ x, const T* __restrict__ y, const T* __restrict__ lnw,
                                const T* __restrict__ lnb, const T* __restrict__ w, const T* __restrict__ b,
                                T* __restrict__ h, T* __restrict__ out, int M, int64_t C, int64_t N, float eps) {
  KEEL_DYNAMIC_SHARED(unsigned char, smem, 16);
  T* hs = reinterpret_cast<T*>(smem);  // (M, C) h as stored
  T* ns = hs + M * C;                  // (M, C) layernorm(h) as stored
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  T* const gh = blockIdx.x == 0 ? h : nullptr;
  for (int r = warp; r < M; r += kWarps) {
    const T *xr = x + r * C, *yr = y ? y + r * C : nullptr;
    T* hr = hs + r * C;
    float s = 0.0f;  // the sum of h as stored, as add_layernorm's kernel sums it
    if constexpr (kVec) {
      constexpr int V = Pack<T>::N;
      for (int64_t k = lane; k < C / V; k += 32) {
        Pack<T> ph = load_pack(xr + k * V);
        if (yr) {
          const Pack<T> py = load_pack(yr + k * V);
#pragma unroll
          for (int j = 0; j < V; ++j) ph.v[j] = from_f32<T>(to_f32(ph.v[j]) + to_f32(py.v[j]));
        }
#pragma unroll
        for (int j = 0; j < V; ++j) s += to_f32(ph.v[j]);
        store_pack(hr + k * V, ph);
        if (gh) store_pack(gh + r * C + k * V, ph);
      }
    } else {
      for (int64_t c = lane; c < C; c += 32) {
        const T v = yr ? from_f32<T>(to_f32(xr[c]) + to_f32(yr[c])) : xr[c];
        hr[c] = v;
        s += to_f32(v);
        if (gh) gh[r * C + c] = v;
      }
    }
    float mean, rstd;  // normalize_row's statistics, not needed here: registers the compiler drops
    normalize_row<T, kVec>(hr, warp_sum(s) / static_cast<float>(C), lnw, lnb, ns + r * C, &mean, &rstd, C, eps, lane);
  }
  __syncthreads();
  const int64_t warps = int64_t(gridDim.x) * kWarps;
  for (int64_t n = int64_t(blockIdx.x) * kWarps + warp; n < N; n += warps) {
    float acc[kMaxRows] = {};
    for_row<T, kVec>(w + n * C, C, lane, [&](int64_t c, float wv) {
#pragma unroll
      for (int m = 0; m < kMaxRows; ++m)
        if (m < M) acc[m] += wv * to_f32(ns[m * C + c]);
    });
#pragma unroll
    for (int m = 0; m < kMaxRows; ++m) {
      if (m >= M) break;
      float v = warp_sum(acc[m]);
      if (lane == 0) {
        if (b) v += to_f32(b[n]);
        if constexpr (kGelu) v = gelu_tanh(v);
        out[m * N + n] = from_f32<T>(v);
      }
    }
  }
}

}  // namespace

bool add_layernorm_linear_fits(int64_t M, int64_t C, DType t) {
  return M >= 1 && M <= kMaxRows && C >= 1 && 2 * M * C * int64_t(dtype_size(t)) <= kSmemBytes;
}

// x, y (M, C), ln_weight, ln_bias (C), weight (N, C), bias (N) -> (M, N); h (M, C)
Tensor add_layernorm_linear(const Tensor& x, const Tensor& y, const Tensor& ln_weight, const Tensor& ln_bias,
                            double eps, const Tensor& weight, const Tensor& bias, bool gelu, Tensor& h) {
  require_device(x, "add_layernorm_linear");
  const int64_t M = x.size(0), C = x.size(1), N = weight.size(0);
  h = y.defined() ? empty({M, C}, {x.dtype(), x.device()}) : x;
  Tensor out = empty({M, N}, {x.dtype(), x.device()});
  visit_float(x.dtype(), "add_layernorm_linear", [&]<typename T>() {
    Where wh = where(x);
    const T *px = ptr<const T>(x), *py = y.defined() ? ptr<const T>(y) : nullptr;
    const T *plw = ptr<const T>(ln_weight), *plb = ln_bias.defined() ? ptr<const T>(ln_bias) : nullptr;
    const T *pw = ptr<const T>(weight), *pb = bias.defined() ? ptr<const T>(bias) : nullptr;
    T* ph = y.defined() ? ptr<T>(h) : nullptr;
    T* po = ptr<T>(out);
    const bool vec = (C * int64_t(sizeof(T))) % 16 == 0 && plan::vector_head(C, sizeof(T), {px, plw, pw}) == 0 &&
                     (!py || plan::vector_head(C, sizeof(T), {py, ph}) == 0) &&
                     (!plb || plan::vector_head(C, sizeof(T), {plb}) == 0);
    const int blocks = static_cast<int>(std::min<int64_t>((N + kWarps - 1) / kWarps, int64_t(sm_count(wh.device)) * 8));
    const size_t smem = size_t(2 * M * C) * sizeof(T);
    auto launch = [&](auto kernel) {
      check_shared_memory(reinterpret_cast<const void*>(kernel), smem, "add_layernorm_linear",
                          "add_layernorm_linear_kernel");
      launch_kernel(kernel, blocks, 32 * kWarps, smem, wh.stream, px, py, plw, plb, pw, pb, ph, po, static_cast<int>(M),
                    C, N, static_cast<float>(eps));
      KEEL_CHECK_LAUNCH();
    };
    if (vec)
      gelu ? launch(add_layernorm_linear_kernel<T, true, true>) : launch(add_layernorm_linear_kernel<T, true, false>);
    else
      gelu ? launch(add_layernorm_linear_kernel<T, false, true>) : launch(add_layernorm_linear_kernel<T, false, false>);
  });
  return out;
}

}  // namespace keel::cuda
