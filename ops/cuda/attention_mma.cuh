// What the FlashAttention-2-style kernels share (attention_mma_forward.cu,
// attention_mma_backward.cu): swizzled shared-memory tiles filled by cp.async, the ldmatrix
// addresses that turn them into mma.sync fragments, and the register-level helpers. The
// instructions themselves are core/cuda/ptx.cuh's; their fragment layouts are written there.
//
// The idea, in one paragraph. A warp owns 16 rows of the block's own tile (an m-tile; a forward
// warp may own two) and computes a 16 x N product per m-tile as N/8 accumulators of mma.sync
// m16n8k16, whose layout the PTX ISA documents: lane (g, t) = (lane / 4, lane % 4) holds rows g
// and g + 8, columns 2t and 2t + 1 of each 8-column block. So masking, soft-capping, the online
// softmax (row max and sum: the 4 lanes of a row are one quad, two shuffles) and the statistics
// all happen in registers, and the accumulator of one product is, converted to bf16/f16 pairs,
// the A operand of the next (P -> P V): S, P and O never touch shared memory. Operands in shared
// memory are read with ldmatrix, whose row addresses are swizzled (XOR of the 16-byte chunk index
// with the row) so that the 8 rows of one 8x8 matrix fall in 8 different bank groups.
// docs/attention-kernels.md walks through both kernels with diagrams of these layouts.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/cuda/ptx.cuh"
#include "ops/cuda/attention_common.cuh"

namespace keel::cuda::attn::mma {

// Dims, logit, attn_exp, allowed, TileRange: attention_common.cuh and attention_tiles.h.

// exp(x) = 2^(x log2 e): the kernels fold log2 e into the scale they already apply, so that an
// exponential is one ex2 (ptx::ex2).
constexpr float kLog2e = 1.4426950408889634f;

// A tile of rows x Cols 16-bit elements in shared memory, row-major, 16-byte chunks swizzled:
// chunk c of row r lives at chunk c ^ f(r), f(r) cycling through 8 values over 8 rows (every
// second row when a row has only 4 chunks, every fourth when it has 2). An 8x8 matrix read by
// ldmatrix (8 rows, one chunk) then hits 8 different bank groups without padding each row, which
// would cost shared memory (a 16-byte pad per row of a 128-wide tile is 6% more) and give the
// rows a stride that is no longer a power of two.
template <int Cols>
struct Swizzle {
  static_assert(Cols == 16 || Cols == 32 || Cols == 64 || Cols == 128 || Cols == 256, "rows of 2 to 32 chunks");
  static constexpr int kChunks = Cols / 8, kSpan = kChunks < 8 ? kChunks : 8;
  __device__ static int offset(int r, int c) {
    return r * Cols + (((c >> 3) ^ (r * kSpan / 8 % kSpan)) << 3) + (c & 7);
  }
};

// Block-wide: rows x Cols elements into a swizzled tile with cp.async, 16 bytes per copy, from
// global rows of D <= Cols elements (row stride ld, D a multiple of 8); rows at or past `valid` (a
// sequence end inside the tile) and the chunks at or past column D (a head dim below the kernel
// width: attention_tiles.h) are zero-filled (src-size 0) without reading global memory. Part of
// the caller's next commit group.
template <typename T, int Cols, int Rows, int Threads>
__device__ void load_tile_async(T* tile, const T* src, int valid, int D, int ld) {
  constexpr int kChunks = Cols / 8, kCopies = Rows * kChunks;
  // A trip count known to the compiler, so the loop unrolls whatever the tile's size (and the
  // kernel report finds a tile's copies on one path through the main loop).
#pragma unroll
  for (int n = 0; n < (kCopies + Threads - 1) / Threads; ++n) {
    const int i = threadIdx.x + n * Threads;
    if (kCopies % Threads != 0 && i >= kCopies) break;
    const int r = i / kChunks, c = i % kChunks * 8;
    const bool inside = r < valid && c < D;
    ptx::cp_async_16(tile + Swizzle<Cols>::offset(r, c), src + (inside ? static_cast<int64_t>(r) * ld + c : 0),
                     !inside);
  }
}

// load_tile_async for a tile streamed many times (K and V in the forward): a thread's copies sit
// at the same place in every tile, so their offsets are computed once and a tile's copy costs an
// address add (and, only in a tile past the sequence end or a padded head dim, a zero-fill
// test, folded into the copy's size). Thread i copies chunk i % kChunks of rows i / kChunks +
// kStep n: when kStep is a multiple of 8, the swizzle's period, those rows' shared offsets are
// the first one's plus constants. Rows lie anywhere in global memory (row stride ld), as Rows
// describes: the per-thread global offset is computed once too.
template <typename T, int Cols, int Rows, int Threads>
struct TileStream {
  static_assert(Threads % (Cols / 8) == 0, "a block's pass covers whole rows");
  static constexpr int kChunks = Cols / 8, kStep = Threads / kChunks, kN = (Rows + kStep - 1) / kStep;
  // Whether a block's pass covers whole swizzle periods (else load computes each shared offset).
  static constexpr bool kPeriodic = Threads % kChunks == 0 && kStep % 8 == 0;
  int row, smem;  // the thread's first row and its chunk's offset there (elements)
  int global;     // row * ld + column: its first element in the tile's first global row
  bool col_ok;    // its chunk lies inside the head dim

