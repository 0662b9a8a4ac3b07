// What the attention kernels share: the logit and its derivative, the statistics, the host-side
// argument checks and the head-dim dispatch (every kernel), and for the f32 kernels
// (attention_forward.cu, attention_backward.cu) the warp-level products on shared-memory tiles,
// the tile loads and the shared-memory layout helper.
//
// The f32 kernels' work split: every kernel runs 4 warps, and each warp owns 16 rows of the
// block's own tile (64 rows in all), so a warp's products are 16 x N. The streamed tile (the other
// operand) sits in shared memory, read by all 4 warps. Per-element work (mask, softcap, exp) is
// done by lanes on an f32 copy of the warp's 16 x N product in shared memory.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "core/cuda/check.h"
#include "core/cuda/convert.cuh"
#include "core/cuda/launch.cuh"
#include "core/cuda/ptx.cuh"
#include "ops/cuda/attention.h"
#include "ops/cuda/attention_tiles.h"

namespace keel::cuda::attn {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kRowsPerWarp = 16;
constexpr int kOwnRows = kWarps * kRowsPerWarp;  // rows of the block's own tile (64)

template <typename T>
constexpr bool kIsHalf = !std::is_same_v<T, float>;  // bf16, f16: the tensor-core (mma) kernels

// Where one (B, H, T, D) operand's rows lie in memory: row (b, h, t) starts b * b_ + h * h_ + t * t
// elements from the tensor's first, and its D elements are adjacent. A packed tensor has
// (H T D, T D, D); the heads of one third of a (B, T, 3C) projection have (3 T C, D, 3C), so the
// kernels read q, k and v where the projection wrote them and write the output (B, T, C) where the
// next layer reads it, with no transposed copies in between (ops/attention.h, attention_packed).
struct Rows {
  int64_t b_, h_;
  int t;  // the row stride: adjacent positions of one head
  __host__ __device__ int64_t pair(int bh, int H) const { return (bh / H) * b_ + (bh % H) * h_; }
};

// Shape data every kernel takes by value. window[h] normalised (attn::normalize_window).
struct Dims {
  int H, T;
  int D;                 // head dim: at most the kernel width (attention_tiles.h)
  float scale, softcap;  // softcap 0 = none
  Rows q, k, v, out;     // the forward's operands and the backward's inputs
  Rows dout, dq, dk, dv;  // the backward's (unset in the forward)
  int window[kMaxHeads];
};

// Element conversions (to_f32, from_f32: storage T <-> f32 compute) come from core/cuda/convert.cuh.

// exp: full precision for the f32 path (its parity tolerance is 1e-5); the fast hardware exp for
// the half paths, whose error (a few ulp of f32) is far below bf16/f16 rounding.
template <typename T> __device__ __forceinline__ float attn_exp(float x) {
  if constexpr (kIsHalf<T>) return __expf(x);
  else return expf(x);
}

// The logit as the softmax sees it: scaled, then soft-capped (c * tanh(s / c)) when c > 0.
__device__ __forceinline__ float logit(float dot, const Dims& d) {
  const float s = dot * d.scale;
  return d.softcap > 0 ? d.softcap * tanhf(s / d.softcap) : s;
}

// dS (f32) of a pair from its probability p, dP = dO_i . v_j, D_i = dO_i . O_i and its logit s
// (scaled, capped): p (dP - D_i), times the soft-cap's derivative 1 - (s / c)^2 when capped.
// What attention_backward.cu's header derives; before the scale of dQ = scale dS K.
__device__ __forceinline__ float dlogit(float p, float dp, float d_i, float s, const Dims& dims) {
  float ds = p * (dp - d_i);
  if (dims.softcap > 0) {
    const float t = s / dims.softcap;
    ds *= 1.0f - t * t;
  }
  return ds;
}

// D_i = dO_i . O_i of row i (out and dout at its first element), summed by a warp with lanes over
// d; every lane gets it. The backward's preprocessing: attention_backward.cu's dvec pass and the
// Hopper backward's statistics pass (attention_sm90_backward.cu).
template <typename T>
__device__ float row_dvec(const T* __restrict__ out, const T* __restrict__ dout, int D, int lane) {
  float s = 0.0f;
  for (int d = lane; d < D; d += 32) s += to_f32(out[d]) * to_f32(dout[d]);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
  return s;
}

// ---- shared memory of the f32 kernels ----
// Row stride of a tile: the products read down columns, and an odd stride puts the 32 rows a warp
// reads in 32 different banks.
constexpr int ld_f32(int cols) { return cols + 1; }

// Shared memory a block of width kWidth may take: an A100's 163 KB up to width 128; width 256 takes an
// H100's 227 KB where its tiles cannot shrink further (the f32 kernels: 16-row warp tiles).
constexpr int max_shared_bytes(int kWidth) { return (kWidth <= 128 ? 163 : 227) * 1024; }

// Byte offsets of the regions of a kernel's dynamic shared memory, each 128-byte aligned.
struct SmemCarver {
  int bytes = 0;
  constexpr int take(int n) {
    const int at = bytes;
    bytes += (n + 127) / 128 * 128;
    return at;
  }
};

// ---- warp-level products: a 16 x N f32 accumulator owned by one warp, plain FMAs ----
// (the exact path of the f32 kernels: no tensor cores, since TF32 would miss f32's 1e-5 parity
// and mma.sync has no f32 inputs; lane l holds columns l, l + 32, ... of every row)
// add_ab:  C += A B    with A 16 x K (row-major, stride lda) and B K x N (row-major, ldb)
// add_abt: C += A B^T  with A 16 x K and B N x K (both row-major): rows of B dotted with rows of A
// load/store move C between registers and an f32 shared-memory tile (row-major, ldc).
template <int N>
struct WarpAcc {
  static_assert(N % 32 == 0, "the f32 path gives each lane the columns lane + 32 t");
  float a[16][N / 32];  // a[r][t] = C[r][lane + 32 t]

