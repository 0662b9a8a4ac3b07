// Flash-attention backward, FlashAttention-2's way: one kernel, five products, on the PTX
// tensor-core instructions (bf16 and f16; attention_mma.cuh explains the register layout).
// attention_backward.cu derives the formulas:
//   P = exp(S - lse),  dV = P^T dO,  dP = dO V^T,  dS = P (dP - D_i) (x the soft-cap's
//   derivative),  dK = scale dS^T Q,  dQ = scale dS K.
//
// The names, against the FlashAttention-2 paper (Dao 2023, Algorithm 2), and the forward's
// (attention_mma_forward.cu) where they are the same:
//   kBc, kBr        B_c, B_r: the keys a block owns (128; 64 at width 256) and the queries of one
//                   tile (64; 32 at width 256)
//   kWidth          d rounded up to a kernel width (16 .. 256); D = dims.D, the heads' own width
//   kt, qt          j and i: the key tile of the block, the query tile of the loop
//   s, dp           S_ij^T and dP_ij^T, transposed (keys are the warp's rows), in mma
//                   accumulators; in place they become P_ij^T and dS_ij^T
//   dk_acc, dv_acc  dK_j and dV_j, in registers for the whole kernel
//   dvec            D_i = rowsum(dO_i * O_i), computed before this kernel
//   dq_accum        dQ in f32, summed over key tiles, scaled into dq by dq_convert_kernel
//   log2_scale      as in the forward: a score times it is in the exponent's log2 units
//   kNoSoftcap      as in the forward: the kernel for the usual logit, on raw dot products
//   block_tiles     the query tiles some key of the block meets; warp_tiles, those of one warp
//
// A block owns kBc keys of one (b, h), 16 per warp, whose dK and dV stay in f32 registers for
// the whole kernel. It streams the query tiles that see its keys, Q and dO double-buffered with
// cp.async, from its diagonal tile up. Per tile, each warp whose keys meet the tile's bands
// computes S^T = K_w Q^T and dP^T = V_w dO^T, then P^T and dS^T element by element, then
// dV_w += P^T dO and dK_w += dS^T Q (accumulators turned into A fragments as in the forward).
// dS^T also goes to shared memory, where the block's keys meet: each warp then computes a
// 16 x kShare part of the tile's dQ = dS K and adds it to dq_accum (attention_mma_dq.cuh).
//
// The grid runs the key tiles of one (b, h) next to each other (grid x), as FlashAttention-2's
// does: the blocks resident at once share their head's Q, dO and dQ sums in L2 (4 MB a head at
// T 4096, D 128); with (b, h) first they would be ~132 heads whose ~530 MB come from DRAM.
//
// dQ, deterministically: the key tiles add their shares to a query tile in decreasing order,
// handed over by a flag per query tile (ptx::spin_wait_equal, red_release_gpu_add), so every
// element sums its terms in the same order on every run. The order costs no waiting: key tile
// kt reaches query tile qt after qt - first(kt) steps, and first(kt + 1) lies kBc / kBr = 2
// tiles further on, so kt + 1 got there two steps earlier. A block takes its key tile from a
// ticket drawn when it starts (an atomic counter per (b, h) and column half, as CUB's decoupled
// look-back numbers its tiles), the highest key tile first, so it waits only for blocks that
// started before it, whatever order the GPU starts blocks in. The price: a __syncthreads per
// tile, the f32 buffer (B*H*T*D*4 bytes) and its final pass. With keel::set_deterministic(false)
// (`gpt2 train --deterministic 0`) the unordered kernel runs instead: key tiles add as they
// finish, FlashAttention-2's way, and dQ's rounding depends on the order the blocks ran in.
#include "core/determinism.h"
#include "core/factory.h"
#include "ops/cuda/attention_dlogits.cuh"
#include "ops/cuda/attention_mma.cuh"
#include "ops/cuda/attention_mma_dq.cuh"

