// Flash-attention forward, FlashAttention-2's way, on the PTX tensor-core instructions (bf16 and
// f16; attention_mma.cuh explains the register layout). Every head pattern: a head of window W
// costs O(T * W).
//
// The names, against the FlashAttention-2 paper (Dao 2023, Algorithm 1):
//   kBr, kBc        B_r, B_c: the query rows a block owns (128) and the keys of one tile (64; 32
//                   at width 256)
//   kWidth          d rounded up to a kernel width (16 .. 256); D = dims.D, the heads' own width
//   qt, kt          i and j: the query tile of the block, the key tile of the loop
//   s               S_ij = Q_i K_j^T, then (in place) P~_ij, in mma accumulators
//   o               O_i, unnormalised until the end
//   m, l            m_i and l_i: a row's running max and (this lane's share of) its sum
//   lo              this lane's smallest allowed score of the row, for the statistics
//   log2_scale      softmax_scale * log2 e: a score times it is in the exponent's log2 units
//   kMTiles         m-tiles (16 rows each) per warp: 2 up to width 128, then 1
//   block_tiles     the key tiles some row of the block may see; warp_tiles, those of this warp
//
// A block owns 128 query rows of one (b, h): 4 warps of 32 rows (two 16-row m-tiles each) up to
// width 128, else 8 warps of 16 rows (MmaFwd). Its Q tile is loaded once into shared memory (and
// into registers as mma A fragments where they fit, see MmaFwd). It then streams the key tiles
// its rows can see (attn::key_tiles_for_query_tile), K and V double-buffered with cp.async: tile
// j + 1 is in flight while tile j is computed, one __syncthreads per tile. Each warp skips,
// without computing, the tiles that hold no allowed pair for its own rows (a local head's warp
// touches 2 of 64 keys; the causal diagonal's upper half is skipped too). The addresses of a
// thread's copies and of a lane's ldmatrix rows are the same in every tile, so they are computed
// once, before the loop (TileStream, LaneRow).
//
// Per tile, warp and m-tile, all in registers: S = Q K^T (16 x kBc, f32), then the online softmax
// update (online_softmax: the row max m across the row's quad, O and the lane's share of l
// rescaled by 2^(log2_scale (m_old - m_new)), P = 2^(log2_scale (S - m)) converted to bf16/f16 A
// fragments), then O += P V. attention_forward.cu describes the online softmax and why -inf rows
// take 0 as reference. Three choices keep the per-element work at five instructions,
// FlashAttention-2's max, FFMA, exp2 and add plus the statistics' min:
// - tile classes: a tile where every pair is allowed for all 16 rows (most tiles of a long
//   sequence) runs a path without a per-element test; only tiles across the diagonal or a band
//   edge test each pair;
// - kNoSoftcap, the kernel for the usual logit (no soft cap): it works on raw dot products and
//   folds scale * log2 e into the exponent's one FFMA (a negative scale runs it on -q:
//   with_positive_scale); soft-capped logits get their own kernel, which computes each logit
//   first, with a branch-free tanh (SoftCap);
// - exp2 (ex2.approx, one instruction) instead of exp, which costs a multiply more.
//
// Statistics, per head, over allowed pairs (ops/attention.h): max |logit| and max_range, the
// largest max - min of a row's logits. Each lane keeps its own minimum lo next to the row's max
// m (the same in the 4 lanes of a row), and both are a max over the row's lanes: max(|m|, |lo|)
// and m - lo reach the row's max |logit| and its range in the lane that holds the minimum, so no
// shuffle is needed. NaN-propagating: the minimum is min.NaN, so a lane that saw a NaN logit
// holds a NaN minimum and reports NaN, at no extra instruction.
#include "core/factory.h"
#include "ops/cuda/attention_mma.cuh"
#include "ops/cuda/attention_online_softmax.cuh"
#include "ops/cuda/arith.h"

