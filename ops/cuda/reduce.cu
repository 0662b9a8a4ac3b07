// Reductions on the device: sum and max (with argmax) over one dim of a contiguous tensor,
// viewed as (outer, n, inner). Sums accumulate in f32.
//
// Two kernel shapes, each of which may split the reduced dim across blocks when there are too
// few rows or columns to fill the GPU (a full sum is outer = inner = 1; a bias gradient is
// outer = 1, inner = C). A split writes f32 partials (and argmax candidates) to a scratch
// tensor, and a second launch of the same kernel reduces those, so every result is summed in
// an order fixed by the shapes alone: deterministic, no atomics.
//  - inner == 1 (the reduced dim is contiguous): one block per (row, split), threads stride
//    along the row, block reduction at the end;
//  - inner > 1: one block per (outer, split, 32 columns): 32 x 8 threads, a warp's 32 lanes
//    read 32 consecutive columns (coalesced), the 8 warps take every 8th row of the split.
// Max follows PyTorch and the CPU kernel: a NaN beats every number, so a row holding a NaN has
// max NaN and argmax its first NaN; otherwise ties go to the smallest index. The merge order of
// threads, splits and warps cannot change the answer, because beats() is a strict total order
// on (value, index) pairs.
#include <limits>

#include "core/cuda/kernels.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/reduce.h"

namespace keel::cuda {

namespace {
using namespace dev;

constexpr int64_t kNoIndex = std::numeric_limits<int64_t>::max();

struct Best {
  float v;
  int64_t i;
};
// a beats b: a NaN beats any number (PyTorch's max propagates NaN), then the larger value, and
// between equal values or two NaNs the smaller index (the first maximum, or first NaN, wins).
// Comparisons alone would drop NaNs: NaN > x and NaN == x are both false. (v != v holds for NaN
// only; written so rather than isnan() to need nothing from the math headers of either build.)
__device__ __forceinline__ bool beats(Best a, Best b) {
  const bool a_nan = a.v != a.v, b_nan = b.v != b.v;
  if (a_nan || b_nan) return a_nan && (!b_nan || a.i < b.i);
  return a.v > b.v || (a.v == b.v && a.i < b.i);
}
__device__ __forceinline__ Best pick(Best a, Best b) { return beats(b, a) ? b : a; }

__device__ __forceinline__ Best warp_best(Best b) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    Best other{__shfl_xor_sync(0xffffffffu, b.v, o), static_cast<int64_t>(__shfl_xor_sync(0xffffffffu, static_cast<long long>(b.i), o))};
    b = pick(b, other);
  }
  return b;
}

// x (rows, n) with optional candidate indices in_idx (rows, n) (null: the position itself)
// -> out (rows, splits), out_idx (rows, splits) for max. Block b reduces row b / splits over
// the columns [s * chunk, (s + 1) * chunk) of split s = b % splits.
template <typename In, typename Out, bool kMax>
__global__ void row_reduce_kernel(const In* __restrict__ x, const int64_t* __restrict__ in_idx, int64_t rows, int64_t n,
                                  int splits, int64_t chunk, Out* __restrict__ out, int64_t* __restrict__ out_idx) {
  KEEL_SHARED(float[32], scratch);
  KEEL_SHARED(float[32], best_v);
  KEEL_SHARED(long long[32], best_i);
  for (int64_t b = blockIdx.x; b < rows * splits; b += gridDim.x) {
    const int64_t r = b / splits, lo = (b % splits) * chunk, hi = min(n, lo + chunk);
    const In* row = x + r * n;
    if constexpr (!kMax) {
      float acc = 0.0f;
      for (int64_t j = lo + threadIdx.x; j < hi; j += blockDim.x) acc += to_f32(row[j]);
      acc = block_sum(acc, scratch);
      if (threadIdx.x == 0) out[b] = from_f32<Out>(acc);
    } else {
      // Every element beats this start (a -inf element by its smaller index, a NaN by being
      // NaN), so kNoIndex survives only in threads given no element, which lose the merge.
      Best best{-INFINITY, kNoIndex};
      for (int64_t j = lo + threadIdx.x; j < hi; j += blockDim.x)
        best = pick(best, Best{to_f32(row[j]), in_idx ? in_idx[r * n + j] : j});
      best = warp_best(best);
      const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
      __syncthreads();  // the previous row's readers are done with best_*
      if (lane == 0) best_v[warp] = best.v, best_i[warp] = best.i;
      __syncthreads();
      if (threadIdx.x == 0) {
        for (int k = 1; k < int(blockDim.x >> 5); ++k) best = pick(best, Best{best_v[k], best_i[k]});
        // the warp_best result above is warp 0's; merged with the others in warp order
        out[b] = from_f32<Out>(best.v);
        out_idx[b] = best.i;
      }
    }
  }
}

