// Flash-attention backward on Hopper (sm_90a), FlashAttention-3's way: the algorithm of the
// mma.sync backward (attention_mma_backward.cu, whose header derives the five products and names
// the variables) with its work moved onto sm_90's asynchronous units, as the forward does
// (attention_sm90_forward.cu):
//   copies    a producer thread loads the block's 128 keys of K and V once, then, query tile by
//             query tile (kBr queries: Sm90Bwd), Q, dO (TMA) and the tile's lse log2 e and D_i
//             (one bulk copy) into a ring of kStages slots; mbarriers say when a slot is full and
//             when it is empty again.
//   products  two consumer warpgroups own 64 keys each and compute per query tile S^T = K Q^T and
//             dP^T = V dO^T (keys as rows: a warp's 16 keys in the C layout, so P^T and dS^T are
//             attention_dlogits.cuh's, register for register), then dV += P^T dO and dK += dS^T Q
//             with P^T and dS^T from registers, all with wgmma.
//   dQ        = dS K needs every key of the block: both warpgroups write their dS^T into one
//             shared tile, and each computes a slice of the tile's dQ from it; the producer
//             warpgroup's second warp adds the slices to global memory with bulk reductions
//             (attention_sm90_dq.cuh), and sm90_dq_convert_kernel puts the sums in place.
//
// dQ, deterministically by default, as the mma kernel does it: blocks take key tiles from a
// ticket, highest first, and each slice of a query tile's dQ waits for a flag counting the key
// tiles above it that have added theirs (ptx::spin_wait_equal), so every element sums its terms in
// the same order on every run; keel::set_deterministic(false) skips the wait.
//
// Its preprocessing (sm90_stats_kernel) computes D_i = dO_i . O_i and lays it out with lse log2 e
// by query tile, padded with zeros to whole tiles, so that one bulk copy brings a tile's:
// FlashAttention-3's preprocess does the same. docs/attention-kernels.md, section 6.2, walks the kernel.
#include "core/determinism.h"
#include "core/factory.h"
#include "ops/cuda/attention_dlogits.cuh"
#include "ops/cuda/attention_sm90.cuh"
#include "ops/cuda/attention_sm90_dq.cuh"