  // D: the head dim; ld: the global row stride of every tile it loads.
  __device__ TileStream(int D, int ld) : row(threadIdx.x / kChunks) {
    const int c = threadIdx.x % kChunks * 8;
    smem = Swizzle<Cols>::offset(row, c), global = row * ld + c, col_ok = c < D;
  }
  // The tile from global rows src[0 .. valid) of stride ld (zeros from row `valid` on). A
  // zero-filled copy reads nothing (src-size 0), so its address, past the end, is never used.
  // Where a block's pass does not cover whole swizzle periods (width 256: 128 threads cover 4
  // rows), each copy's shared offset is computed, the global one still an add.
  __device__ void load(T* tile, const T* src, int valid, int ld) const {
    const T* p = src + global;
#pragma unroll
    for (int n = 0; n < kN; ++n) {
      if (Rows % kStep != 0 && row + kStep * n >= Rows) break;
      const int at = kPeriodic ? smem + kStep * n * Cols
                               : Swizzle<Cols>::offset(row + kStep * n, static_cast<int>(threadIdx.x) % kChunks * 8);
      ptx::cp_async_16(tile + at, p + static_cast<int64_t>(kStep * n) * ld, !(col_ok && row + kStep * n < valid));
    }
  }
};

// One lane's ldmatrix row in a swizzled tile, for every compile-time offset: the lane names row
// r, chunk b (0 or 1) of each 16-column step. Swizzle<Cols>::offset(r + R, 8 (C + b)) for R a
// multiple of 8 and C even is the lane's own offset at (r, 8 b) XOR 16 j plus a constant, j =
// (C mod span) / 2: the row's part of the swizzle repeats every 8 rows, the XOR touches only a
// chunk index's low bits, where r * Cols has none, and 2 j + b = 2 j XOR b. So an unrolled loop's
// ldmatrix costs at most one LOP3 and takes an immediate, instead of recomputing the swizzle.
template <int Cols>
struct LaneRow {
  static constexpr int kSpan = Swizzle<Cols>::kSpan;
  int own;  // Swizzle<Cols>::offset(r, 8 b + e)
  // e < 8: an element inside the chunk (a lane's pair in a 32-bit store), which the XOR of chunk
  // bits in at() leaves alone.
  __device__ LaneRow(int r, int b, int e = 0) : own(Swizzle<Cols>::offset(r, 8 * b) + e) {}
  __device__ int at(int R, int C) const { return (own ^ (8 * (C % kSpan))) + R * Cols + 8 * (C - C % kSpan); }
  // The two ways an ldmatrix.x4 names its 32 rows: for an A fragment, or B columns read .trans
  // (row lane & 15, chunk lane >> 4), and for B rows, or an A fragment read .trans (rows lane & 7
  // of each 8-row half lane >> 4, chunk (lane >> 3) & 1).
  __device__ static LaneRow a_rows(int lane) { return LaneRow(lane & 15, lane >> 4); }
  __device__ static LaneRow b_rows(int lane) { return LaneRow((lane & 7) | (lane >> 4) << 3, (lane >> 3) & 1); }
};

// ---- fragments from swizzled tiles (one warp; lr: the lane's LaneRow, r0 a multiple of 8 and
// c0 of 16 (16 elements = 2 chunks), so each address is lr's offset plus constants) ----
// A (16 x 16): rows r0..r0+15, columns c0..c0+15 of a row-major tile (m = row, k = column);
// lr = LaneRow::a_rows.
template <int Cols, typename T>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const T* tile, const LaneRow<Cols>& lr, int r0, int c0) {
  ptx::ldmatrix_x4(a, tile + lr.at(r0, c0 / 8));
}
// A (16 x 16) of the transpose of a tile: m = columns c0..c0+15, k = rows r0..r0+15;
// lr = LaneRow::b_rows.
template <int Cols, typename T>
__device__ __forceinline__ void load_a_trans(uint32_t (&a)[4], const T* tile, const LaneRow<Cols>& lr, int r0,
                                             int c0) {
  ptx::ldmatrix_x4_trans(a, tile + lr.at(r0, c0 / 8));
}
// B of one n-block from a tile whose rows are k: rows (k) r0..r0+15, columns (n) c0..c0+7
// (lanes 16..31 name the same rows again: .x2 reads only lanes 0..15's addresses). For the
// 8-column share of width 16 only, so its address is computed in full.
template <int Cols, typename T>
__device__ __forceinline__ void load_b_col(uint32_t (&b)[2], const T* tile, int r0, int c0, int lane) {
  ptx::ldmatrix_x2_trans(b, tile + Swizzle<Cols>::offset(r0 + (lane & 15), c0));
}
// B of two n-blocks from a tile whose rows are n: b0 = rows (n) r0..r0+7, b1 = rows r0+8..r0+15,
// each over columns (k) c0..c0+15; lr = LaneRow::b_rows.
template <int Cols, typename T>
__device__ __forceinline__ void load_b_rows(uint32_t (&b0)[2], uint32_t (&b1)[2], const T* tile,
                                            const LaneRow<Cols>& lr, int r0, int c0) {
  uint32_t r[4];
  ptx::ldmatrix_x4(r, tile + lr.at(r0, c0 / 8));
  b0[0] = r[0], b0[1] = r[1], b1[0] = r[2], b1[1] = r[3];
}
// B of two n-blocks from a tile whose rows are k: rows (k) r0..r0+15, b0 = columns (n) c0..c0+7,
// b1 = columns c0+8..c0+15; lr = LaneRow::a_rows.
template <int Cols, typename T>
__device__ __forceinline__ void load_b_cols(uint32_t (&b0)[2], uint32_t (&b1)[2], const T* tile,
                                            const LaneRow<Cols>& lr, int r0, int c0) {
  uint32_t r[4];
  ptx::ldmatrix_x4_trans(r, tile + lr.at(r0, c0 / 8));
  b0[0] = r[0], b0[1] = r[1], b1[0] = r[2], b1[1] = r[3];
}

