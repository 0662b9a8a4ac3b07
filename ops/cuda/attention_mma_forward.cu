// Flash-attention forward, FlashAttention-2's way, on the PTX tensor-core instructions (bf16 and
// f16; attention_mma.cuh explains the register layout). Every head pattern: a head of window W
// costs O(T * W).
//
// A block owns 128 query rows of one (b, h): 8 warps of 16 rows. Its Q tile is loaded once and kept
// in registers as mma A fragments (at width 256, see MmaFwd). It then streams the 64-key tiles (32
// at width 256) its rows can see (attn::key_tiles_for_query_tile), K and V double-buffered with
// cp.async: tile j + 1 is in flight while tile j is computed, one __syncthreads per tile. Each warp
// skips, without computing, the tiles that hold no allowed pair for its own 16 rows (a local head's
// warp touches 2 of 64 keys; the causal diagonal's upper half is skipped too), and masks only the
// tiles that cross a band edge or the diagonal.
//
// Per tile and warp, all in registers: S = Q K^T (16 x 64, f32), scale and soft-cap, mask, the
// online softmax update (row max m across the row's quad, O and the lane's share of l rescaled
// by exp(m_old - m_new)), P = exp(S - m) converted to bf16/f16 A fragments, O += P V.
// attention_forward.cu describes the online softmax and why -inf rows take 0 as reference.
//
// Statistics, per head, over allowed pairs (ops/attention.h): max |logit| and max_range, the
// largest max - min of a row's logits. Each lane keeps its own minimum mn_l next to the row's
// max m (the same in the 4 lanes of a row), and both are a max over the row's lanes:
// max(|m|, |mn_l|) and m - mn_l reach the row's max |logit| and its range in the lane that holds
// the minimum, so no shuffle is needed. NaN-propagating: a lane that saw a NaN logit reports NaN.
#include "ops/cuda/attention_mma.cuh"