namespace keel::cuda {

namespace {

using namespace attn;
using namespace attn::mma;
using namespace attn::sm90;

// Tiles and shared memory (bytes; 1024-aligned tiles, the 128-byte swizzle's period): K and V
// (kBc x kWidth), kStages slots of Q and dO (kBr x kWidth each), two dS^T tiles (kBc x kBr),
// kDqBuffers staging buffers of each consumer's dQ slice (64 x kDqCols f32), kStages slots of a
// tile's lse log2 e and D_i, then the barriers. Tiles are panels of 64 columns as TMA writes them
// (attention_sm90_forward.cu, Sm90Fwd). At width 128: 225 KB; at 64: 194 KB (129 with a soft cap).
template <int kWidth, bool kNoSoftcap>
struct Sm90Bwd {
  static constexpr int kCols = kWidth;
  // FlashAttention-3's shapes: 64 queries a step at width 128, 128 at width 64, whose products
  // are twice as long for the same fixed work a tile. Either way a consumer holds S^T and dP^T
  // of 64 keys x kBr queries and dK, dV of 64 keys x kWidth: 192 f32 registers. A soft cap's
  // tanh does not fit beside them with 128 queries (ptxas spilled 112 bytes): 64 at width 64.
  static constexpr int kConsumers = kBwdConsumers, kBc = 64 * kConsumers, kStages = 2;
  static constexpr int kBr = kWidth == 64 && kNoSoftcap ? 128 : 64;
  // S^T and dP^T in two commit groups, so that P^T's exponentials run while dP^T's products do
  // (FlashAttention-3's order). Not with a soft cap: its pass of tanh, then one of exponentials
  // after the wait, spills at width 128 (32 bytes); soft-capped kernels do both after it.
  static constexpr bool kSplitSdp = kNoSoftcap;
  static_assert(kNoSoftcap || !kSplitSdp, "probs_before_dp and dlogits_after_dp are the usual logit's");
  static constexpr int kThreads = 128 * (1 + kConsumers);  // warpgroup 0 produces
  static constexpr int kProducerRegs = 24, kConsumerRegs = 240;  // FlashAttention-3's
  static_assert(128 * (kProducerRegs + kConsumers * kConsumerRegs) <= 65536, "the SM's register file");
  // dQ of a tile (kBr x kWidth) in slices of 64 rows x kDqCols, one a consumer: the two halves of
  // the rows at 128 queries (kRowSlices of them), else of the columns.
  static constexpr int kPanels = kWidth / 64, kRowSlices = kBr / 64, kDqCols = kWidth * kRowSlices / kConsumers;
  static constexpr int kKVBytes = kBc * kWidth * 2, kStageBytes = kBr * kWidth * 2, kDSBytes = kBc * kBr * 2;
  static constexpr int kDQBytes = 64 * kDqCols * 4, kStatBytes = 2 * kBr * 4;
  static constexpr int kDqBuffers = kBr == 64 ? 2 : 1;  // two fit beside the 64-query tiles only
  static constexpr int kK = 0, kV = kKVBytes, kQ = 2 * kKVBytes, kDO = kQ + kStages * kStageBytes;
  static constexpr int kDS = kDO + kStages * kStageBytes, kDQ = kDS + 2 * kDSBytes;
  static constexpr int kStats = kDQ + kDqBuffers * kConsumers * kDQBytes, kBars = kStats + kStages * kStatBytes;
  static constexpr int kBytes = kBars + 8 * (1 + 2 * kStages);  // K and V's barrier, then the ring's
  static_assert(kWidth == 64 || kWidth == 128, "panels of 64 columns, wgmma N of 64 or 128");
  // and the 1 KB that aligning the dynamic shared memory to 1024 bytes may cost
  static_assert(kBytes + 1024 <= 227 * 1024, "must fit an H100's shared memory");
};

// The producer (one thread): the block's K and V once, then Q, dO and the statistics of each
// query tile into the next slot of the ring (stats: the pair's tiles, 2 kBr floats each).
template <typename F>
__device__ void produce(const CUtensorMap* qm, const CUtensorMap* km, const CUtensorMap* vm, const CUtensorMap* dom,
                        const float* stats, unsigned char* smem, uint64_t* kv_full, const Ring& ring, int k0, int h,
                        int b, TileRange tiles) {
  ptx::mbarrier_arrive_expect_tx(kv_full, 2 * F::kKVBytes);
  for (int p = 0; p < F::kPanels; ++p) {
    const int32_t at[4] = {64 * p, k0, h, b};
    ptx::tma_load(smem + F::kK + p * F::kBc * 128, km, at, kv_full);
    ptx::tma_load(smem + F::kV + p * F::kBc * 128, vm, at, kv_full);
  }
  RingPos<F::kStages> at;
  for (int qt = tiles.begin; qt < tiles.end; ++qt, at = at.next()) {
    uint64_t* full = ring.full + at.slot;
    ptx::mbarrier_wait_parity(ring.empty + at.slot, at.parity ^ 1);
    ptx::mbarrier_arrive_expect_tx(full, 2 * F::kStageBytes + F::kStatBytes);
    for (int p = 0; p < F::kPanels; ++p) {
      const int32_t c[4] = {64 * p, qt * F::kBr, h, b};
      ptx::tma_load(smem + F::kQ + at.slot * F::kStageBytes + p * F::kBr * 128, qm, c, full);
      ptx::tma_load(smem + F::kDO + at.slot * F::kStageBytes + p * F::kBr * 128, dom, c, full);
    }
    ptx::bulk_copy_global_to_shared(smem + F::kStats + at.slot * F::kStatBytes, stats + 2 * F::kBr * qt,
                                    F::kStatBytes, full);
  }
}

// Issues S^T (this warp's 16 keys x the tile's kBr queries) = K Q^T and dP^T = V dO^T: k and v
// describe the warpgroup's 64 keys, q and d_o the slot's tiles (all K-major). Two commit groups,
// S^T's first, when F::kSplitSdp; else one, the two products' k-steps interleaved.
template <typename T, typename F>
__device__ __forceinline__ void issue_sdp(float (&s)[F::kBr / 8][4], float (&dp)[F::kBr / 8][4], uint64_t k,
                                          uint64_t v, uint64_t q, uint64_t d_o) {
  auto& ds = reinterpret_cast<float(&)[F::kBr / 2]>(s);
  auto& ddp = reinterpret_cast<float(&)[F::kBr / 2]>(dp);
  ptx::wgmma_fence();
  if constexpr (F::kSplitSdp) {
#pragma unroll
    for (int kk = 0; kk < F::kCols / 16; ++kk)
      ptx::wgmma_m64k16<F::kBr, T>(ds, k_major(k, F::kBc, kk), k_major(q, F::kBr, kk), kk > 0);
    ptx::wgmma_commit_group();
#pragma unroll
    for (int kk = 0; kk < F::kCols / 16; ++kk)
      ptx::wgmma_m64k16<F::kBr, T>(ddp, k_major(v, F::kBc, kk), k_major(d_o, F::kBr, kk), kk > 0);
  } else {
#pragma unroll
    for (int kk = 0; kk < F::kCols / 16; ++kk) {
      ptx::wgmma_m64k16<F::kBr, T>(ds, k_major(k, F::kBc, kk), k_major(q, F::kBr, kk), kk > 0);
      ptx::wgmma_m64k16<F::kBr, T>(ddp, k_major(v, F::kBc, kk), k_major(d_o, F::kBr, kk), kk > 0);
    }
  }
  ptx::wgmma_commit_group();
}

// Issues dV += P^T dO and dK += dS^T Q (k = the tile's queries), one commit group: P^T and dS^T
// as A fragments (pa, da: unchanged until a wait covers the group), dO and Q MN-major.
template <typename T, typename F>
__device__ __forceinline__ void issue_dkdv(float (&dv)[F::kCols / 8][4], float (&dk)[F::kCols / 8][4],
                                           const uint32_t (&pa)[F::kBr / 16][4], const uint32_t (&da)[F::kBr / 16][4],
                                           uint64_t q, uint64_t d_o) {
  auto& d_v = reinterpret_cast<float(&)[F::kCols / 2]>(dv);
  auto& d_k = reinterpret_cast<float(&)[F::kCols / 2]>(dk);
  ptx::wgmma_fence_operand(d_v);
  ptx::wgmma_fence_operand(d_k);
  ptx::wgmma_fence();  // orders pa and da, written since the last wait, before the products
#pragma unroll
  for (int kk = 0; kk < F::kBr / 16; ++kk) {
    ptx::wgmma_m64k16_rs<F::kCols, T, true>(d_v, pa[kk], mn_major(d_o, kk), true);
    ptx::wgmma_m64k16_rs<F::kCols, T, true>(d_k, da[kk], mn_major(q, kk), true);
  }
  ptx::wgmma_commit_group();
}

// This warp's rows of dK (times scale) and dV, from the accumulators: keys past the sequence and
// padding columns are not written.
template <typename T, typename F>
__device__ void store_dkdv(const float (&dk)[F::kCols / 8][4], const float (&dv)[F::kCols / 8][4], const Dims& dims,
                           int bh, int key0, T* __restrict__ dk_out, T* __restrict__ dv_out) {
  const int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = key0 + g + 8 * r;
    if (key >= dims.T) continue;
    T* dk_row = dk_out + dims.dk.pair(bh, dims.H) + static_cast<int64_t>(key) * dims.dk.t;
    T* dv_row = dv_out + dims.dv.pair(bh, dims.H) + static_cast<int64_t>(key) * dims.dv.t;
#pragma unroll
    for (int d = 0; d < F::kCols / 8; ++d) {
      if (8 * d >= dims.D) break;  // padding columns from here on (D is a multiple of 8)
      *reinterpret_cast<uint32_t*>(dk_row + 8 * d + 2 * t) =
          pack2<T>(dk[d][2 * r] * dims.scale, dk[d][2 * r + 1] * dims.scale);
      *reinterpret_cast<uint32_t*>(dv_row + 8 * d + 2 * t) = pack2<T>(dv[d][2 * r], dv[d][2 * r + 1]);
    }
  }
}

// A consumer warpgroup c (keys k0 + 64 c ..): every query tile of the block, then its rows of dK
// and dV. It computes products only in the tiles its own 64 keys meet (a local head's warpgroup
// skips the others, writing zeros for its dS^T), but takes part in every tile's dQ.
template <typename T, typename F, bool kNoSoftcap>
__device__ void consume(const BwdArgs& args, const Dims& dims, unsigned char* smem, uint64_t* kv_full,
                        const Ring& ring, int c, T* __restrict__ dk, T* __restrict__ dv) {
  const int seq_len = dims.T, w = args.w;
  const int warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int first = args.k0 + 64 * c, key0 = first + 16 * warp;  // the warpgroup's, the warp's first key
  const int keys[2] = {key0 + g, key0 + g + 8};
  // Descriptors: the warpgroup's keys of K and V (A, K-major), the first slots of Q and dO (B:
  // K-major for S^T and dP^T, MN-major for dK and dV), the first dS^T tile and K's columns of
  // the warpgroup's dQ slice (dQ's A and B, MN-major).
  const uint32_t base = ptx::shared_address(smem);
  const uint64_t k_desc = tile_descriptor(base + F::kK + 64 * c * 128, 0);
  const uint64_t v_desc = tile_descriptor(base + F::kV + 64 * c * 128, 0);
  const uint64_t q_desc = tile_descriptor(base + F::kQ, F::kBr * 128);
  const uint64_t do_desc = tile_descriptor(base + F::kDO, F::kBr * 128);
  // The warpgroup's dQ slice: rows 64 (c % kRowSlices) of the tile (a panel of dS^T), columns
  // col0 = kDqCols (c / kRowSlices) (in K's panel col0 / 64, 2 bytes a column into it).
  const int col0 = c / F::kRowSlices * F::kDqCols;
  const uint64_t ds_desc = tile_descriptor(base + F::kDS + c % F::kRowSlices * F::kBc * 128, 0);
  const uint64_t kq_desc = tile_descriptor(base + F::kK + col0 / 64 * F::kBc * 128 + col0 % 64 * 2, F::kBc * 128);
  auto slot = [](uint64_t desc, int s) { return advanced(desc, s * F::kStageBytes); };
  float dk_acc[F::kCols / 8][4] = {}, dv_acc[F::kCols / 8][4] = {};
  const float log2_scale = (kNoSoftcap ? dims.scale : 1.0f) * kLog2e;
  const SoftCap cap(dims);
  ptx::mbarrier_wait_parity(kv_full, 0);
  RingPos<F::kStages> at;
  for (int qt = args.tiles.begin, buf = 0; qt < args.tiles.end; ++qt, at = at.next(), buf ^= 1) {
    ptx::mbarrier_wait_parity(ring.full + at.slot, at.parity);
    uint32_t pa[F::kBr / 16][4], da[F::kBr / 16][4] = {};  // P^T, dS^T as A fragments
    if (args.mine[c].contains(qt)) {
      float s[F::kBr / 8][4], dp[F::kBr / 8][4];
      issue_sdp<T, F>(s, dp, k_desc, v_desc, slot(q_desc, at.slot), slot(do_desc, at.slot));
      const float* lse2 = reinterpret_cast<const float*>(smem + F::kStats + at.slot * F::kStatBytes);
      const int q0 = qt * F::kBr;
      const bool whole = all_allowed(q0, F::kBr, key0, 16, w, seq_len);
      if constexpr (F::kSplitSdp) {
        ptx::wgmma_wait_group<1>();  // S^T; dP^T's products run under the exponentials
        ptx::wgmma_fence_operand(reinterpret_cast<float(&)[F::kBr / 2]>(s));
        probs_before_dp(s, lse2, log2_scale, t);
        ptx::wgmma_wait_group<0>();
        ptx::wgmma_fence_operand(reinterpret_cast<float(&)[F::kBr / 2]>(dp));
        if (whole)
          dlogits_after_dp<false>(s, dp, lse2 + F::kBr, keys, q0, t, w, seq_len);
        else
          dlogits_after_dp<true>(s, dp, lse2 + F::kBr, keys, q0, t, w, seq_len);
      } else {
        ptx::wgmma_wait_group<0>();
        ptx::wgmma_fence_operand(reinterpret_cast<float(&)[F::kBr / 2]>(s));
        ptx::wgmma_fence_operand(reinterpret_cast<float(&)[F::kBr / 2]>(dp));
        if (whole)
          probs_and_dlogits<false, kNoSoftcap>(s, dp, lse2, lse2 + F::kBr, log2_scale, cap, keys, q0, t, w, seq_len);
        else
          probs_and_dlogits<true, kNoSoftcap>(s, dp, lse2, lse2 + F::kBr, log2_scale, cap, keys, q0, t, w, seq_len);
      }
      to_a_fragments<T>(pa, s);
      to_a_fragments<T>(da, dp);
      issue_dkdv<T, F>(dv_acc, dk_acc, pa, da, slot(q_desc, at.slot), slot(do_desc, at.slot));
    }
    store_ds<F>(smem + F::kDS + buf * F::kDSBytes + (64 * c + 16 * warp) * 128, da, g, t);
    ptx::fence_proxy_async();  // the stores, before wgmma reads them
    ptx::named_barrier_sync(kDsReady, 128 * F::kConsumers);
    float dq[F::kDqCols / 8][4];
    issue_dq<T, F>(dq, advanced(ds_desc, buf * F::kDSBytes), kq_desc);
    ptx::wgmma_wait_group<0>();  // dQ, and dK and dV: Q and dO are read
    ptx::wgmma_fence_operand(reinterpret_cast<float(&)[F::kDqCols / 2]>(dq));
    ptx::wgmma_fence_operand(reinterpret_cast<float(&)[F::kCols / 2]>(dk_acc));
    ptx::wgmma_fence_operand(reinterpret_cast<float(&)[F::kCols / 2]>(dv_acc));
    release(ring.empty + at.slot, lane);
    stage_dq<F>(dq, smem, c, buf % F::kDqBuffers);  // buf: the tile's parity
  }
  store_dkdv<T, F>(dk_acc, dv_acc, dims, args.pair, key0, dk, dv);
}

// Shapes: q, k, v, dO (B, H, T, D) through their tensor maps (dims {D, T, H, B}, boxes of 64
// columns and kBr (q, dO) or kBc (k, v) rows, 128-byte swizzle); stats (B H, nq, 2, kBr) f32 from
// sm90_stats_kernel; dq_accum (B H, nq, kConsumers, 64 x kDqCols) f32, zeroed; flags int, zeroed:
// B H tickets, then a hand-over flag per dQ slice (null: unordered); dk, dv (B, H, T, D) at their
// dims Rows. Grid (ceil(T / kBc), H, B) as the mma kernel's: block (i, h, b) owns key tile kt =
// gridDim.x - 1 - its ticket (i in the unordered kernel). kThreads threads: warpgroup 0 produces,
// the others consume.
template <typename T, int kWidth, bool kNoSoftcap, bool kOrdered>
__global__ void __launch_bounds__(Sm90Bwd<kWidth, kNoSoftcap>::kThreads, 1)
    attention_sm90_backward_kernel(const __grid_constant__ CUtensorMap q_map,
                                   const __grid_constant__ CUtensorMap k_map,
                                   const __grid_constant__ CUtensorMap v_map,
                                   const __grid_constant__ CUtensorMap do_map, const float* __restrict__ stats,
                                   float* __restrict__ dq_accum, int* __restrict__ flags, T* __restrict__ dk,
                                   T* __restrict__ dv, Dims dims) {
  using F = Sm90Bwd<kWidth, kNoSoftcap>;
  KEEL_DYNAMIC_SHARED(unsigned char, smem, 1024);
  // The block's arguments wait in shared memory, read where used: held in registers across the
  // loop, beside dK, dV, S^T and dP^T, they made the soft-capped kernel spill at width 128.
  KEEL_SHARED(BwdArgs, args);
  uint64_t* const kv_full = reinterpret_cast<uint64_t*>(smem + F::kBars);
  const Ring ring{kv_full + 1, kv_full + 1 + F::kStages};
  const int h = blockIdx.y, b = blockIdx.z, pair = b * dims.H + h;
  if (threadIdx.x == 0) {
    ptx::mbarrier_init(kv_full, 1);
    for (int s = 0; s < F::kStages; ++s) {
      ptx::mbarrier_init(ring.full + s, 1);                    // the producer's arrive_expect_tx
      ptx::mbarrier_init(ring.empty + s, 4 * F::kConsumers);  // one arrival per consumer warp
    }
    ptx::fence_proxy_async();  // the barriers are initialized before the copies complete on them
    const int ticket = kOrdered ? atomicAdd(flags + pair, 1) : static_cast<int>(blockIdx.x);
    const int kt = gridDim.x - 1 - ticket, w = dims.window[h];
    args = BwdArgs{dq_accum, kOrdered ? flags + gridDim.y * gridDim.z : nullptr, pair, (dims.T + F::kBr - 1) / F::kBr,
                   w, kt, kt * F::kBc, query_tiles_for_key_tile(kt, F::kBc, F::kBr, dims.T, w), {}};
    for (int c = 0; c < F::kConsumers; ++c) {
      const int first = kt * F::kBc + 64 * c;
      args.mine[c] = first < dims.T ? query_tiles_for_key_tile(first / 64, 64, F::kBr, dims.T, w) : TileRange{0, 0};
    }
  }
  __syncthreads();
  if (threadIdx.x < 128) {
    ptx::setmaxnreg_dec<F::kProducerRegs>();
    if (threadIdx.x == 0)
      produce<F>(&q_map, &k_map, &v_map, &do_map, stats + static_cast<int64_t>(pair) * args.nq * 2 * F::kBr, smem,
                 kv_full, ring, args.k0, h, b, args.tiles);
    else if (threadIdx.x / 32 == 1)
      add_dq<F>(args, smem, dims.T);
  } else {
    ptx::setmaxnreg_inc<F::kConsumerRegs>();
    // The warpgroup as lane 0's, so that the descriptors built from it are uniform registers.
    const int c = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0) - 1;
    consume<T, F, kNoSoftcap>(args, dims, smem, kv_full, ring, c, dk, dv);
  }
}

