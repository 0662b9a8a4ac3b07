// The forward kernels' online softmax on a 16-row tile of scores in registers, one tile update
// at a time: the mma.sync kernel (attention_mma_forward.cu) and the warpgroup kernel
// (attention_sm90_forward.cu) hold S in the same layout (a warp's 16 rows, lane (g, t) holding
// rows g and g + 8, columns 2t and 2t + 1 of each 8-column block: mma.sync's C fragment and each
// warp's share of wgmma's D), so one update serves both. attention_mma_forward.cu's header
// explains the choices (the raw dot products, the folded scale, exp2, the tile classes).
#pragma once

#include "ops/cuda/attention_mma.cuh"

namespace keel::cuda::attn::mma {

// The value a lane keeps per score, in the units the online softmax works in: the raw dot
// product when the logit is just scale * dot with scale > 0 (kNoSoftcap: the max of dots is the
// max of logits, and scale * log2 e folds into the exponent's one FFMA), else the soft-capped logit.
template <bool kNoSoftcap>
__device__ __forceinline__ float score_value(float dot, const SoftCap& cap) {
  if constexpr (kNoSoftcap) return dot;
  else return cap.cap * cap.tanh_of(dot);
}

// The online softmax's state of a lane's two rows (g and g + 8) of one m-tile, as references to
// the kernel's arrays: m, the row's max score so far (the same in the row's 4 lanes); l, this
// lane's share of the row sum; lo, this lane's smallest allowed score, NaN once a NaN went by
// (min_nan: the statistics' NaN costs no extra instruction). (A struct holding the arrays
// themselves costs the soft-capped kernels registers and a barrier, 202 instead of 196 at width
// 32 in the kernel report; references compile to the very same instructions.)
struct RowState {
  float (&m)[2], (&l)[2], (&lo)[2];
};

// Where a key tile sits for those rows: what the masked path tests each pair against.
struct TilePlace {
  const int (&rows)[2];  // the lane's rows in the sequence
  int k0, t;             // the tile's first key; the lane's column pair 2t, 2t + 1 in each n-block
  int w, seq_len;        // the head's window, the sequence length
};

// One key tile's online-softmax update for one m-tile, in registers, but for O. s (16 x kBc, the
// mma C layout: n-block n holds keys k0 + 8n ..) comes in as Q K^T and leaves as
// P = 2^(log2_scale (v - m)), masked pairs 0; l is rescaled, and alpha = 2^(log2_scale (m_old -
// m_new)) is what O must be multiplied by (rescale_rows) before this tile's P V is added. kMasked
// tests each pair (allowed()); the other path, for tiles where every pair is allowed, has no
// per-element test.
template <bool kMasked, bool kNoSoftcap, int kS>
__device__ __forceinline__ void softmax_update(float (&s)[kS][4], const RowState& row, float log2_scale,
                                               const SoftCap& cap, const TilePlace& at, float (&alpha)[2]) {
  float(&m)[2] = row.m;
  float(&l)[2] = row.l;
  float(&lo)[2] = row.lo;
  float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int n = 0; n < kS; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = e >> 1;
      float x = score_value<kNoSoftcap>(s[n][e], cap);
      if constexpr (kMasked) {
        const bool ok = allowed(at.rows[r], at.k0 + 8 * n + 2 * at.t + (e & 1), at.w, at.seq_len);
        lo[r] = ptx::min_nan(lo[r], ok ? x : INFINITY);
        x = ok ? x : -INFINITY;
      } else {
        lo[r] = ptx::min_nan(lo[r], x);
      }
      s[n][e] = x;
      mx[r] = fmaxf(mx[r], x);  // drops a NaN: m stays a number, P of a NaN is NaN
    }
  float neg_shift[2];  // -log2_scale times the row's reference: the exponent's one FFMA adds it
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float m_new = fmaxf(m[r], quad_max(mx[r]));
    const float ref = m_new == -INFINITY ? 0.0f : m_new;  // nothing seen yet: exp(-inf - 0) = 0
    alpha[r] = ptx::ex2(log2_scale * (m[r] - ref));       // 0 while the row had seen nothing
    m[r] = m_new;
    neg_shift[r] = -log2_scale * ref;
    l[r] *= alpha[r];
  }
#pragma unroll
  for (int n = 0; n < kS; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[n][e] = ptx::ex2(fmaf(log2_scale, s[n][e], neg_shift[e >> 1]));  // masked: 2^-inf = 0
      l[e >> 1] += s[n][e];
    }
}

// O's rows (16 x kO * 8, the C layout) times softmax_update's alpha.
template <int kO>
__device__ __forceinline__ void rescale_rows(float (&o)[kO][4], const float (&alpha)[2]) {
#pragma unroll
  for (int d = 0; d < kO; ++d)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[d][e] *= alpha[e >> 1];
}

// The whole update where O is at hand (no product writes it meanwhile): softmax_update, then O
// rescaled.
template <bool kMasked, bool kNoSoftcap, int kS, int kO>
__device__ __forceinline__ void online_softmax(float (&s)[kS][4], float (&o)[kO][4], const RowState& row,
                                               float log2_scale, const SoftCap& cap, const TilePlace& at) {
  float alpha[2];
  softmax_update<kMasked, kNoSoftcap>(s, row, log2_scale, cap, at, alpha);
  rescale_rows(o, alpha);
}

// A row's statistics (the header of attention_mma_forward.cu), folded into the bits this lane
// publishes (publish_head_stats): hi, the row's max logit; lo, this lane's smallest score (NaN
// once a NaN went by, INFINITY when the lane held no allowed key); vs, score -> logit.
__device__ __forceinline__ void add_row_stats(float hi, float lo, float vs, unsigned& logit_bits,
                                              unsigned& range_bits) {
  const float low = lo * vs;
  const bool nan = low != low, seen = lo != INFINITY;
  const float amax = nan ? NAN : seen ? fmaxf(fabsf(hi), fabsf(low)) : fabsf(hi);
  logit_bits = max(logit_bits, stat_bits(amax));
  if (seen) range_bits = max(range_bits, stat_bits(nan ? NAN : hi - low));
}

}  // namespace keel::cuda::attn::mma
