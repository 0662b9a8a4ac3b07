// Device-side helpers shared by the kernels in ops/cuda/*.cu: f32 <-> storage conversions,
// 16-byte packs, warp and block reductions, dtype dispatch and launch sizes. Included by .cu
// files only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "core/cuda/check.h"
#include "core/cuda/convert.cuh"
#include "core/cuda/launch.cuh"
#include "core/cuda/runtime.h"
#include "core/factory.h"
#include "core/tensor.h"
#include "ops/cuda/plan.h"

namespace keel::cuda::dev {

constexpr int kThreads = 256;  // default block size of the grid-stride kernels
constexpr int kMaxDims = 8;

// Storage type <-> f32 conversions (to_f32, from_f32) come from core/cuda/convert.cuh.

// ---- 16 bytes of T: one 128-bit load or store per thread ----
template <typename T> struct alignas(16) Pack {
  static constexpr int N = 16 / sizeof(T);
  T v[N];
};
// p must be 16-byte aligned (plan::vector_head makes sure).
template <typename T> __device__ __forceinline__ Pack<T> load_pack(const T* p) {
  uint4 u = *reinterpret_cast<const uint4*>(p);
  Pack<T> r;
  memcpy(&r, &u, 16);
  return r;
}
template <typename T> __device__ __forceinline__ void store_pack(T* p, const Pack<T>& r) {
  uint4 u;
  memcpy(&u, &r, 16);
  *reinterpret_cast<uint4*>(p) = u;
}

// ---- reductions. Float addition is commutative, so the xor butterfly leaves the same value
// in every lane; the order of the adds depends only on the block shape: results repeat run to
// run (no atomics anywhere in keel's reductions). ----
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Over the whole block (blockDim.x a multiple of 32, at most 1024); every thread gets the
// result. `scratch` is 32 floats of shared memory; the leading barrier lets a block call this
// several times in a row with one scratch.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  return warp_sum(lane < nwarps ? scratch[lane] : 0.0f);
}
__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  return warp_max(lane < nwarps ? scratch[lane] : -INFINITY);
}

// Online softmax state: running max m and sum s of exp(x - m). Merging two states rescales the
// smaller-max one; an empty state is (-inf, 0) and never produces exp(-inf - -inf) = NaN. A NaN
// input makes s NaN (push), and s stays NaN through every merge, an empty partner's included
// (fmaxf drops the NaN m, so the sum carries it): a row with a NaN has a NaN log-sum-exp, as on
// the CPU.
struct MaxSum {
  float m, s;
};
__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
  float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return {m, a.s + b.s};  // 0, or NaN from a NaN input
  return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}