namespace keel::cuda {

namespace {

using namespace attn;
using namespace attn::mma;

// Tile sizes and shared memory (elements of T) for kernel width Dk: Q (kBr x Dk), then K and V of
// two stages (kBc x Dk each). bf16 Dk = 128: 96 KB, two blocks per H100 multiprocessor; Dk = 64:
// 48 KB. Dk = 256 halves the key tile (32 keys: 128 KB) and reads Q's fragments from shared memory
// at every tile instead of holding them: 64 more registers next to O's 128 would spill, as
// FlashAttention-2 finds for its 256-wide head (its Q is not kept in registers there either).
template <int Dk>
struct MmaFwd {
  static constexpr int kWarps = 8, kThreads = 32 * kWarps, kBr = 16 * kWarps, kBc = Dk <= 128 ? 64 : 32;
  static constexpr bool kQInRegs = Dk <= 128;
  static constexpr int kK = kBr * Dk, kV = kK + 2 * kBc * Dk, kStage = kBc * Dk;  // offsets; a stage adds kStage
  static constexpr int kBytes = 2 * (kBr * Dk + 4 * kBc * Dk);
  static_assert(kBytes <= 163 * 1024, "must fit an A100's shared memory");
};

// Shapes: q, k, v, out (B, H, T, D) in T (bf16 or f16), D = dims.D <= Dk, the kernel width (tile
// columns D..Dk-1 are zeros: attention_tiles.h); lse (B, H, T) f32; max_logit, max_range
// (H) f32 read as bits, zeroed before the launch. Grid (B*H, ceil(T / 128)), 256 threads: block (bh, y) owns
// query rows [128 qt, 128 qt + 128) of pair bh = b*H + h, qt counted from the end (the longest
// query tiles start first). Warp w owns rows 16w..16w+15; lane (g, t) holds rows g and g + 8.
template <typename T, int Dk>
__global__ void __launch_bounds__(MmaFwd<Dk>::kThreads)
    attention_mma_forward_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                 T* __restrict__ out, float* __restrict__ lse, unsigned* __restrict__ max_logit,
                                 unsigned* __restrict__ max_range, Dims dims) {
  using F = MmaFwd<Dk>;
  constexpr int kBr = F::kBr, kBc = F::kBc, kThreads = F::kThreads;
  constexpr int kS = kBc / 8, kO = Dk / 8, kQ = Dk / 16;  // n-blocks of S and O, k-steps of Q K^T
  KEEL_DYNAMIC_SHARED(unsigned char, smem, 128);
  T* const Qs = reinterpret_cast<T*>(smem);
  __shared__ unsigned block_logit, block_range;

  const int bh = blockIdx.x, h = bh % dims.H, T_len = dims.T, D = dims.D, w = dims.window[h];
  const int qt = gridDim.y - 1 - blockIdx.y, q0 = qt * kBr;
  const int64_t base = static_cast<int64_t>(bh) * T_len * D;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int r0 = 16 * warp, first = q0 + r0;  // the warp's first row: in the tile, in the sequence
  const int rows[2] = {first + g, first + g + 8};
  const bool has_rows = first < T_len;
  const TileRange keys = key_tiles_for_query_tile(qt, kBr, kBc, T_len, w);
  const TileRange mine = has_rows ? key_tiles_for_query_tile(first / 16, 16, kBc, T_len, w) : TileRange{0, 0};

  auto load_kv = [&](int kt, int stage) {
    const int k0 = kt * kBc;
    load_tile_async<T, Dk, kBc, kThreads>(Qs + F::kK + stage * F::kStage, k + base + static_cast<int64_t>(k0) * D,
                                          T_len - k0, D);
    load_tile_async<T, Dk, kBc, kThreads>(Qs + F::kV + stage * F::kStage, v + base + static_cast<int64_t>(k0) * D,
                                          T_len - k0, D);
  };
  if (threadIdx.x == 0) block_logit = block_range = 0;
  load_tile_async<T, Dk, kBr, kThreads>(Qs, q + base + static_cast<int64_t>(q0) * D, T_len - q0, D);
  load_kv(keys.begin, 0);
  ptx::cp_async_commit();

  uint32_t qf[F::kQInRegs ? kQ : 1][4];  // Q's A fragments, when held in registers
  float o[kO][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // l: this lane's share of the row sum
  float mn[2] = {INFINITY, INFINITY};                        // this lane's smallest allowed logit
  bool nan = false;
  for (int kt = keys.begin; kt < keys.end; ++kt) {
    const int stage = (kt - keys.begin) & 1, k0 = kt * kBc;
    ptx::cp_async_wait<0>();
    __syncthreads();  // tile kt is in for every thread, and every warp is done with tile kt - 1
    if (F::kQInRegs && kt == keys.begin)
      for (int kk = 0; kk < kQ; ++kk) load_a<Dk>(qf[kk], Qs, r0, 16 * kk, lane);
    if (kt + 1 < keys.end) {
      load_kv(kt + 1, stage ^ 1);
      ptx::cp_async_commit();
    }
    if (kt < mine.begin || kt >= mine.end) continue;  // no allowed pair for this warp's rows
    const T* Ks = Qs + F::kK + stage * F::kStage;
    const T* Vs = Qs + F::kV + stage * F::kStage;

    float s[kS][4] = {};  // S = Q K^T: n-block n holds keys k0 + 8n ..
#pragma unroll
    for (int kk = 0; kk < kQ; ++kk) {
      uint32_t qa[4];
      if constexpr (F::kQInRegs) {
#pragma unroll
        for (int e = 0; e < 4; ++e) qa[e] = qf[kk][e];
      } else {
        load_a<Dk>(qa, Qs, r0, 16 * kk, lane);
      }
#pragma unroll
      for (int n = 0; n < kS; n += 2) {
        uint32_t b0[2], b1[2];
        load_b_rows<Dk>(b0, b1, Ks, 8 * n, 16 * kk, lane);
        ptx::mma_m16n8k16<T>(s[n], qa, b0);
        ptx::mma_m16n8k16<T>(s[n + 1], qa, b1);
      }
    }

    // Every pair allowed for all 16 rows: no mask (most tiles of a long sequence).
    const bool whole = first + 15 < T_len && k0 + kBc - 1 <= first && k0 >= band_start(first + 15, w);
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < kS; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1, j = k0 + 8 * n + 2 * t + (e & 1);
        float x = logit(s[n][e], dims);
        if (whole || allowed(rows[r], j, w, T_len)) {
          mn[r] = fminf(mn[r], x);
          nan |= x != x;
        } else {
          x = -INFINITY;
        }
        s[n][e] = x;
        mx[r] = fmaxf(mx[r], x);
      }
    float ref[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float m_new = fmaxf(m[r], quad_max(mx[r]));
      ref[r] = m_new == -INFINITY ? 0.0f : m_new;
      const float alpha = attn_exp<T>(m[r] - ref[r]);  // 0 while the row had seen nothing
      m[r] = m_new;
      l[r] *= alpha;
#pragma unroll
      for (int d = 0; d < kO; ++d) o[d][2 * r] *= alpha, o[d][2 * r + 1] *= alpha;
    }
#pragma unroll
    for (int n = 0; n < kS; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[n][e] = attn_exp<T>(s[n][e] - ref[e >> 1]);  // masked: exp(-inf) = 0
        l[e >> 1] += s[n][e];
      }

#pragma unroll
    for (int kk = 0; kk < kBc / 16; ++kk) {  // O += P V, P's k-step kk = S's n-blocks 2kk, 2kk + 1
      uint32_t a[4];
      acc_to_a<T>(a, s[2 * kk], s[2 * kk + 1]);
#pragma unroll
      for (int d = 0; d < kO; d += 2) {
        uint32_t b0[2], b1[2];
        load_b_cols<Dk>(b0, b1, Vs, 16 * kk, 8 * d, lane);
        ptx::mma_m16n8k16<T>(o[d], a, b0);
        ptx::mma_m16n8k16<T>(o[d + 1], a, b1);
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
  for (int r = 0; r < 2; ++r) {
    l[r] = quad_sum(l[r]);
    const float inv = l[r] == 0.0f ? 0.0f : 1.0f / l[r];
#pragma unroll
    for (int d = 0; d < kO; ++d)
      *reinterpret_cast<uint32_t*>(Qs + Swizzle<Dk>::offset(r0 + g + 8 * r, 8 * d + 2 * t)) =
          pack2<T>(o[d][2 * r] * inv, o[d][2 * r + 1] * inv);
    if (rows[r] < T_len) {
      if (t == 0) lse[static_cast<int64_t>(bh) * T_len + rows[r]] = m[r] + logf(l[r]);
      const bool seen = mn[r] != INFINITY;  // this lane held an allowed key of the row
      const float amax = nan ? NAN : seen ? fmaxf(fabsf(m[r]), fabsf(mn[r])) : fabsf(m[r]);
      logit_bits = max(logit_bits, stat_bits(amax));
      if (nan || seen) range_bits = max(range_bits, stat_bits(nan ? NAN : m[r] - mn[r]));
    }
  }
  __syncwarp();
  for (int c = lane; c < 16 * (Dk / 8); c += 32) {
    const int r = c / (Dk / 8), col = c % (Dk / 8) * 8;
    if (first + r < T_len && col < D)  // the padding columns (zeros) are not the output's
      *reinterpret_cast<uint4*>(out + base + static_cast<int64_t>(first + r) * D + col) =
          *reinterpret_cast<const uint4*>(Qs + Swizzle<Dk>::offset(r0 + r, col));
  }

  publish_head_stats(logit_bits, range_bits, &block_logit, &block_range, max_logit + h, max_range + h);
}

}  // namespace

void attention_mma_forward(const Tensor& q, const Tensor& k, const Tensor& v, const attn::Dims& dims, Tensor& out,
                           Tensor& lse, Tensor& max_logit, Tensor& max_range) {
  constexpr const char* kOp = "attention (CUDA forward, mma)";
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3);
  const int dev = q.device().index;
  visit_half(kOp, q.dtype(), [&]<typename E>() {
    with_width<16>(kOp, D, [&]<int HD>() {
      using F = MmaFwd<HD>;
      const dim3 grid(static_cast<unsigned>(B * H), static_cast<unsigned>((T + F::kBr - 1) / F::kBr));
      launch_threads(attention_mma_forward_kernel<E, HD>, grid, F::kThreads, F::kBytes, dev,
                     static_cast<const E*>(q.raw_data()), static_cast<const E*>(k.raw_data()),
                     static_cast<const E*>(v.raw_data()), static_cast<E*>(out.raw_data()),
                     static_cast<float*>(lse.raw_data()), static_cast<unsigned*>(max_logit.raw_data()),
                     static_cast<unsigned*>(max_range.raw_data()), dims);
    });
  });
}

}  // namespace keel::cuda