// Shapes: out, dout (B, H, T, D) at dims.out, dims.dout, lse (B, H, T) f32 -> stats (B H, nq, 2,
// kBr) f32: per query tile, lse log2 e of its kBr rows, then their D_i = dO_i . O_i (the mma
// path's dvec pass, attention_backward.cu), zeros past the sequence so that the last tile's bulk
// copy is whole. A warp per row of the padded sequence (rows = B H nq kBr), lanes over d.
template <typename T, int kBr>
__global__ void __launch_bounds__(kThreads)
    sm90_stats_kernel(const T* __restrict__ out, const T* __restrict__ dout, const float* __restrict__ lse,
                      float* __restrict__ stats, int nq, int64_t rows, Dims dims) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (r >= rows) return;  // whole warps leave together: row_dvec's shuffles see full warps
  const int lane = threadIdx.x & 31;
  const int bh = static_cast<int>(r / (static_cast<int64_t>(nq) * kBr)), i = static_cast<int>(r % (nq * kBr));
  float l = 0.0f, d_i = 0.0f;
  if (i < dims.T) {
    l = kLog2e * lse[static_cast<int64_t>(bh) * dims.T + i];
    d_i = row_dvec(out + dims.out.pair(bh, dims.H) + static_cast<int64_t>(i) * dims.out.t,
                   dout + dims.dout.pair(bh, dims.H) + static_cast<int64_t>(i) * dims.dout.t, dims.D, lane);
  }
  float* tile = stats + (static_cast<int64_t>(bh) * nq + i / kBr) * 2 * kBr;
  if (lane == 0) tile[i % kBr] = l, tile[kBr + i % kBr] = d_i;
}