// Two floats as one register of two 16-bit elements, the first in the low half (round to nearest).
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  uint32_t u;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    std::memcpy(&u, &h, 4);
  } else {
    const __half2 h = __floats2half2_rn(lo, hi);
    std::memcpy(&u, &h, 4);
  }
  return u;
}

// The A operand of k-step kk from the accumulators of n-blocks 2kk and 2kk + 1 of a 16 x N
// product (same rows; columns 16kk..16kk+15 become k): the C layout of two n-blocks is exactly
// the A layout, so nothing moves between lanes.
template <typename T>
__device__ __forceinline__ void acc_to_a(uint32_t (&a)[4], const float (&lo)[4], const float (&hi)[4]) {
  a[0] = pack2<T>(lo[0], lo[1]), a[1] = pack2<T>(lo[2], lo[3]);
  a[2] = pack2<T>(hi[0], hi[1]), a[3] = pack2<T>(hi[2], hi[3]);
}

// A warp's 16 x 8 kS accumulators (the C layout, k as columns: P or dS^T) as the A fragments of
// the next product, k-step kk from n-blocks 2 kk and 2 kk + 1 (the wgmma kernels' register-A form).
template <typename T, int kS>
__device__ __forceinline__ void to_a_fragments(uint32_t (&a)[kS / 2][4], const float (&s)[kS][4]) {
#pragma unroll
  for (int kk = 0; kk < kS / 2; ++kk) acc_to_a<T>(a[kk], s[2 * kk], s[2 * kk + 1]);
}