__device__ __forceinline__ MaxSum push(MaxSum a, float x) {
  if (x == -INFINITY) return a;  // exp(-inf) adds nothing (and -inf - -inf would be NaN)
  if (x <= a.m) return {a.m, a.s + expf(x - a.m)};
  return {x, a.s * expf(a.m - x) + 1.0f};  // a.m = -inf gives 0 * 0 + 1
}
__device__ __forceinline__ MaxSum warp_merge(MaxSum v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    MaxSum other{__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.s, o)};
    v = merge(v, other);
  }
  return v;
}
// `scratch`: 64 floats of shared memory. Every thread gets the same bits: the compiler contracts
// merge's a.s * x + b.s * y into an fma, so merge(a, b) and merge(b, a) can differ in the last
// bit and the lanes of a butterfly with them; lane 0's state is handed to all (the same in
// every warp, which all merge the same values).
__device__ __forceinline__ MaxSum block_merge(MaxSum v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_merge(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v.m, scratch[32 + warp] = v.s;
  __syncthreads();
  MaxSum w = lane < nwarps ? MaxSum{scratch[lane], scratch[32 + lane]} : MaxSum{-INFINITY, 0.0f};
  w = warp_merge(w);
  return {__shfl_sync(0xffffffffu, w.m, 0), __shfl_sync(0xffffffffu, w.s, 0)};
}

// ---- one row per block: the block's threads share a row of n elements. `head` is the number
// of scalar elements before the row's first 16-byte boundary (row_head), or n to go scalar;
// every array passed along with it must have the same alignment (the callers check). ----
template <typename T> __device__ __forceinline__ int64_t row_head(const T* p, int64_t n) {
  int64_t h = static_cast<int64_t>(((16u - (reinterpret_cast<uintptr_t>(p) & 15u)) & 15u) / sizeof(T));
  return h < n ? h : n;
}
// f(j, a[j], b[j]) (b null: 0) for this thread's share of the row, in f32.
template <typename T, typename F>
__device__ __forceinline__ void row_fold(const T* __restrict__ a, const T* __restrict__ b, int64_t n, int64_t head,
                                         F&& f) {
  constexpr int V = Pack<T>::N;
  for (int64_t j = threadIdx.x; j < head; j += blockDim.x) f(j, to_f32(a[j]), b ? to_f32(b[j]) : 0.0f);
  const int64_t nvec = (n - head) / V;
  for (int64_t k = threadIdx.x; k < nvec; k += blockDim.x) {
    const int64_t j = head + k * V;
    Pack<T> pa = load_pack(a + j), pb;
    if (b) pb = load_pack(b + j);
#pragma unroll
    for (int q = 0; q < V; ++q) f(j + q, to_f32(pa.v[q]), b ? to_f32(pb.v[q]) : 0.0f);
  }
  for (int64_t j = head + nvec * V + threadIdx.x; j < n; j += blockDim.x) f(j, to_f32(a[j]), b ? to_f32(b[j]) : 0.0f);
}
// out[j] = f(j, a[j], b[j]) (b null: 0) for this thread's share of the row.
template <typename T, typename F>
__device__ __forceinline__ void row_map(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ out, int64_t n,
                                        int64_t head, F&& f) {
  constexpr int V = Pack<T>::N;
  for (int64_t j = threadIdx.x; j < head; j += blockDim.x) out[j] = from_f32<T>(f(j, to_f32(a[j]), b ? to_f32(b[j]) : 0.0f));
  const int64_t nvec = (n - head) / V;
  for (int64_t k = threadIdx.x; k < nvec; k += blockDim.x) {
    const int64_t j = head + k * V;
    Pack<T> pa = load_pack(a + j), pb, po;
    if (b) pb = load_pack(b + j);
#pragma unroll
    for (int q = 0; q < V; ++q) po.v[q] = from_f32<T>(f(j + q, to_f32(pa.v[q]), b ? to_f32(pb.v[q]) : 0.0f));
    store_pack(out + j, po);
  }
  for (int64_t j = head + nvec * V + threadIdx.x; j < n; j += blockDim.x)
    out[j] = from_f32<T>(f(j, to_f32(a[j]), b ? to_f32(b[j]) : 0.0f));
}

// ---- host side ----

// keel dtype -> the CUDA storage type (float, __nv_bfloat16, __half); f64 and integers raise
// DTypeError naming `op`.
template <typename F>
void visit_float(DType t, const char* op, F&& f) {
  visit_cuda_float(t, op, std::forward<F>(f));
}
template <typename F>
void visit_index(DType t, const char* op, F&& f) {
  if (t == DType::i32) return f.template operator()<int32_t>();
  if (t == DType::i64) return f.template operator()<int64_t>();
  throw DTypeError(op, std::string("indices must be i32 or i64, got ") + dtype_name(t));
}

// A fact of a device that stays fixed while the process runs, looked up once: the cache holds
// lookup(device) + 1 (0 = not looked up yet), so any value that fits an int can be cached;
// lookups race only to store the same value. Devices past the cache are looked up every time.
template <typename Lookup>
int once_per_device(std::atomic<int> (&cache)[64], int device, Lookup lookup) {
  if (device < 0 || device >= 64) return lookup(device);
  int known = cache[device].load(std::memory_order_relaxed);
  if (known == 0) {
    known = lookup(device) + 1;
    cache[device].store(known, std::memory_order_relaxed);
  }
  return known - 1;
}

// Multiprocessor count of a device.
inline int sm_count(int device) {
  static std::atomic<int> cache[64] = {};
  return once_per_device(cache, device, [](int d) {
    int n = 0;
    KEEL_CHECK_CUDA(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, d));
    return n;
  });
}

// DeviceInfo::runs_sm90a of a device (a forward asks on every call).
inline bool runs_sm90a(int device) {
  static std::atomic<int> cache[64] = {};
  return once_per_device(cache, device, [](int d) { return int(device_info(d).runs_sm90a()); }) != 0;
}

// Blocks for a grid-stride loop over `items` with `threads` per block: enough to fill the GPU
// several times over, no more (each thread then loops).
inline int grid_for(int64_t items, int threads, int device) {
  int64_t want = (items + threads - 1) / threads;
  int64_t cap = int64_t(sm_count(device)) * 16;
  if (want > cap) want = cap;
  return static_cast<int>(want < 1 ? 1 : want);
}

// DeviceError naming `op` when t's device does not exist (a build with CUDA on a machine
// without a GPU): every entry point checks first, so even an empty tensor gets the error.
inline void require_device(const Tensor& t, const char* op) { check_device(t.device().index, op); }

// Makes t's device current and returns it with its stream.
struct Where {
  int device;
  cudaStream_t stream;
};
inline Where where(const Tensor& t) {
  int d = t.device().index;
  KEEL_CHECK_CUDA(cudaSetDevice(d));
  return {d, detail::stream(d)};
}

template <typename T> T* ptr(const Tensor& t) { return static_cast<T*>(t.raw_data()); }

// Threads for a one-block-per-row kernel over rows of n elements: enough that each thread has
// a few 16-byte packs to load, at least a warp, at most max_threads.
inline int row_threads(int64_t n, size_t elem, int max_threads = kThreads) {
  int64_t packs = (n * int64_t(elem) + 15) / 16;
  int t = 32;
  while (t < max_threads && t * 4 < packs) t *= 2;
  return t;
}

}  // namespace keel::cuda::dev