namespace keel::cuda {

namespace {

using namespace attn;
using namespace attn::mma;

// Tile sizes and shared memory (elements of T) for kernel width kWidth: K, V (kBc x kWidth), Q
// and dO of two stages (kBr x kWidth each), dS^T (kBc x kBr); then f32 lse and D_i of two
// stages. bf16 at width 128: 145 KB (one block per multiprocessor, as FlashAttention-2); 64: 81 KB.
// At width 256 a warp's 16 rows of dK and dV would take 256 f32 registers a thread: there a
// block writes kOut = 128 of the columns (of dK, dV and its dQ shares; grid z picks which half)
// and both halves recompute S and dP, whose products need all 256 (5 products become 7). Its
// tiles shrink to 64 keys (4 warps) x 32 queries, so the full-width K, V, Q and dO take 132 KB.
// dQ of a query tile (kBr x kOut) is split among the warps: kBr / 16 row groups of 16 queries,
// and the warps of a row group share its columns, kShare each.
template <int kWidth>
struct MmaBwd {
  static constexpr bool kWide = kWidth > 128;
  static constexpr int kWarps = kWide ? 4 : 8, kThreads = 32 * kWarps, kBc = 16 * kWarps, kBr = kWide ? 32 : 64;
  static constexpr int kOut = kWide ? 128 : kWidth, kSplit = kWidth / kOut;
  static constexpr int kRowGroups = kBr / 16, kShare = kOut / (kWarps / kRowGroups);
  static constexpr int kV = kBc * kWidth, kQ = 2 * kBc * kWidth;
  static constexpr int kDO = kQ + 2 * kBr * kWidth, kDS = kDO + 2 * kBr * kWidth;
  static constexpr int kStage = kBr * kWidth, kElems = kDS + kBc * kBr;
  static constexpr int kStats = 2 * kElems;  // byte offset of lse[2][kBr], dvec[2][kBr]
  static constexpr int kBytes = kStats + 4 * 4 * kBr;
  // backward_tiles' static shared variables (KEEL_SHARED), which a block holds beside kBytes.
  static constexpr int kStaticBytes = 5 * 8 + 4 + kWarps * (2 * 4 + 4);
  static_assert(kBytes + kStaticBytes <= 163 * 1024, "must fit an A100's shared memory");
};

// Shapes: q, k, v, dout, dk, dv (B, H, T, D) in T at their dims Rows, D = dims.D <= kWidth (tile
// columns D..kWidth-1 are zeros: attention_tiles.h); lse, dvec (B, H, T) f32; dq_accum
// (B, H, T, D) f32, zeroed; flags int, zeroed: B*H*kSplit tickets, then (B*H, kSplit,
// ceil(T / kBr)) hand-over flags (null for the unordered kernel, which has no hand-over).
// Grid (ceil(T / kBc), H, B * kSplit), kThreads threads: block (i, h, b kSplit + z) owns keys
// [kBc kt, kBc kt + kBc), kt counted from the end (kt = gridDim.x - 1 - n, n its ticket, or i in
// the unordered kernel), of pair bh = b H + h, and output columns [kOut z, kOut z + kOut). Warp
// w owns keys 16w..16w+15 (the rows of its S^T); lane (g, t) holds keys g and g + 8 and queries
// 8n + 2t, 8n + 2t + 1. kOrdered: the dQ adds in key-tile order (the default), or as the key
// tiles finish (keel::set_deterministic(false)); the two kernels below.
// One function of ~230 lines: dK, dV, S^T and dP^T live in registers across the query-tile loop,
// 244 to 255 a thread at widths 64 and 128 (the kernel report), at the limit; the values this
// kernel keeps in shared memory instead (first_row, warp_first) are the ones whose registers,
// held across the loop, made it spill. A split must keep the kernel report's numbers.
template <typename T, int kWidth, bool kNoSoftcap, bool kOrdered>
__device__ __forceinline__ void backward_tiles(const T* __restrict__ q, const T* __restrict__ k,
                                               const T* __restrict__ v, const T* __restrict__ dout,
                                               const float* __restrict__ lse, const float* __restrict__ dvec,
                                               float* __restrict__ dq_accum, int* __restrict__ flags,
                                               T* __restrict__ dk, T* __restrict__ dv, Dims dims) {
  using F = MmaBwd<kWidth>;
  constexpr int kBr = F::kBr, kBc = F::kBc, kThreads = F::kThreads;
  // n-blocks of S^T, of dK and dV, of the dQ share; k-steps over the width
  constexpr int kS = kBr / 8, kO = F::kOut / 8, kN = F::kShare / 8, kK = kWidth / 16;
  KEEL_DYNAMIC_SHARED(unsigned char, smem, 128);
  T* const Ks = reinterpret_cast<T*>(smem);
  T* const Vs = Ks + F::kV;
  T* const dSs = Ks + F::kDS;
  float* const stats = reinterpret_cast<float*>(smem + F::kStats);  // lse log2 e: [s * kBr], dvec: [(2 + s) * kBr]

  const int h = blockIdx.y, seq_len = dims.T, D = dims.D, w = dims.window[h];
  const int z = F::kSplit == 1 ? 0 : static_cast<int>(blockIdx.z) % F::kSplit;  // which output columns
  const int bh = static_cast<int>(blockIdx.z) / F::kSplit * dims.H + h;
  const int pair = bh * F::kSplit + z, nq = (seq_len + kBr - 1) / kBr;
  // The operands' rows may lie anywhere (Rows). The offsets of Q's, dO's, K's and V's first rows
  // wait in shared memory, read where used (Q's and dO's once per tile): held in registers across
  // the loop, these 64-bit values made this kernel spill. The ordered kernel's ticket waits there too.
  KEEL_SHARED(int64_t[5], first_row);  // and of the pair's rows in the packed dq_accum
  KEEL_SHARED(int, ticket);            // this block's place among its pair's blocks, in start order
  if (threadIdx.x == 0) {
    first_row[0] = dims.q.pair(bh, dims.H), first_row[1] = dims.dout.pair(bh, dims.H);
    first_row[2] = dims.k.pair(bh, dims.H), first_row[3] = dims.v.pair(bh, dims.H);
    first_row[4] = static_cast<int64_t>(bh) * seq_len * D;
    if constexpr (kOrdered) ticket = atomicAdd(flags + pair, 1);
  }
  __syncthreads();
  const int kt = gridDim.x - 1 - (kOrdered ? ticket : static_cast<int>(blockIdx.x)), k0 = kt * kBc;
  const int c0 = z * F::kOut;  // the block's first output column
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int r0 = 16 * warp, first = k0 + r0;  // the warp's first key: in the tile, in the sequence
  const TileRange block_tiles = query_tiles_for_key_tile(kt, kBc, kBr, seq_len, w);
  // The query tiles that meet the warp's own keys, and its first key for the final stores, in
  // shared memory: registers held across the loop for them were what the D = 128 kernels spilled.
  KEEL_SHARED(TileRange[F::kWarps], tiles_by_warp);
  KEEL_SHARED(int[F::kWarps], warp_first);
  if (lane == 0) {
    tiles_by_warp[warp] =
        first < seq_len ? query_tiles_for_key_tile(first / 16, 16, kBr, seq_len, w) : TileRange{0, 0};
    warp_first[warp] = first;
  }
  const int m0 = 16 * (warp % F::kRowGroups), d0 = c0 + warp / F::kRowGroups * F::kShare;  // its dQ share

  // Q and dO tiles: each thread's copies at global offsets computed once (TileStream; at width
  // 256, whose 128 threads cover 4 rows a pass, the shared offsets per copy).
  using Stream = TileStream<T, kWidth, kBr, kThreads>;
  const int ldq = dims.q.t, ldo = dims.dout.t;
  const Stream q_copy(D, ldq), do_copy(D, ldo);
  auto load_stage = [&](int qt, int stage) {
    const int q0 = qt * kBr;
    const T* qg = q + first_row[0] + static_cast<int64_t>(q0) * ldq;
    const T* dog = dout + first_row[1] + static_cast<int64_t>(q0) * ldo;
    q_copy.load(Ks + F::kQ + stage * F::kStage, qg, seq_len - q0, ldq);
    do_copy.load(Ks + F::kDO + stage * F::kStage, dog, seq_len - q0, ldo);
    for (int r = threadIdx.x; r < kBr; r += kThreads) {  // small: plain loads, 0 past the end
      const bool inside = q0 + r < seq_len;
      stats[stage * kBr + r] = inside ? kLog2e * lse[static_cast<int64_t>(bh) * seq_len + q0 + r] : 0.0f;
      stats[(2 + stage) * kBr + r] = inside ? dvec[static_cast<int64_t>(bh) * seq_len + q0 + r] : 0.0f;
    }
  };
  load_tile_async<T, kWidth, kBc, kThreads>(Ks, k + first_row[2] + static_cast<int64_t>(k0) * dims.k.t, seq_len - k0, D,
                                        dims.k.t);
  load_tile_async<T, kWidth, kBc, kThreads>(Vs, v + first_row[3] + static_cast<int64_t>(k0) * dims.v.t, seq_len - k0, D,
                                        dims.v.t);
  load_stage(block_tiles.begin, 0);
  ptx::cp_async_commit();

  // The lanes' ldmatrix rows (attention_mma.cuh): K's and V's A fragments and the B columns of
  // dO, Q and K; the B rows of Q and dO; dS^T read transposed. Adding c0 (0 or 128) to a tile
  // keeps its swizzle: 16 chunks are whole periods.
  const auto a_row = LaneRow<kWidth>::a_rows(lane), b_row = LaneRow<kWidth>::b_rows(lane);
  const auto ds_row = LaneRow<kBr>::b_rows(lane);
  const LaneRow<kBr> ds_out(g, 0, 2 * t);  // the lane's dS^T stores: row g, the pair 2t of a chunk

  float dk_acc[kO][4] = {}, dv_acc[kO][4] = {};
  const float log2_scale = (kNoSoftcap ? dims.scale : 1.0f) * kLog2e;  // v -> log2 units (probs_and_dlogits)
  const SoftCap cap(dims);
  int* handed = nullptr;  // the flag of the query tile whose dQ this block added last
  for (int qt = block_tiles.begin; qt < block_tiles.end; ++qt) {
    const int stage = (qt - block_tiles.begin) & 1, q0 = qt * kBr;
    ptx::cp_async_wait<0>();
    __syncthreads();  // tile qt is in; every warp is done with tile qt - 1, dS^T, and its dQ adds
    if (handed && threadIdx.x == 0) {
      __threadfence();
      ptx::red_release_gpu_add(handed, 1);
    }
    if (qt + 1 < block_tiles.end) {
      load_stage(qt + 1, stage ^ 1);
      ptx::cp_async_commit();
    }
    const T* Qs = Ks + F::kQ + stage * F::kStage;
    const T* dOs = Ks + F::kDO + stage * F::kStage;
    const float* lse_s = stats + stage * kBr;
    const float* dvec_s = stats + (2 + stage) * kBr;
    const TileRange warp_tiles = tiles_by_warp[warp];
    const bool busy = qt >= warp_tiles.begin && qt < warp_tiles.end;  // an allowed pair among this warp's keys
    if (busy) {
      float s[kS][4] = {}, dp[kS][4] = {};  // S^T = K_w Q^T, dP^T = V_w dO^T
#pragma unroll
      for (int kk = 0; kk < kK; ++kk) {
        uint32_t ak[4], av[4];
        load_a(ak, Ks, a_row, r0, 16 * kk);
        load_a(av, Vs, a_row, r0, 16 * kk);
#pragma unroll
        for (int n = 0; n < kS; n += 2) {
          uint32_t b0[2], b1[2];
          load_b_rows(b0, b1, Qs, b_row, 8 * n, 16 * kk);
          ptx::mma_m16n8k16<T>(s[n], ak, b0);
          ptx::mma_m16n8k16<T>(s[n + 1], ak, b1);
          load_b_rows(b0, b1, dOs, b_row, 8 * n, 16 * kk);
          ptx::mma_m16n8k16<T>(dp[n], av, b0);
          ptx::mma_m16n8k16<T>(dp[n + 1], av, b1);
        }
      }
      // Tile classes: every pair allowed for all 16 keys and the tile's queries (most tiles of a
      // long sequence) takes the path without a per-element test. The test is all_allowed's
      // (attention_tiles.h), written out: through the call ptxas allocates this kernel's registers
      // differently (232 instead of 226 at width 64, over its budget in the kernel report).
      // The warp's first key: for the ordered kernel (whose key tile comes from its ticket) read
      // where used, as the register held across the loop spilled at D = 128.
      const int key0 = kOrdered ? warp_first[warp] : first;
      const int keys[2] = {key0 + g, key0 + g + 8};
      const bool whole = q0 + kBr - 1 < seq_len && key0 + 15 <= q0 && key0 >= band_start(q0 + kBr - 1, w);
      if (whole)
        probs_and_dlogits<false, kNoSoftcap>(s, dp, lse_s, dvec_s, log2_scale, cap, keys, q0, t, w, seq_len);
      else
        probs_and_dlogits<true, kNoSoftcap>(s, dp, lse_s, dvec_s, log2_scale, cap, keys, q0, t, w, seq_len);
#pragma unroll
      for (int kk = 0; kk < kBr / 16; ++kk) {  // dV_w += P^T dO, dK_w += dS^T Q (k = queries)
        uint32_t ap[4], as[4];
        acc_to_a<T>(ap, s[2 * kk], s[2 * kk + 1]);
        acc_to_a<T>(as, dp[2 * kk], dp[2 * kk + 1]);
#pragma unroll
        for (int d = 0; d < kO; d += 2) {
          uint32_t b0[2], b1[2];
          load_b_cols(b0, b1, dOs + c0, a_row, 16 * kk, 8 * d);
          ptx::mma_m16n8k16<T>(dv_acc[d], ap, b0);
          ptx::mma_m16n8k16<T>(dv_acc[d + 1], ap, b1);
          load_b_cols(b0, b1, Qs + c0, a_row, 16 * kk, 8 * d);
          ptx::mma_m16n8k16<T>(dk_acc[d], as, b0);
          ptx::mma_m16n8k16<T>(dk_acc[d + 1], as, b1);
        }
        // dS^T rows g, g + 8 of the warp, queries 16kk..16kk+15, for the block's dQ product.
        store_ds(dSs, ds_out, r0, kk, as);
      }
    } else {  // no allowed pair: dS^T = 0, so that every warp's rows enter dQ without a test
      const uint32_t zero[4] = {};
#pragma unroll
      for (int kk = 0; kk < kBr / 16; ++kk) store_ds(dSs, ds_out, r0, kk, zero);
    }
    __syncthreads();  // dS^T of all warps is in

    float dq[kN][4] = {};  // this warp's share of dQ: queries m0.., columns d0.., over every warp's keys
    dq_share<F>(dq, dSs, Ks, ds_row, a_row, m0, d0, lane);
    // The flag counts the key tiles that have added to this query tile; those above kt that see
    // it are exactly (kt, last key tile of qt], so kt's turn comes at that count.
    int* flag = nullptr;
    if constexpr (kOrdered) {
      flag = flags + gridDim.y * gridDim.z + static_cast<int64_t>(pair) * nq + qt;  // past the tickets
      if (threadIdx.x == 0)
        ptx::spin_wait_equal(flag, key_tiles_for_query_tile(qt, kBr, kBc, seq_len, w).end - gridDim.x + ticket);
      __syncthreads();  // the higher key tiles' shares of this query tile are all in
    }
    add_dq_share<F>(dq, dq_accum, first_row[4], q0 + m0, d0, g, t, D, seq_len);
    if constexpr (kOrdered) handed = flag;
  }
  __syncthreads();  // the last adds are in, and no warp reads K or V any more
  if (handed && threadIdx.x == 0) {
    __threadfence();
    ptx::red_release_gpu_add(handed, 1);
  }

  // dK = scale dS^T Q and dV, staged through the warp's own rows of K and V for 16-byte stores.
#pragma unroll
  for (int d = 0; d < kO; ++d)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int at = Swizzle<kWidth>::offset(r0 + g + 8 * r, c0 + 8 * d + 2 * t);
      *reinterpret_cast<uint32_t*>(Ks + at) =
          pack2<T>(dk_acc[d][2 * r] * dims.scale, dk_acc[d][2 * r + 1] * dims.scale);
      *reinterpret_cast<uint32_t*>(Vs + at) = pack2<T>(dv_acc[d][2 * r], dv_acc[d][2 * r + 1]);
    }
  __syncwarp();
  dk += dims.dk.pair(bh, dims.H), dv += dims.dv.pair(bh, dims.H);
  const int key = warp_first[warp];  // = first
  for (int i = lane; i < 16 * kO; i += 32) {
    const int r = i / kO, col = c0 + i % kO * 8;
    if (key + r >= seq_len || col >= D) continue;  // past the sequence, or a padding column (zeros)
    ptx::store_16(dk + static_cast<int64_t>(key + r) * dims.dk.t + col,
                  ptx::load_16<uint4>(Ks + Swizzle<kWidth>::offset(r0 + r, col)));
    ptx::store_16(dv + static_cast<int64_t>(key + r) * dims.dv.t + col,
                  ptx::load_16<uint4>(Vs + Swizzle<kWidth>::offset(r0 + r, col)));
  }
}

template <typename T, int kWidth, bool kNoSoftcap>
__global__ void __launch_bounds__(MmaBwd<kWidth>::kThreads, 1)
    attention_mma_backward_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                  const T* __restrict__ dout, const float* __restrict__ lse,
                                  const float* __restrict__ dvec, float* __restrict__ dq_accum, int* __restrict__ flags,
                                  T* __restrict__ dk, T* __restrict__ dv, Dims dims) {
  backward_tiles<T, kWidth, kNoSoftcap, true>(q, k, v, dout, lse, dvec, dq_accum, flags, dk, dv, dims);
}