  __device__ static int lane() { return threadIdx.x & 31; }
  __device__ void zero() {
#pragma unroll
    for (int r = 0; r < 16; ++r)
#pragma unroll
      for (int t = 0; t < N / 32; ++t) a[r][t] = 0.0f;
  }
  __device__ void load(const float* C, int ldc) {
#pragma unroll
    for (int r = 0; r < 16; ++r)
#pragma unroll
      for (int t = 0; t < N / 32; ++t) a[r][t] = C[r * ldc + lane() + 32 * t];
  }
  __device__ void store(float* C, int ldc) const {
#pragma unroll
    for (int r = 0; r < 16; ++r)
#pragma unroll
      for (int t = 0; t < N / 32; ++t) C[r * ldc + lane() + 32 * t] = a[r][t];
  }
  template <int K> __device__ void add_ab(const float* A, int lda, const float* B, int ldb) {
#pragma unroll 2
    for (int k = 0; k < K; ++k) {
      float b[N / 32];
#pragma unroll
      for (int t = 0; t < N / 32; ++t) b[t] = B[k * ldb + lane() + 32 * t];  // consecutive: no conflict
#pragma unroll
      for (int r = 0; r < 16; ++r) {
        const float x = A[r * lda + k];  // one address for the warp: a broadcast
#pragma unroll
        for (int t = 0; t < N / 32; ++t) a[r][t] = fmaf(x, b[t], a[r][t]);
      }
    }
  }
  template <int K> __device__ void add_abt(const float* A, int lda, const float* B, int ldb) {
#pragma unroll 2
    for (int k = 0; k < K; ++k) {
      float b[N / 32];
#pragma unroll
      for (int t = 0; t < N / 32; ++t) b[t] = B[(lane() + 32 * t) * ldb + k];  // odd ldb: no conflict
#pragma unroll
      for (int r = 0; r < 16; ++r) {
        const float x = A[r * lda + k];
#pragma unroll
        for (int t = 0; t < N / 32; ++t) a[r][t] = fmaf(x, b[t], a[r][t]);
      }
    }
  }
};

// ---- tile loads (the whole block) ----
// rows x kWidth elements to shared (stride ld) from global rows of D elements (D <= kWidth, stride gld);
// rows at or beyond `valid` and columns at or beyond D are zero-filled, so a sequence end inside
// a tile reads no memory past it and feeds only finite zeros to the products (a NaN there would
// survive 0 * NaN in P V), and a head dim below the width runs as if it were the width
// (attention_tiles.h). D is a multiple of 8, so a 16-byte vector is all inside or all outside.
template <int kWidth>
__device__ void load_tile(float* dst, int ld, const float* src, int rows, int valid, int D, int gld) {
  constexpr int kVec = 4;  // 16-byte global loads; scalar stores into the odd-strided tile
  for (int c = threadIdx.x; c < rows * (kWidth / kVec); c += kThreads) {
    const int r = c / (kWidth / kVec), col = c % (kWidth / kVec) * kVec;
    float4 x = make_float4(0, 0, 0, 0);
    if (r < valid && col < D) x = ptx::load_16<float4>(src + static_cast<int64_t>(r) * gld + col);
    float* o = dst + r * ld + col;
    o[0] = x.x, o[1] = x.y, o[2] = x.z, o[3] = x.w;
  }
}

// n f32 values per row of a (B, H, T) statistic (lse, D_i), `fill` past the sequence end.
__device__ inline void load_row_stats(float* dst, const float* src, int n, int valid, float fill) {
  for (int r = threadIdx.x; r < n; r += kThreads) dst[r] = r < valid ? src[r] : fill;
}

// A warp writes the first D columns of its 16 f32 rows (stride ld) to global rows [row0, row0 + 16)
// ∩ [0, T) (stride gld), times `mul`: lanes walk the rows in order, so each store instruction is
// coalesced. The padding columns past D (zeros) are never stored.
template <int kWidth>
__device__ void store_rows(float* dst, const float* src, int ld, int row0, int seq_len, float mul, int D, int gld) {
  const int lane = threadIdx.x & 31;
  for (int e = lane; e < kRowsPerWarp * kWidth; e += 32) {  // over the width: no division by D
    const int r = e / kWidth, c = e % kWidth;
    if (row0 + r < seq_len && c < D) dst[static_cast<int64_t>(row0 + r) * gld + c] = src[r * ld + c] * mul;
  }
}

__device__ __forceinline__ float warp_sum_pair(float x) { return x + __shfl_xor_sync(0xffffffffu, x, 1); }
__device__ __forceinline__ float warp_max_pair(float x) { return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1)); }