namespace keel::cuda {

namespace {

using namespace attn;
using namespace attn::mma;

// Tile sizes and shared memory (elements of T) for kernel width kWidth: Q (kBr x kWidth), then K
// and V of two stages (kBc x kWidth each). A block owns kBr = 128 query rows. Up to width 128 a
// warp owns 32 of them, two m-tiles of 16 (kMTiles), as in FlashAttention-2: every K and V
// fragment it reads from shared memory feeds two mma instead of one, and 4 warps of at most 255
// registers let two blocks share a multiprocessor (bf16 width 128: 96 KB of shared memory each).
// O then takes kMTiles * kWidth / 2 registers a thread (128 at width 128), so Q's fragments are
// read from shared memory at every tile unless they fit beside it (width <= 64). Width 256 keeps
// warps of 16 rows (O alone is 128 registers) and halves the key tile (32 keys: 128 KB), as
// FlashAttention-2 does for its 256-wide head.
template <int kWidth>
struct MmaFwd {
  static constexpr int kMTiles = kWidth <= 128 ? 2 : 1, kWarps = 8 / kMTiles, kThreads = 32 * kWarps;
  static constexpr int kBr = 16 * kMTiles * kWarps, kBc = kWidth <= 128 ? 64 : 32;
  static constexpr bool kQInRegs = kWidth <= 64;
  // Offsets of the K and V tiles after Q's; a second stage adds kStage.
  static constexpr int kK = kBr * kWidth, kV = kK + 2 * kBc * kWidth, kStage = kBc * kWidth;
  static constexpr int kBytes = 2 * (kBr * kWidth + 4 * kBc * kWidth);
  static_assert(kBytes <= 163 * 1024, "must fit an A100's shared memory");
};

// Shapes: q, k, v, out (B, H, T, D) in T at dims.q, .k, .v, .out (Rows; k and v with one row
// stride), D = dims.D <= kWidth (tile columns D..kWidth-1 are zeros: attention_tiles.h); lse
// (B, H, T) f32; max_logit, max_range (H) f32 read as bits, zeroed before the launch. Grid
// (ceil(T / 128), H, B), kThreads threads: block (i, h, b) owns query rows [128 qt, 128 qt + 128)
// of pair bh = b*H + h, qt counted from the end (the longest query tiles start first). A head's
// query tiles run side by side (FlashAttention-2's grid), so the blocks resident at once read the
// K and V of a few heads, which stay in L2, rather than those of ~132 heads. Warp w owns rows
// 16 kMTiles w .. 16 kMTiles (w + 1) - 1, m-tile mt the 16 from 16 (kMTiles w + mt); lane (g, t)
// holds rows g and g + 8 of each.
// One function of ~150 lines: the main loop's state (O, the row states, Q's fragments) lives in
// registers across it, and moving a part of it into a function of its own (O += P V, say) changed
// the compiled code (4 more instructions at width 16 in the kernel report), so it stays whole.
template <typename T, int kWidth, bool kNoSoftcap>
__global__ void __launch_bounds__(MmaFwd<kWidth>::kThreads, 1)
    attention_mma_forward_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                 T* __restrict__ out, float* __restrict__ lse, unsigned* __restrict__ max_logit,
                                 unsigned* __restrict__ max_range, Dims dims) {
  using F = MmaFwd<kWidth>;
  constexpr int kBr = F::kBr, kBc = F::kBc, kThreads = F::kThreads, kMTiles = F::kMTiles, kRows = 16 * kMTiles;
  constexpr int kS = kBc / 8, kO = kWidth / 8, kQ = kWidth / 16;  // n-blocks of S and O, k-steps of Q K^T
  KEEL_DYNAMIC_SHARED(unsigned char, smem, 128);
  T* const Qs = reinterpret_cast<T*>(smem);
  KEEL_SHARED(unsigned, block_logit);
  KEEL_SHARED(unsigned, block_range);

  const int h = blockIdx.y, bh = blockIdx.z * dims.H + h, seq_len = dims.T, D = dims.D, w = dims.window[h];
  const int qt = gridDim.x - 1 - blockIdx.x, q0 = qt * kBr;
  q += dims.q.pair(bh, dims.H), k += dims.k.pair(bh, dims.H), v += dims.v.pair(bh, dims.H);
  out += dims.out.pair(bh, dims.H);
  const int ld = dims.k.t;  // K's and V's row stride
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int r0 = kRows * warp, first = q0 + r0;  // the warp's first row: in the tile, in the sequence
  int rows[kMTiles][2];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) rows[mt][0] = first + 16 * mt + g, rows[mt][1] = first + 16 * mt + g + 8;
  const TileRange block_tiles = key_tiles_for_query_tile(qt, kBr, kBc, seq_len, w);
  const TileRange warp_tiles =
      first < seq_len ? key_tiles_for_query_tile(first / kRows, kRows, kBc, seq_len, w) : TileRange{0, 0};

