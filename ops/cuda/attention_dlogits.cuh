// The backward's element-wise step, shared by the mma.sync and the Hopper kernels
// (attention_mma_backward.cu, attention_sm90_backward.cu): both hold S^T and dP^T with keys as
// a warp's 16 rows in mma.sync's C layout (wgmma's accumulator gives each warp the same), so
// P^T and dS^T are computed in place, register for register, the same way.
#pragma once

#include "ops/cuda/attention_mma.cuh"

namespace keel::cuda::attn::mma {

// One query tile's P^T and dS^T for the warp's 16 keys (lane (g, t): keys[0], keys[1]; queries
// q0 + 8n + 2t + (e & 1)), in registers: s holds S^T = K Q^T and leaves as P^T; dp holds dP^T and
// leaves as dS^T. lse2 and dvec are the tile's rows in shared memory, lse2 already times log2 e,
// so P = 2^(log2_scale v - lse2) is one FFMA and an ex2: v the raw dot product and log2_scale =
// scale log2 e when kNoSoftcap (scale > 0: with_positive_scale), else v the soft-capped logit
// cap th (th = tanh(scale dot / cap), SoftCap) and log2_scale = log2 e, whose dS takes the cap's
// derivative 1 - th^2 (dlogit in attention_common.cuh). kMasked gives the pairs outside the band
// P = 0 (a select, never a NaN); a tile where every pair is allowed skips the test.
//
// probs_and_dlogits does it in one pass. A kernel whose dP^T is still being computed when S^T is
// ready (the Hopper one's wgmma) can do the usual logit's in two, the same arithmetic:
// probs_before_dp needs only S^T and leaves P^T before the band in s, dlogits_after_dp the rest.
// The one pass stays a loop of its own: written as the two, ptxas allocates the mma kernel's
// registers differently (8 bytes spilled at D 128 on sm_90a).
__device__ __forceinline__ int tile_query(int n, int t, int e) { return 8 * n + 2 * t + (e & 1); }

// P of query j (before the band) from v: the dot product, or cap th.
__device__ __forceinline__ float prob(float v, float log2_scale, const float* lse2, int j) {
  return ptx::ex2(fmaf(log2_scale, v, -lse2[j]));
}

template <bool kMasked, bool kNoSoftcap, int kS>
__device__ __forceinline__ void probs_and_dlogits(float (&s)[kS][4], float (&dp)[kS][4], const float* lse2,
                                                  const float* dvec, float log2_scale, const SoftCap& cap,
                                                  const int (&keys)[2], int q0, int t, int w, int seq_len) {
#pragma unroll
  for (int n = 0; n < kS; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int j = tile_query(n, t, e);
      const float th = kNoSoftcap ? 0.0f : cap.tanh_of(s[n][e]);
      float p = prob(kNoSoftcap ? s[n][e] : cap.cap * th, log2_scale, lse2, j);
      if constexpr (kMasked) p = allowed(q0 + j, keys[e >> 1], w, seq_len) ? p : 0.0f;
      s[n][e] = p;
      const float ds = p * (dp[n][e] - dvec[j]);
      dp[n][e] = kNoSoftcap ? ds : ds * fmaf(-th, th, 1.0f);
    }
}

template <int kS>
__device__ __forceinline__ void probs_before_dp(float (&s)[kS][4], const float* lse2, float log2_scale, int t) {
#pragma unroll
  for (int n = 0; n < kS; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[n][e] = prob(s[n][e], log2_scale, lse2, tile_query(n, t, e));
}

template <bool kMasked, int kS>
__device__ __forceinline__ void dlogits_after_dp(float (&s)[kS][4], float (&dp)[kS][4], const float* dvec,
                                                 const int (&keys)[2], int q0, int t, int w, int seq_len) {
#pragma unroll
  for (int n = 0; n < kS; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int j = tile_query(n, t, e);
      if constexpr (kMasked) s[n][e] = allowed(q0 + j, keys[e >> 1], w, seq_len) ? s[n][e] : 0.0f;
      dp[n][e] = s[n][e] * (dp[n][e] - dvec[j]);
    }
}

}  // namespace keel::cuda::attn::mma