// ---- host side ----
// Raises the dynamic shared-memory limit of a kernel above the default 48 KB (needed once per
// device; cheap enough to repeat per launch) and launches it on the device's compute stream.
// A block larger than the device allows, its static shared memory counted (f32 at head dims
// above 128 needs about 220 KB: an H100 has 227, an A100 163), is a DeviceError saying so, not
// a failed launch.
template <typename Kernel, typename... Args>
void launch_threads(Kernel kernel, dim3 grid, int threads, int smem_bytes, int device, Args... args) {
  int optin = 0;
  KEEL_CHECK_CUDA(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  const size_t bytes = static_shared_of(reinterpret_cast<const void*>(kernel)) + static_cast<size_t>(smem_bytes);
  if (bytes > static_cast<size_t>(optin))
    throw DeviceError("attention (CUDA)",
                      "this head dim and dtype need " + std::to_string(bytes >> 10) +
                          " KB of shared memory per block; cuda:" + std::to_string(device) + " offers " +
                          std::to_string(optin >> 10) + " KB",
                      "run the model in bf16 or f16 (the tensor-core kernels need less), or use a head dim of at "
                      "most 128 in f32");
  KEEL_CHECK_CUDA(cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       smem_bytes));
  launch_kernel(kernel, grid, threads, smem_bytes, detail::stream(device), args...);
  KEEL_CHECK_LAUNCH();
}
// The same with this file's kThreads (the f32 kernels' 4 warps).
template <typename Kernel, typename... Args>
void launch(Kernel kernel, dim3 grid, int smem_bytes, int device, Args... args) {
  launch_threads(kernel, grid, kThreads, smem_bytes, device, args...);
}

// The ShapeError for a head dim no kernel width takes (attention_tiles.h).
inline void check_head_dim(const char* op, int64_t D) {
  if (!head_dim_supported(D))
    throw ShapeError(op, "head dim D = " + std::to_string(D) + " has no CUDA kernel",
                     "the CUDA attention kernels take head dims that are multiples of 8 from 8 to " +
                         std::to_string(kMaxHeadDim) + "; choose n_embd / n_head among them (or run on the CPU)");
}

// Calls f.template operator()<kWidth>() with the kernel width kWidth that runs head dim D
// (attention_tiles.h): a power of two from Narrowest (16 for the tensor-core kernels, 32 for f32)
// to 256. ShapeError for a head dim no width takes.
template <int Narrowest, typename F>
void with_width(const char* op, int64_t D, F&& f) {
  check_head_dim(op, D);
  const int width = kernel_width(D, Narrowest);
  if constexpr (Narrowest <= 16)
    if (width == 16) return f.template operator()<16>();
  if (width == 32) return f.template operator()<32>();
  if (width == 64) return f.template operator()<64>();
  if (width == 128) return f.template operator()<128>();
  return f.template operator()<256>();
}

// Calls f.template operator()<T>() for a bf16 or f16 dtype (the tensor-core kernels' types).
template <typename F>
void visit_half(const char* op, DType dtype, F&& f) {
  if (dtype == DType::bf16) return f.template operator()<__nv_bfloat16>();
  if (dtype == DType::f16) return f.template operator()<__half>();
  throw DTypeError(op, std::string("CUDA attention computes in f32, bf16 or f16, got ") + dtype_name(dtype));
}