  const TileStream<T, kWidth, kBc, kThreads> kv_copy(D, ld);
  auto load_kv = [&](int kt, int stage) {
    const int64_t k0 = static_cast<int64_t>(kt) * kBc;
    kv_copy.load(Qs + F::kK + stage * F::kStage, k + k0 * ld, seq_len - static_cast<int>(k0), ld);
    kv_copy.load(Qs + F::kV + stage * F::kStage, v + k0 * ld, seq_len - static_cast<int>(k0), ld);
  };
  // The lanes' ldmatrix rows (attention_mma.cuh): Q's A fragments and V's B columns, K's B rows.
  const auto a_row = LaneRow<kWidth>::a_rows(lane), k_row = LaneRow<kWidth>::b_rows(lane);
  if (threadIdx.x == 0) block_logit = block_range = 0;
  load_tile_async<T, kWidth, kBr, kThreads>(Qs, q + static_cast<int64_t>(q0) * dims.q.t, seq_len - q0, D, dims.q.t);
  load_kv(block_tiles.begin, 0);
  ptx::cp_async_commit();

  uint32_t qf[F::kQInRegs ? kMTiles : 1][F::kQInRegs ? kQ : 1][4];  // Q's A fragments, when held in registers
  float o[kMTiles][kO][4] = {};
  float m[kMTiles][2], l[kMTiles][2] = {}, lo[kMTiles][2];  // the row state (online_softmax)
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) m[mt][0] = m[mt][1] = -INFINITY, lo[mt][0] = lo[mt][1] = INFINITY;
  const float log2_scale = (kNoSoftcap ? dims.scale : 1.0f) * kLog2e;  // score -> log2 units of the softmax
  const SoftCap cap(dims);
  for (int kt = block_tiles.begin; kt < block_tiles.end; ++kt) {
    const int stage = (kt - block_tiles.begin) & 1, k0 = kt * kBc;
    // Tile kt's copies are the only group in flight (kt + 1's are issued only after the barrier,
    // into the stage tile kt - 1 used), hence wait_group 0.
    ptx::cp_async_wait<0>();
    __syncthreads();  // tile kt is in for every thread, and every warp is done with tile kt - 1
    if constexpr (F::kQInRegs)
      if (kt == block_tiles.begin)
        for (int mt = 0; mt < kMTiles; ++mt)
          for (int kk = 0; kk < kQ; ++kk) load_a(qf[mt][kk], Qs, a_row, r0 + 16 * mt, 16 * kk);
    if (kt + 1 < block_tiles.end) {
      load_kv(kt + 1, stage ^ 1);
      ptx::cp_async_commit();
    }
    if (kt < warp_tiles.begin || kt >= warp_tiles.end) continue;  // no allowed pair for this warp's rows
    const T* Ks = Qs + F::kK + stage * F::kStage;
    const T* Vs = Qs + F::kV + stage * F::kStage;

    float s[kMTiles][kS][4] = {};  // S = Q K^T: n-block n holds keys k0 + 8n ..
#pragma unroll
    for (int kk = 0; kk < kQ; ++kk) {
      uint32_t qa[kMTiles][4];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        if constexpr (F::kQInRegs) {
#pragma unroll
          for (int e = 0; e < 4; ++e) qa[mt][e] = qf[mt][kk][e];
        } else {
          load_a(qa[mt], Qs, a_row, r0 + 16 * mt, 16 * kk);
        }
      }
#pragma unroll
      for (int n = 0; n < kS; n += 2) {
        uint32_t b0[2], b1[2];
        load_b_rows(b0, b1, Ks, k_row, 8 * n, 16 * kk);
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {  // one K fragment, kMTiles products
          ptx::mma_m16n8k16<T>(s[mt][n], qa[mt], b0);
          ptx::mma_m16n8k16<T>(s[mt][n + 1], qa[mt], b1);
        }
      }
    }

    // Tile classes, per m-tile: every pair allowed for all 16 rows (all_allowed) takes the path
    // without a per-element test; a tile across the diagonal or a band edge masks.
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
      const bool whole = all_allowed(first + 16 * mt, 16, k0, kBc, w, seq_len);
      const RowState row{m[mt], l[mt], lo[mt]};
      const TilePlace at{rows[mt], k0, t, w, seq_len};
      if (whole)
        online_softmax<false, kNoSoftcap>(s[mt], o[mt], row, log2_scale, cap, at);
      else
        online_softmax<true, kNoSoftcap>(s[mt], o[mt], row, log2_scale, cap, at);
    }

#pragma unroll
    for (int kk = 0; kk < kBc / 16; ++kk) {  // O += P V, P's k-step kk = S's n-blocks 2kk, 2kk + 1
      uint32_t a[kMTiles][4];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) acc_to_a<T>(a[mt], s[mt][2 * kk], s[mt][2 * kk + 1]);
