// The mma backward's dQ (attention_mma_backward.cu): dQ = dS K sums over every key of a block,
// but each warp holds the dS^T of its own 16. So every warp writes its dS^T into one swizzled
// kBc x kBr tile (store_ds); after the block's barrier each computes a 16 x kShare share of the
// query tile's dQ over all kBc keys (dq_share) and adds it into the f32 sums dq_accum
// (add_dq_share; the kernel orders the adds by key tile); dq_convert_kernel scales the sums into
// dq. F is the kernel's MmaBwd. The Hopper backward's counterpart: attention_sm90_dq.cuh.
#pragma once

#include "ops/cuda/attention_mma.cuh"

namespace keel::cuda::attn::mma {

// The warp's dS^T for queries 16kk..16kk+15 (an A fragment: rows g, g + 8, columns 2t, 2t + 1
// and those + 8) into the block's swizzled kBc x kBr tile, at constant offsets from the lane's.
template <int kBr, typename T>
__device__ __forceinline__ void store_ds(T* dSs, const LaneRow<kBr>& lr, int r0, int kk, const uint32_t (&a)[4]) {
  *reinterpret_cast<uint32_t*>(dSs + lr.at(r0, 2 * kk)) = a[0];
  *reinterpret_cast<uint32_t*>(dSs + lr.at(r0 + 8, 2 * kk)) = a[1];
  *reinterpret_cast<uint32_t*>(dSs + lr.at(r0, 2 * kk + 1)) = a[2];
  *reinterpret_cast<uint32_t*>(dSs + lr.at(r0 + 8, 2 * kk + 1)) = a[3];
}

// The warp's share of a query tile's dQ: queries m0..m0+15, columns d0..d0 + kShare, over all the
// block's keys: dS (the dS^T tile read transposed; ds_row = LaneRow<kBr>::b_rows) times K (a_row
// = LaneRow<kWidth>::a_rows).
template <typename F, typename T, int kN, typename DsRows, typename ARows>
__device__ __forceinline__ void dq_share(float (&dq)[kN][4], const T* dSs, const T* Ks, const DsRows& ds_row,
                                         const ARows& a_row, int m0, int d0, int lane) {
#pragma unroll
  for (int kw = 0; kw < F::kWarps; ++kw) {
    uint32_t a[4];
    load_a_trans(a, dSs, ds_row, 16 * kw, m0);
    if constexpr (kN == 1) {  // width 16 (K's rows are 16 columns): a share of 8 columns, one n-block
      uint32_t b[2];
      load_b_col<16>(b, Ks, 16 * kw, d0, lane);
      ptx::mma_m16n8k16<T>(dq[0], a, b);
    } else {
#pragma unroll
      for (int d = 0; d < kN; d += 2) {
        uint32_t b0[2], b1[2];
        load_b_cols(b0, b1, Ks, a_row, 16 * kw, d0 + 8 * d);
        ptx::mma_m16n8k16<T>(dq[d], a, b0);
        ptx::mma_m16n8k16<T>(dq[d + 1], a, b1);
      }
    }
  }
}

// The share into the f32 sums (the pair's start pair_row floats in, D floats a row), rows row0 + g, + 8 of
// the lane: columns 2t, 2t + 1 of each n-block, one address (fewer live registers than an offset
// per add, which at D = 256 was a 32-byte spill). A whole share (its 16 rows inside the sequence,
// its columns inside the head dim: every tile but the last, unless D is padded) adds without a
// test, at constant offsets from two rows, a lane's two adjacent columns in one instruction
// (red_add_f32x2: D and 2t are even).
template <typename F, int kN>
__device__ __forceinline__ void add_dq_share(const float (&dq)[kN][4], float* dq_accum, int64_t pair_row, int row0,
                                             int d0, int g, int t, int D, int seq_len) {
  float* const dq_row = dq_accum + pair_row + static_cast<int64_t>(row0 + g) * D + d0 + 2 * t;
  if (row0 + 16 <= seq_len && d0 + F::kShare <= D) {
    float* const dq_row8 = dq_row + 8 * D;
#pragma unroll
    for (int d = 0; d < kN; ++d) {
      ptx::red_add_f32x2(dq_row + 8 * d, dq[d][0], dq[d][1]);
      ptx::red_add_f32x2(dq_row8 + 8 * d, dq[d][2], dq[d][3]);
    }
  } else {
#pragma unroll
    for (int d = 0; d < kN; ++d) {
      if (d0 + 8 * d >= D) break;  // padding columns from here on (D is a multiple of 8: whole n-blocks)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (row0 + g + 8 * (e >> 1) < seq_len) atomicAdd(dq_row + 8 * (e >> 1) * D + 8 * d + (e & 1), dq[d][e]);
    }
  }
}

// Shapes: dq_accum (B, H, T, D) f32 packed -> dq (B, H, T, D) in T at dims.dq, times scale; 8
// elements per thread (D % 8 == 0), n8 = B H T D / 8.
template <typename T>
__global__ void dq_convert_kernel(const float* __restrict__ dq_accum, T* __restrict__ dq, int64_t n8, float scale,
                                  Dims dims) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n8) return;
  const int64_t row = i / (dims.D / 8), bh = row / dims.T;  // packed row (b H + h) T + t
  const int col = static_cast<int>(i - row * (dims.D / 8)) * 8, pos = static_cast<int>(row - bh * dims.T);
  const int64_t at = dims.dq.pair(static_cast<int>(bh), dims.H) + static_cast<int64_t>(pos) * dims.dq.t + col;
  const float4 a = ptx::load_16<float4>(dq_accum + 8 * i);
  const float4 b = ptx::load_16<float4>(dq_accum + 8 * i + 4);
  const uint4 out = make_uint4(pack2<T>(a.x * scale, a.y * scale), pack2<T>(a.z * scale, a.w * scale),
                               pack2<T>(b.x * scale, b.y * scale), pack2<T>(b.z * scale, b.w * scale));
  ptx::store_16(dq + at, out);
}

}  // namespace keel::cuda::attn::mma