// Dims for a call; checks what the kernels assume that the front end does not already promise.
inline Dims make_dims(const char* op, const Tensor& q, const std::vector<int64_t>& window, double scale,
                      double softcap) {
  const int64_t H = q.size(1), T = q.size(2);
  check_head_dim(op, q.size(3));
  if (H > kMaxHeads)
    throw ShapeError(op, "CUDA attention supports up to " + std::to_string(kMaxHeads) + " heads, got " +
                             std::to_string(H));
  // Grids are (B*H, T / 64) for the f32 kernels, (T / 64, H, B) for the mma kernels (2B for the
  // backward at widths above 128): dim x holds 2^31 - 1 blocks, dims y and z 65535.
  if (T > int64_t(65535) * kOwnRows || q.size(0) * H > 2147483647 || 2 * q.size(0) > 65535)
    throw ShapeError(op, "sequence or batch too large for the CUDA attention kernels: " + shape_str(q.shape()),
                     "at most 32767 sequences per call: split the batch");
  if (static_cast<int64_t>(window.size()) != H)
    throw ShapeError(op, std::to_string(window.size()) + " windows for " + std::to_string(H) + " heads");
  Dims d{};
  d.H = static_cast<int>(H);
  d.T = static_cast<int>(T);
  d.D = static_cast<int>(q.size(3));
  d.scale = static_cast<float>(scale);
  d.softcap = static_cast<float>(softcap);
  for (int64_t h = 0; h < H; ++h) d.window[h] = normalize_window(window[h], T);
  return d;
}

// The kernels read and write 16-byte vectors of a row: a (B, H, T, D) operand's elements must be
// adjacent along D, its first element and every stride a multiple of 16 bytes, and its row stride
// an int (Rows); the (B, H, T) statistics packed. Outputs must already be (keel's allocator aligns
// every block, and the front end allocates them packed or as views of a packed tensor); an input
// that is not is copied once.
inline bool aligned16(const Tensor& t) { return reinterpret_cast<uintptr_t>(t.raw_data()) % 16 == 0; }
inline bool kernel_layout(const Tensor& t) {
  if (!aligned16(t)) return false;
  if (t.dim() != 4) return t.is_contiguous();
  const int64_t esize = static_cast<int64_t>(dtype_size(t.dtype()));
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) <= 1) continue;  // its stride never moves the address
    const int64_t stride = t.strides()[static_cast<size_t>(d)];
    if (d + 1 == t.dim() ? stride != 1 : stride < 0 || stride * esize % 16 != 0) return false;
  }
  return t.strides()[2] <= 2147483647;
}
inline Rows rows_of(const Tensor& t) {  // t (B, H, T, D) in kernel_layout
  return {t.strides()[0], t.strides()[1], static_cast<int>(t.strides()[2])};
}
// The per-head statistics (max |logit|, max range) travel as the bits of a non-negative float:
// non-negative floats order as their bits and a NaN (sign cleared by fabsf) is above +inf, so an
// integer max reduces them and lets a NaN win (ops/nan_max.h's rule).
__device__ __forceinline__ unsigned stat_bits(float x) { return __float_as_uint(fabsf(x)); }

__device__ __forceinline__ unsigned warp_max_bits(unsigned x) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) x = max(x, __shfl_xor_sync(0xffffffffu, x, off));
  return x;
}

// Every thread's statistic bits -> the head's slots (zeroed before the launch): warp, block
// (block_logit and block_range are __shared__, zeroed and synchronised before use), then one
// atomic per block. Every thread of the block must call it (it holds a __syncthreads).
__device__ __forceinline__ void publish_head_stats(unsigned logit_bits, unsigned range_bits, unsigned* block_logit,
                                                   unsigned* block_range, unsigned* head_logit,
                                                   unsigned* head_range) {
  logit_bits = warp_max_bits(logit_bits);
  range_bits = warp_max_bits(range_bits);
  if ((threadIdx.x & 31) == 0) {
    atomicMax(block_logit, logit_bits);
    atomicMax(block_range, range_bits);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    atomicMax(head_logit, *block_logit);
    atomicMax(head_range, *block_range);
  }
}

inline Tensor kernel_input(const Tensor& t) { return kernel_layout(t) ? t : t.clone(); }

inline void check_tensor(const char* op, const char* name, const Tensor& t, const Tensor& like, DType dtype,
                         const Shape& shape) {
  if (!t.device().is_cuda() || t.device() != like.device())
    throw DeviceError(op, std::string(name) + " must be on " + like.device().str() + ", got " + t.device().str());
  if (t.dtype() != dtype)
    throw DTypeError(op, std::string(name) + " must be " + dtype_name(dtype) + ", got " + dtype_name(t.dtype()));
  if (t.shape() != shape)
    throw ShapeError(op, std::string(name) + " must have shape " + shape_str(shape) + ", got " + shape_str(t.shape()));
  if (!kernel_layout(t))
    throw ValueError(op, std::string(name) + " must have adjacent rows' elements and 16-byte aligned rows",
                     "allocate outputs with empty() (the front end attention() does)");
}

}  // namespace keel::cuda::attn
