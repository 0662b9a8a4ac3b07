// Flash-attention forward, FlashAttention-2's way, on the PTX tensor-core instructions (bf16 and
// f16; attention_mma.cuh explains the register layout). Every head pattern: a head of window W
// costs O(T * W).
//
// A block owns 128 query rows of one (b, h): 4 warps of 32 rows (two 16-row m-tiles each) up to
// width 128 in the plain-logit kernel, else 8 warps of 16 rows (MmaFwd). Its Q tile is loaded once
// into shared memory (and into registers as mma A fragments where they fit, see MmaFwd). It then
// streams the 64-key tiles (32 at width 256) its rows can see (attn::key_tiles_for_query_tile), K
// and V double-buffered with cp.async: tile j + 1 is in flight while tile j is computed, one
// __syncthreads per tile. Each warp skips, without computing, the tiles that hold no allowed pair
// for its own rows (a local head's warp touches 2 of 64 keys; the causal diagonal's upper half is
// skipped too). The addresses of a thread's copies and of a lane's ldmatrix rows are the same in
// every tile, so they are computed once, before the loop (TileStream, LaneRow).
//
// Per tile, warp and m-tile, all in registers: S = Q K^T (16 x 64, f32), then the online softmax
// update (online_softmax: row max m across the row's quad, O and the lane's share of l rescaled
// by 2^(c (m_old - m_new)), P = 2^(c S - c m) converted to bf16/f16 A fragments), then O += P V.
// attention_forward.cu describes the online softmax and why -inf rows take 0 as reference.
// Three choices keep the per-element work at five instructions, FlashAttention-2's max, FFMA,
// exp2 and add plus the statistics' min:
// - tile classes: a tile where every pair is allowed for all 16 rows (most tiles of a long
//   sequence) runs a path without a per-element test; only tiles across the diagonal or a band
//   edge test each pair;
// - kPlain, the kernel for the usual logit (no soft cap): it works on raw dot products and folds
//   scale * log2 e into the exponent's one FFMA (a negative scale runs it on -q:
//   with_positive_scale); soft-capped logits get their own kernel, which computes each logit
//   first, with a branch-free tanh (SoftCap);
// - exp2 (ex2.approx, one instruction) instead of exp, which costs a multiply more.
//
// Statistics, per head, over allowed pairs (ops/attention.h): max |logit| and max_range, the
// largest max - min of a row's logits. Each lane keeps its own minimum mn_l next to the row's
// max m (the same in the 4 lanes of a row), and both are a max over the row's lanes:
// max(|m|, |mn_l|) and m - mn_l reach the row's max |logit| and its range in the lane that holds
// the minimum, so no shuffle is needed. NaN-propagating: the minimum is min.NaN, so a lane that
// saw a NaN logit holds a NaN minimum and reports NaN, at no extra instruction.
#include "core/factory.h"
#include "ops/cuda/attention_mma.cuh"
#include "ops/cuda/arith.h"