// x (outer, n, inner), in_idx likewise or null -> out (outer, splits, inner), out_idx likewise.
// Block: 32 x 8 threads; block b covers outer o, split s, columns [t * 32, t * 32 + 32).
template <typename In, typename Out, bool kMax>
__global__ void col_reduce_kernel(const In* __restrict__ x, const int64_t* __restrict__ in_idx, int64_t outer, int64_t n,
                                  int64_t inner, int splits, int64_t chunk, Out* __restrict__ out,
                                  int64_t* __restrict__ out_idx) {
  KEEL_SHARED(float[8][33], sv);
  KEEL_SHARED(long long[8][33], si);
  const int64_t tiles = (inner + 31) / 32;
  for (int64_t b = blockIdx.x; b < outer * splits * tiles; b += gridDim.x) {
    const int64_t o = b / (splits * tiles), s = (b / tiles) % splits, t = b % tiles;
    const int64_t i = t * 32 + threadIdx.x, lo = s * chunk, hi = min(n, lo + chunk);
    float acc = 0.0f;
    Best best{-INFINITY, kNoIndex};
    if (i < inner) {
      for (int64_t j = lo + threadIdx.y; j < hi; j += blockDim.y) {
        const int64_t e = (o * n + j) * inner + i;
        if constexpr (kMax)
          best = pick(best, Best{to_f32(x[e]), in_idx ? in_idx[e] : j});
        else
          acc += to_f32(x[e]);
      }
    }
    __syncthreads();  // the previous tile's readers are done with sv/si
    sv[threadIdx.y][threadIdx.x] = kMax ? best.v : acc;
    si[threadIdx.y][threadIdx.x] = best.i;
    __syncthreads();
    if (threadIdx.y == 0 && i < inner) {
      const int64_t dst = (o * splits + s) * inner + i;
      if constexpr (kMax) {
        for (int k = 1; k < int(blockDim.y); ++k) best = pick(best, Best{sv[k][threadIdx.x], si[k][threadIdx.x]});
        out[dst] = from_f32<Out>(best.v);
        out_idx[dst] = best.i;
      } else {
        for (int k = 1; k < int(blockDim.y); ++k) acc += sv[k][threadIdx.x];
        out[dst] = from_f32<Out>(acc);
      }
    }
  }
}

// g (outer, inner), idx (outer, inner) -> gx (outer, n, inner): one thread per element of gx,
// so gx needs no zero fill first.
template <typename T>
__global__ void scatter_max_kernel(const T* __restrict__ g, const int64_t* __restrict__ idx, int64_t n, int64_t inner,
                                   int64_t total, T* __restrict__ gx) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = e % inner, j = (e / inner) % n, o = e / (n * inner), k = o * inner + i;
    gx[e] = idx[k] == j ? g[k] : from_f32<T>(0.0f);
  }
}

// How many blocks to split the reduced dim of length n into, given `base` blocks without a
// split and at least `min_per_split` elements per split: enough to put ~4 blocks on each SM.
int choose_splits(int64_t base, int64_t n, int64_t min_per_split, int device) {
  int64_t want = (int64_t(sm_count(device)) * 4 + base - 1) / base;
  int64_t most = n / min_per_split;
  int64_t s = want < most ? want : most;
  return static_cast<int>(s < 1 ? 1 : (s > 1024 ? 1024 : s));
}