// One backward on Sm90Bwd<kWidth, kNoSoftcap>'s tiles: the statistics laid out by query tile, the
// kernel (the ordered dQ or not), dQ's final pass (times dq_scale, the scale's sign restored).
template <typename E, int kWidth, bool kNoSoftcap>
void run_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                  const Tensor& dout, const Dims& dims, float dq_scale, Tensor& dq, Tensor& dk, Tensor& dv) {
  using F = Sm90Bwd<kWidth, kNoSoftcap>;
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3);
  const int dev = q.device().index;
  const cudaStream_t stream = detail::stream(dev);
  const int64_t nq = (T + F::kBr - 1) / F::kBr, pairs = B * H;
  Tensor stats = empty({pairs * nq * 2 * F::kBr}, {DType::f32, q.device()});
  const int64_t rows = pairs * nq * F::kBr;
  launch(sm90_stats_kernel<E, F::kBr>, dim3(static_cast<unsigned>((rows + kWarps - 1) / kWarps)), 0, dev,
         static_cast<const E*>(out.raw_data()), static_cast<const E*>(dout.raw_data()),
         static_cast<const float*>(lse.raw_data()), static_cast<float*>(stats.raw_data()), static_cast<int>(nq), rows,
         dims);
  Tensor dq_accum = empty({pairs * nq * F::kBr * kWidth}, {DType::f32, q.device()});
  detail::count_copy();
  KEEL_CHECK_CUDA(cudaMemsetAsync(dq_accum.raw_data(), 0, dq_accum.numel() * sizeof(float), stream));
  const bool ordered = deterministic();
  Tensor flags;  // tickets, one per (b, h), then a hand-over flag per dQ slice
  if (ordered) {
    flags = empty({pairs * (1 + nq * F::kConsumers)}, {DType::i32, q.device()});
    detail::count_copy();
    KEEL_CHECK_CUDA(cudaMemsetAsync(flags.raw_data(), 0, flags.numel() * sizeof(int), stream));
  }
  const CUtensorMap qm = operand_map(q, dims.q, B, H, T, D, F::kBr);
  const CUtensorMap km = operand_map(k, dims.k, B, H, T, D, F::kBc);
  const CUtensorMap vm = operand_map(v, dims.v, B, H, T, D, F::kBc);
  const CUtensorMap dom = operand_map(dout, dims.dout, B, H, T, D, F::kBr);
  const dim3 grid(static_cast<unsigned>((T + F::kBc - 1) / F::kBc), static_cast<unsigned>(H),
                  static_cast<unsigned>(B));
  launch_threads(ordered ? attention_sm90_backward_kernel<E, kWidth, kNoSoftcap, true>
                         : attention_sm90_backward_kernel<E, kWidth, kNoSoftcap, false>,
                 grid, F::kThreads, F::kBytes, dev, qm, km, vm, dom, static_cast<const float*>(stats.raw_data()),
                 static_cast<float*>(dq_accum.raw_data()), ordered ? static_cast<int*>(flags.raw_data()) : nullptr,
                 static_cast<E*>(dk.raw_data()), static_cast<E*>(dv.raw_data()), dims);
  const int64_t n8 = dq.numel() / 8;
  launch_threads(sm90_dq_convert_kernel<E, F>, dim3(static_cast<unsigned>((n8 + 255) / 256)), 256, 0, dev,
                 static_cast<const float*>(dq_accum.raw_data()), static_cast<E*>(dq.raw_data()), n8, dq_scale, dims);
}

}  // namespace

bool attention_sm90_backward(const Tensor& q_in, const Tensor& k, const Tensor& v, const Tensor& out,
                             const Tensor& lse, const Tensor& dout, const attn::Dims& dims_in, Tensor& dq, Tensor& dk,
                             Tensor& dv) {
  constexpr const char* kOp = "attention (CUDA backward, sm90)";
  if (!sm90_takes(q_in, k, v, dout, dims_in.dout, dims_in)) return false;
  const int64_t D = q_in.size(3);
  attn::Dims dims = dims_in;
  const Tensor q = with_positive_scale(q_in, dims);  // dq's sign: dims_in.scale in the final pass
  visit_half(kOp, q.dtype(), [&]<typename E>() {
    with_width<16>(kOp, D, [&]<int kWidth>() {
      if constexpr (kWidth == 64 || kWidth == 128) {
        if (dims.softcap == 0.0f)
          run_backward<E, kWidth, true>(q, k, v, out, lse, dout, dims, dims_in.scale, dq, dk, dv);
        else
          run_backward<E, kWidth, false>(q, k, v, out, lse, dout, dims, dims_in.scale, dq, dk, dv);
      }
    });
  });
  return true;
}

}  // namespace keel::cuda