#pragma unroll
      for (int d = 0; d < kO; d += 2) {
        uint32_t b0[2], b1[2];
        load_b_cols(b0, b1, Vs, a_row, 16 * kk, 8 * d);
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {  // one V fragment, kMTiles products
          ptx::mma_m16n8k16<T>(o[mt][d], a[mt], b0);
          ptx::mma_m16n8k16<T>(o[mt][d + 1], a[mt], b1);
        }
      }
    }
  }

  // out = O / l, staged through the warp's own rows of the Q tile (only this warp read them) so
  // that global stores are 16-byte vectors; lse = m + log l. Rows past the sequence end are
  // never written; a NaN l (a NaN logit) stays NaN in the output, so the test is == 0.
  // ldmatrix read each Q row in the lane that named it, not the lanes that store over it, and
  // with one key tile (or none computed) no barrier has come since: order those reads first.
  __syncwarp();
  unsigned logit_bits = 0, range_bits = 0;
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float sum = quad_sum(l[mt][r]);
      const float inv = sum == 0.0f ? 0.0f : 1.0f / sum;
#pragma unroll
      for (int d = 0; d < kO; ++d)
        *reinterpret_cast<uint32_t*>(Qs + Swizzle<kWidth>::offset(r0 + 16 * mt + g + 8 * r, 8 * d + 2 * t)) =
            pack2<T>(o[mt][d][2 * r] * inv, o[mt][d][2 * r + 1] * inv);
      if (rows[mt][r] < seq_len) {
        const float vs = kNoSoftcap ? dims.scale : 1.0f;            // score -> logit
        const float hi = m[mt][r] * vs;
        if (t == 0) lse[static_cast<int64_t>(bh) * seq_len + rows[mt][r]] = hi + logf(sum);
        add_row_stats(hi, lo[mt][r], vs, logit_bits, range_bits);
      }
    }
  __syncwarp();
  for (int i = lane; i < kRows * (kWidth / 8); i += 32) {
    const int r = i / (kWidth / 8), col = i % (kWidth / 8) * 8;
    if (first + r < seq_len && col < D)  // the padding columns (zeros) are not the output's
      ptx::store_16(out + static_cast<int64_t>(first + r) * dims.out.t + col,
                    ptx::load_16<uint4>(Qs + Swizzle<kWidth>::offset(r0 + r, col)));
  }

  publish_head_stats(logit_bits, range_bits, &block_logit, &block_range, max_logit + h, max_range + h);
}

}  // namespace

Tensor with_positive_scale(const Tensor& q, attn::Dims& dims) {
  if (dims.softcap > 0.0f || dims.scale > 0.0f) return q;
  dims.scale = -dims.scale;
  Tensor neg = empty_like(q);  // packed: unary reads a strided q through its own copy
  unary(UnaryOp::neg, q, neg);
  dims.q = attn::rows_of(neg);
  return neg;
}

void attention_mma_forward(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const attn::Dims& dims_in,
                           Tensor& out, Tensor& lse, Tensor& max_logit, Tensor& max_range) {
  constexpr const char* kOp = "attention (CUDA forward, mma)";
  attn::Dims dims = dims_in;
  const Tensor q = with_positive_scale(q_in, dims);
  // One TileStream loads K and V: they must share a row stride (views of one projection do).
  const bool same = dims.k.t == dims.v.t;
  const Tensor k = same ? k_in : k_in.clone(), v = same ? v_in : v_in.clone();
  if (!same) dims.k = attn::rows_of(k), dims.v = attn::rows_of(v);
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3);
  const int dev = q.device().index;
  visit_half(kOp, q.dtype(), [&]<typename E>() {
    with_width<16>(kOp, D, [&]<int kWidth>() {
      auto launch = [&]<bool kNoSoftcap>() {
        using F = MmaFwd<kWidth>;
        const dim3 grid(static_cast<unsigned>((T + F::kBr - 1) / F::kBr), static_cast<unsigned>(H),
                        static_cast<unsigned>(B));  // a head's query tiles side by side
        launch_threads(attention_mma_forward_kernel<E, kWidth, kNoSoftcap>, grid, F::kThreads, F::kBytes, dev,
                       static_cast<const E*>(q.raw_data()), static_cast<const E*>(k.raw_data()),
                       static_cast<const E*>(v.raw_data()), static_cast<E*>(out.raw_data()),
                       static_cast<float*>(lse.raw_data()), static_cast<unsigned*>(max_logit.raw_data()),
                       static_cast<unsigned*>(max_range.raw_data()), dims);
      };
      // The common case (no soft cap) as its own kernel: score_value.
      if (dims.softcap == 0.0f)
        launch.template operator()<true>();
      else
        launch.template operator()<false>();
    });
  });
}

}  // namespace keel::cuda