template <typename T, bool kMax>
void reduce_impl(const Tensor& x, int64_t outer, int64_t n, int64_t inner, Tensor& out, Tensor* argmax) {
  Where w = where(x);
  const T* px = ptr<const T>(x);
  T* po = ptr<T>(out);
  int64_t* pi = kMax ? ptr<int64_t>(*argmax) : nullptr;
  const Device dev = x.device();
  if (inner == 1) {
    const int threads = row_threads(n, sizeof(T));
    // A max is exact in any order, so its split serves speed alone, and up to 32K elements a row
    // is less work for one block than a second launch costs (a decode step's argmax over the
    // vocabulary: one launch). A sum keeps its split, and so its bits.
    int splits = choose_splits(outer, n, kMax ? 32768 : 2048, w.device);
    int64_t chunk = (n + splits - 1) / splits;
    splits = static_cast<int>((n + chunk - 1) / chunk);
    const int blocks = static_cast<int>(std::min<int64_t>(outer * splits, int64_t(sm_count(w.device)) * 32));
    if (splits == 1) {
      launch_kernel(row_reduce_kernel<T, T, kMax>, blocks, threads, 0, w.stream, px, nullptr, outer, n, 1, n, po, pi);
      KEEL_CHECK_LAUNCH();
      return;
    }
    Tensor pv = empty({outer, splits}, {DType::f32, dev});
    Tensor pidx = kMax ? empty({outer, splits}, {DType::i64, dev}) : Tensor();
    int64_t* ppi = kMax ? ptr<int64_t>(pidx) : nullptr;
    launch_kernel(row_reduce_kernel<T, float, kMax>, blocks, threads, 0, w.stream, px, nullptr, outer, n, splits, chunk,
                                                                        ptr<float>(pv), ppi);
    KEEL_CHECK_LAUNCH();
    const int blocks2 = static_cast<int>(std::min<int64_t>(outer, int64_t(sm_count(w.device)) * 32));
    launch_kernel(row_reduce_kernel<float, T, kMax>, blocks2, 32, 0, w.stream, ptr<const float>(pv), ppi, outer, splits, 1,
                                                                    splits, po, pi);
    KEEL_CHECK_LAUNCH();
    return;
  }
  const dim3 threads(32, 8);
  const int64_t tiles = (inner + 31) / 32;
  int splits = choose_splits(outer * tiles, n, 64, w.device);
  int64_t chunk = (n + splits - 1) / splits;
  splits = static_cast<int>((n + chunk - 1) / chunk);
  const int64_t cap = int64_t(sm_count(w.device)) * 32;
  if (splits == 1) {
    const int blocks = static_cast<int>(std::min(outer * tiles, cap));
    launch_kernel(col_reduce_kernel<T, T, kMax>, blocks, threads, 0, w.stream, px, nullptr, outer, n, inner, 1, n, po, pi);
    KEEL_CHECK_LAUNCH();
    return;
  }
  Tensor pv = empty({outer, splits, inner}, {DType::f32, dev});
  Tensor pidx = kMax ? empty({outer, splits, inner}, {DType::i64, dev}) : Tensor();
  int64_t* ppi = kMax ? ptr<int64_t>(pidx) : nullptr;
  const int blocks = static_cast<int>(std::min(outer * splits * tiles, cap));
  launch_kernel(col_reduce_kernel<T, float, kMax>, blocks, threads, 0, w.stream, px, nullptr, outer, n, inner, splits, chunk,
                                                                      ptr<float>(pv), ppi);
  KEEL_CHECK_LAUNCH();
  const int blocks2 = static_cast<int>(std::min(outer * tiles, cap));
  launch_kernel(col_reduce_kernel<float, T, kMax>, blocks2, threads, 0, w.stream, ptr<const float>(pv), ppi, outer, splits,
                                                                       inner, 1, splits, po, pi);
  KEEL_CHECK_LAUNCH();
}
}  // namespace

// x (outer, n, inner) contiguous -> out (outer, inner) [, argmax (outer, inner) i64]
void reduce_dim(Reduce kind, const Tensor& x, int64_t outer, int64_t n, int64_t inner, Tensor& out,
                Tensor* argmax) {
  require_device(x, "reduce");
  if (outer * inner == 0) return;
  if (n == 0) {  // an empty sum (max over an empty dim is refused by the front end)
    fill(out, 0.0);
    return;
  }
  visit_float(x.dtype(), "reduce", [&]<typename T>() {
    if (kind == Reduce::sum)
      reduce_impl<T, false>(x, outer, n, inner, out, nullptr);
    else
      reduce_impl<T, true>(x, outer, n, inner, out, argmax);
  });
}

// g (outer, inner), idx (outer, inner) -> gx (outer, n, inner)
void scatter_max_grad(const Tensor& g, const Tensor& idx, int64_t outer, int64_t n, int64_t inner, Tensor& gx) {
  require_device(gx, "max backward");
  const int64_t total = outer * n * inner;
  if (total == 0) return;
  Tensor gc = g.detach().contiguous(), ic = idx.contiguous();
  visit_float(gx.dtype(), "max backward", [&]<typename T>() {
    Where w = where(gx);
    launch_kernel(scatter_max_kernel<T>, grid_for(total, kThreads, w.device), kThreads, 0, w.stream,
        ptr<const T>(gc), ptr<const int64_t>(ic), n, inner, total, ptr<T>(gx));
    KEEL_CHECK_LAUNCH();
  });
}

}  // namespace keel::cuda