// The same with the dQ adds in any order: no flag waited for or handed on.
template <typename T, int kWidth, bool kNoSoftcap>
__global__ void __launch_bounds__(MmaBwd<kWidth>::kThreads, 1)
    attention_mma_backward_unordered_kernel(const T* __restrict__ q, const T* __restrict__ k,
                                            const T* __restrict__ v, const T* __restrict__ dout,
                                            const float* __restrict__ lse, const float* __restrict__ dvec,
                                            float* __restrict__ dq_accum, int* __restrict__ flags,
                                            T* __restrict__ dk, T* __restrict__ dv, Dims dims) {
  backward_tiles<T, kWidth, kNoSoftcap, false>(q, k, v, dout, lse, dvec, dq_accum, flags, dk, dv, dims);
}

}  // namespace

void attention_mma_backward(const Tensor& q_in, const Tensor& k, const Tensor& v, const Tensor& lse,
                            const Tensor& dout, const Tensor& dvec, const attn::Dims& dims_in, Tensor& dq, Tensor& dk,
                            Tensor& dv) {
  constexpr const char* kOp = "attention (CUDA backward, mma)";
  attn::Dims dims = dims_in;
  const Tensor q = with_positive_scale(q_in, dims);  // dq's sign: dims_in.scale in the final pass
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3);
  const int dev = q.device().index;
  const cudaStream_t stream = detail::stream(dev);
  visit_half(kOp, q.dtype(), [&]<typename E>() {
    with_width<16>(kOp, D, [&]<int kWidth>() {
      using F = MmaBwd<kWidth>;
      const int64_t nq = (T + F::kBr - 1) / F::kBr;
      Tensor dq_accum = empty({B, H, T, D}, {DType::f32, q.device()});
      detail::count_copy();
      KEEL_CHECK_CUDA(cudaMemsetAsync(dq_accum.raw_data(), 0, dq_accum.numel() * sizeof(float), stream));
      const bool ordered = deterministic();
      Tensor flags;  // the ordered kernel's tickets, one per (b, h, z), and hand-over counters, one per query tile
      if (ordered) {
        flags = empty({B * H * F::kSplit * (1 + nq)}, {DType::i32, q.device()});
        detail::count_copy();
        KEEL_CHECK_CUDA(cudaMemsetAsync(flags.raw_data(), 0, flags.numel() * sizeof(int), stream));
      }
      const dim3 grid(static_cast<unsigned>((T + F::kBc - 1) / F::kBc), static_cast<unsigned>(H),
                      static_cast<unsigned>(B * F::kSplit));  // a head's key tiles side by side
      auto launch = [&](auto kernel) {
        launch_threads(kernel, grid, F::kThreads, F::kBytes, dev, static_cast<const E*>(q.raw_data()),
                       static_cast<const E*>(k.raw_data()), static_cast<const E*>(v.raw_data()),
                       static_cast<const E*>(dout.raw_data()), static_cast<const float*>(lse.raw_data()),
                       static_cast<const float*>(dvec.raw_data()), static_cast<float*>(dq_accum.raw_data()),
                       ordered ? static_cast<int*>(flags.raw_data()) : nullptr, static_cast<E*>(dk.raw_data()),
                       static_cast<E*>(dv.raw_data()), dims);
      };
      if (dims.softcap == 0.0f)  // the usual logit: probs_and_dlogits
        launch(ordered ? attention_mma_backward_kernel<E, kWidth, true>
                       : attention_mma_backward_unordered_kernel<E, kWidth, true>);
      else
        launch(ordered ? attention_mma_backward_kernel<E, kWidth, false>
                       : attention_mma_backward_unordered_kernel<E, kWidth, false>);
      const int64_t n8 = dq.numel() / 8;
      launch_threads(dq_convert_kernel<E>, dim3(static_cast<unsigned>((n8 + 255) / 256)), 256, 0, dev,
                     static_cast<const float*>(dq_accum.raw_data()), static_cast<E*>(dq.raw_data()), n8,
                     dims_in.scale, dims);
    });
  });
}

}  // namespace keel::cuda