// The soft-capped logit, cap tanh(scale dot / cap), for the half kernels' capped variant (kNoSoftcap
// false). tanhf is an accurate software routine that branches on |x| (about 20 instructions and a
// test per element, which would cost every tile the mask-free path); here tanh y = 1 - 2 / (1 +
// e^2y) is one ex2 (e^2y = 2^(k dot), k = 2 log2 e scale / cap, computed once) and one approximate
// reciprocal (MUFU.RCP), FlashAttention-2's choice of a fast tanh made accurate: the error is
// below 1e-6 absolute in tanh (ex2's 2^-22, a reciprocal's ulp), far under bf16/f16 rounding.
// Dots of +-inf give +-1 (2^inf = inf, 1 / inf = 0), a NaN stays NaN. The f32 kernels keep tanhf.
struct SoftCap {
  float cap, k;
  __device__ explicit SoftCap(const Dims& d)
      : cap(d.softcap), k(d.softcap > 0 ? 2.0f * kLog2e * d.scale / d.softcap : 0.0f) {}
  __device__ __forceinline__ float tanh_of(float dot) const {  // tanh(scale dot / cap)
    return fmaf(-2.0f, __fdividef(1.0f, 1.0f + ptx::ex2(k * dot)), 1.0f);
  }
};

// Reductions over the 4 lanes (one quad) that hold one row of an accumulator.
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

}  // namespace keel::cuda::attn::mma

namespace keel::cuda {

// The mma kernels' launchers (bf16 and f16, DTypeError otherwise; D a multiple of 8 up to 256),
// called by attention_forward() and attention_backward() after their checks for those dtypes.
// Tensors as there, each (b, h)'s rows at their stride (attn::Rows, so q, k and v may be views of one
// packed projection); dims from attn::make_dims; dvec (B, H, T) f32 = rowsum(dout * out).
void attention_mma_forward(const Tensor& q, const Tensor& k, const Tensor& v, const attn::Dims& dims, Tensor& out,
                           Tensor& lse, Tensor& max_logit, Tensor& max_range);
void attention_mma_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& lse, const Tensor& dout,
                            const Tensor& dvec, const attn::Dims& dims, Tensor& dq, Tensor& dk, Tensor& dv);

// The Hopper forward (attention_sm90_forward.cu), same arguments. Returns false, launching
// nothing, where it does not take the call (attn::sm90::sm90_takes): not chosen, a GPU that does
// not run sm_90a, head dims off its widths 64 and 128 (D <= 32 or > 128), or rows TMA cannot move
// (a start or a stride that is not a multiple of 16 bytes); the mma kernel runs those.
bool attention_sm90_forward(const Tensor& q, const Tensor& k, const Tensor& v, const attn::Dims& dims, Tensor& out,
                            Tensor& lse, Tensor& max_logit, Tensor& max_range);
// The Hopper backward (attention_sm90_backward.cu), the same way (TMA reads q, k, v and dout). It
// computes D_i from out and dout itself, in its statistics pass.
bool attention_sm90_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                             const Tensor& dout, const attn::Dims& dims, Tensor& dq, Tensor& dk, Tensor& dv);
// The kNoSoftcap kernels (no soft cap) take the running max of raw dot products, so they need scale >
// 0. A negative scale runs them on -q instead: scale q.k = |scale| (-q).k bit for bit (negation
// is exact), so the logits, outputs and statistics are those of q, and dK = |scale| dS^T (-q) =
// scale dS^T q; only dQ = scale dS K keeps the sign, which the backward applies in its final
// pass. Returns q, or -q with dims.scale made |scale|.
Tensor with_positive_scale(const Tensor& q, attn::Dims& dims);

}  // namespace keel::cuda