namespace keel::cuda {

namespace {

using namespace attn;
using namespace attn::mma;

// Tile sizes and shared memory (elements of T) for kernel width Dk: Q (kBr x Dk), then K and V of
// two stages (kBc x Dk each). A block owns kBr = 128 query rows. Up to Dk = 128 a warp owns 32
// of them, two m-tiles of 16 (kM), as in FlashAttention-2: every K and V fragment it reads from
// shared memory feeds two mma instead of one, and 4 warps of at most 255 registers let two
// blocks share a multiprocessor (bf16 Dk = 128: 96 KB of shared memory each). O then takes
// kM * Dk / 2 registers a thread (128 at Dk = 128), so Q's fragments are read from shared memory
// at every tile unless they fit beside it (Dk <= 64). Dk = 256 keeps warps of 16 rows (O alone
// is 128 registers) and halves the key tile (32 keys: 128 KB), as FlashAttention-2 does for its
// 256-wide head.
template <int Dk, bool kPlain>
struct MmaFwd {
  static constexpr int kM = Dk <= 128 ? 2 : 1, kWarps = 8 / kM, kThreads = 32 * kWarps;
  static constexpr int kBr = 16 * kM * kWarps, kBc = Dk <= 128 ? 64 : 32;
  static constexpr bool kQInRegs = Dk <= 64;
  static constexpr int kK = kBr * Dk, kV = kK + 2 * kBc * Dk, kStage = kBc * Dk;  // offsets; a stage adds kStage
  static constexpr int kBytes = 2 * (kBr * Dk + 4 * kBc * Dk);
  static_assert(kBytes <= 163 * 1024, "must fit an A100's shared memory");
};

// The value a lane keeps per score, in the units the online softmax works in: the raw dot
// product when the logit is just scale * dot with scale > 0 (kPlain: the max of dots is the max
// of logits, and scale * log2 e folds into the exponent's one FFMA), else the soft-capped logit.
template <bool kPlain>
__device__ __forceinline__ float score_value(float dot, const SoftCap& cap) {
  if constexpr (kPlain) return dot;
  else return cap.cap * cap.tanh_of(dot);
}

// One key tile's online-softmax update for the warp's 16 rows (lane (g, t): rows[0], rows[1]),
// in registers. s (16 x kBc, the mma C layout: n-block n holds keys k0 + 8n ..) comes in as
// Q K^T and leaves as P = 2^(c v - c m), masked pairs 0; m, the row max of v (the same in the 4
// lanes of a row); l, this lane's share of the row sum; O and l rescaled by 2^(c (m_old -
// m_new)); mn, this lane's smallest allowed v, NaN once a NaN went by (min_nan: the statistics'
// NaN costs no extra instruction). kMasked tests each pair (allowed()); the other path, for tiles
// where every pair is allowed, has no per-element test or branch.
template <bool kMasked, bool kPlain, int kS, int kO>
__device__ __forceinline__ void online_softmax(float (&s)[kS][4], float (&o)[kO][4], float (&m)[2], float (&l)[2],
                                               float (&mn)[2], float c, const SoftCap& cap, const int (&rows)[2],
                                               int k0, int t, int w, int T_len) {
  float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int n = 0; n < kS; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = e >> 1;
      float x = score_value<kPlain>(s[n][e], cap);
      if constexpr (kMasked) {
        const bool ok = allowed(rows[r], k0 + 8 * n + 2 * t + (e & 1), w, T_len);
        mn[r] = ptx::min_nan(mn[r], ok ? x : INFINITY);
        x = ok ? x : -INFINITY;
      } else {
        mn[r] = ptx::min_nan(mn[r], x);
      }
      s[n][e] = x;
      mx[r] = fmaxf(mx[r], x);  // drops a NaN: m stays a number, P of a NaN is NaN
    }
  float neg_ref[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float m_new = fmaxf(m[r], quad_max(mx[r]));
    const float ref = m_new == -INFINITY ? 0.0f : m_new;  // nothing seen yet: exp(-inf - 0) = 0
    const float alpha = ptx::ex2(c * (m[r] - ref));       // 0 while the row had seen nothing
    m[r] = m_new;
    neg_ref[r] = -c * ref;
    l[r] *= alpha;
#pragma unroll
    for (int d = 0; d < kO; ++d) o[d][2 * r] *= alpha, o[d][2 * r + 1] *= alpha;
  }
#pragma unroll
  for (int n = 0; n < kS; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[n][e] = ptx::ex2(fmaf(c, s[n][e], neg_ref[e >> 1]));  // masked: 2^-inf = 0
      l[e >> 1] += s[n][e];
    }
}

// Shapes: q, k, v, out (B, H, T, D) in T at dims.q, .k, .v, .out (Rows; k and v with one row
// stride), D = dims.D <= Dk, the kernel width (tile
// columns D..Dk-1 are zeros: attention_tiles.h); lse (B, H, T) f32; max_logit, max_range (H) f32
// read as bits, zeroed before the launch. Grid (ceil(T / 128), H, B), kThreads threads: block
// (i, h, b) owns query rows [128 qt, 128 qt + 128) of pair bh = b*H + h, qt counted from the end
// (the longest query tiles start first). A head's query tiles run side by
// side (FlashAttention-2's grid), so the blocks resident at once read the K and V of a few heads,
// which stay in L2, rather than those of ~132 heads. Warp w owns rows 16 kM w .. 16 kM w + 16 kM - 1, m-tile
// mt the 16 from 16 (kM w + mt); lane (g, t) holds rows g and g + 8 of each.
template <typename T, int Dk, bool kPlain>
__global__ void __launch_bounds__(MmaFwd<Dk, kPlain>::kThreads, 1)
    attention_mma_forward_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                 T* __restrict__ out, float* __restrict__ lse, unsigned* __restrict__ max_logit,
                                 unsigned* __restrict__ max_range, Dims dims) {
  using F = MmaFwd<Dk, kPlain>;
  constexpr int kBr = F::kBr, kBc = F::kBc, kThreads = F::kThreads, kM = F::kM, kRows = 16 * kM;
  constexpr int kS = kBc / 8, kO = Dk / 8, kQ = Dk / 16;  // n-blocks of S and O, k-steps of Q K^T
  KEEL_DYNAMIC_SHARED(unsigned char, smem, 128);
  T* const Qs = reinterpret_cast<T*>(smem);
  __shared__ unsigned block_logit, block_range;

  const int h = blockIdx.y, bh = blockIdx.z * dims.H + h, T_len = dims.T, D = dims.D, w = dims.window[h];
  const int qt = gridDim.x - 1 - blockIdx.x, q0 = qt * kBr;
  q += dims.q.pair(bh, dims.H), k += dims.k.pair(bh, dims.H), v += dims.v.pair(bh, dims.H);
  out += dims.out.pair(bh, dims.H);
  const int ld = dims.k.t;  // K's and V's row stride
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int r0 = kRows * warp, first = q0 + r0;  // the warp's first row: in the tile, in the sequence
  int rows[kM][2];
#pragma unroll
  for (int mt = 0; mt < kM; ++mt) rows[mt][0] = first + 16 * mt + g, rows[mt][1] = first + 16 * mt + g + 8;
  const TileRange keys = key_tiles_for_query_tile(qt, kBr, kBc, T_len, w);
  const TileRange mine =
      first < T_len ? key_tiles_for_query_tile(first / kRows, kRows, kBc, T_len, w) : TileRange{0, 0};

  const TileStream<T, Dk, kBc, kThreads> kv_copy(D, ld);
  auto load_kv = [&](int kt, int stage) {
    const int64_t k0 = static_cast<int64_t>(kt) * kBc;
    kv_copy.load(Qs + F::kK + stage * F::kStage, k + k0 * ld, T_len - static_cast<int>(k0), ld);
    kv_copy.load(Qs + F::kV + stage * F::kStage, v + k0 * ld, T_len - static_cast<int>(k0), ld);
  };
  // The lanes' ldmatrix rows (attention_mma.cuh): Q's A fragments and V's B columns, K's B rows.
  const auto a_row = LaneRow<Dk>::a_rows(lane), k_row = LaneRow<Dk>::b_rows(lane);
  if (threadIdx.x == 0) block_logit = block_range = 0;
  load_tile_async<T, Dk, kBr, kThreads>(Qs, q + static_cast<int64_t>(q0) * dims.q.t, T_len - q0, D, dims.q.t);
  load_kv(keys.begin, 0);
  ptx::cp_async_commit();

  uint32_t qf[F::kQInRegs ? kM : 1][F::kQInRegs ? kQ : 1][4];  // Q's A fragments, when held in registers
  float o[kM][kO][4] = {};
  float m[kM][2], l[kM][2] = {}, mn[kM][2];  // l: this lane's share of the row sum
#pragma unroll
  for (int mt = 0; mt < kM; ++mt)
    m[mt][0] = m[mt][1] = -INFINITY, mn[mt][0] = mn[mt][1] = INFINITY;  // mn: this lane's smallest allowed value
  const float c = (kPlain ? dims.scale : 1.0f) * kLog2e;  // v -> log2 units of the softmax
  const SoftCap cap(dims);
  for (int kt = keys.begin; kt < keys.end; ++kt) {
    const int stage = (kt - keys.begin) & 1, k0 = kt * kBc;
    // Tile kt's copies are the only group in flight (kt + 1's are issued only after the barrier,
    // into the stage tile kt - 1 used), hence wait_group 0.
    ptx::cp_async_wait<0>();
    __syncthreads();  // tile kt is in for every thread, and every warp is done with tile kt - 1
    if constexpr (F::kQInRegs)
      if (kt == keys.begin)
        for (int mt = 0; mt < kM; ++mt)
          for (int kk = 0; kk < kQ; ++kk) load_a(qf[mt][kk], Qs, a_row, r0 + 16 * mt, 16 * kk);
    if (kt + 1 < keys.end) {
      load_kv(kt + 1, stage ^ 1);
      ptx::cp_async_commit();
    }
    if (kt < mine.begin || kt >= mine.end) continue;  // no allowed pair for this warp's rows
    const T* Ks = Qs + F::kK + stage * F::kStage;
    const T* Vs = Qs + F::kV + stage * F::kStage;

    float s[kM][kS][4] = {};  // S = Q K^T: n-block n holds keys k0 + 8n ..
#pragma unroll
    for (int kk = 0; kk < kQ; ++kk) {
      uint32_t qa[kM][4];
#pragma unroll
      for (int mt = 0; mt < kM; ++mt) {
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
        for (int mt = 0; mt < kM; ++mt) {  // one K fragment, kM products
          ptx::mma_m16n8k16<T>(s[mt][n], qa[mt], b0);
          ptx::mma_m16n8k16<T>(s[mt][n + 1], qa[mt], b1);
        }
      }
    }

    // Tile classes, per m-tile: every pair allowed for all 16 rows (most tiles of a long
    // sequence) takes the path without a per-element test; a tile across the diagonal or a band
    // edge masks. Whole: the rows are inside the sequence, the tile's last key is at or before the
    // first row, and its first key is inside the last row's band (bands slide right with the row).
#pragma unroll
    for (int mt = 0; mt < kM; ++mt) {
      const int top = first + 16 * mt;
      const bool whole = top + 15 < T_len && k0 + kBc - 1 <= top && k0 >= band_start(top + 15, w);
      if (whole)
        online_softmax<false, kPlain>(s[mt], o[mt], m[mt], l[mt], mn[mt], c, cap, rows[mt], k0, t, w, T_len);
      else
        online_softmax<true, kPlain>(s[mt], o[mt], m[mt], l[mt], mn[mt], c, cap, rows[mt], k0, t, w, T_len);
    }

#pragma unroll
    for (int kk = 0; kk < kBc / 16; ++kk) {  // O += P V, P's k-step kk = S's n-blocks 2kk, 2kk + 1
      uint32_t a[kM][4];
#pragma unroll
      for (int mt = 0; mt < kM; ++mt) acc_to_a<T>(a[mt], s[mt][2 * kk], s[mt][2 * kk + 1]);
#pragma unroll
      for (int d = 0; d < kO; d += 2) {
        uint32_t b0[2], b1[2];
        load_b_cols(b0, b1, Vs, a_row, 16 * kk, 8 * d);
#pragma unroll
        for (int mt = 0; mt < kM; ++mt) {  // one V fragment, kM products
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
  for (int mt = 0; mt < kM; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float sum = quad_sum(l[mt][r]);
      const float inv = sum == 0.0f ? 0.0f : 1.0f / sum;
#pragma unroll
      for (int d = 0; d < kO; ++d)
        *reinterpret_cast<uint32_t*>(Qs + Swizzle<Dk>::offset(r0 + 16 * mt + g + 8 * r, 8 * d + 2 * t)) =
            pack2<T>(o[mt][d][2 * r] * inv, o[mt][d][2 * r + 1] * inv);
      if (rows[mt][r] < T_len) {
        const float vs = kPlain ? dims.scale : 1.0f;          // v -> logit
        const float hi = m[mt][r] * vs, lo = mn[mt][r] * vs;  // lo: NaN if a NaN logit went by this lane
        if (t == 0) lse[static_cast<int64_t>(bh) * T_len + rows[mt][r]] = hi + logf(sum);
        const bool nan = lo != lo, seen = mn[mt][r] != INFINITY;  // seen: this lane held an allowed key
        const float amax = nan ? NAN : seen ? fmaxf(fabsf(hi), fabsf(lo)) : fabsf(hi);
        logit_bits = max(logit_bits, stat_bits(amax));
        if (seen) range_bits = max(range_bits, stat_bits(nan ? NAN : hi - lo));
      }
    }
  __syncwarp();
  for (int i = lane; i < kRows * (Dk / 8); i += 32) {
    const int r = i / (Dk / 8), col = i % (Dk / 8) * 8;
    if (first + r < T_len && col < D)  // the padding columns (zeros) are not the output's
      *reinterpret_cast<uint4*>(out + static_cast<int64_t>(first + r) * dims.out.t + col) =
          *reinterpret_cast<const uint4*>(Qs + Swizzle<Dk>::offset(r0 + r, col));
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
    with_width<16>(kOp, D, [&]<int HD>() {
      auto launch = [&]<bool kPlain>() {
        using F = MmaFwd<HD, kPlain>;
        const dim3 grid(static_cast<unsigned>((T + F::kBr - 1) / F::kBr), static_cast<unsigned>(H),
                        static_cast<unsigned>(B));  // a head's query tiles side by side
        launch_threads(attention_mma_forward_kernel<E, HD, kPlain>, grid, F::kThreads, F::kBytes, dev,
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
