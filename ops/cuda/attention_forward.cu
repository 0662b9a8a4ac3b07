// Flash-attention forward for every head pattern (MHSA, LS-attention, any per-head window): the
// entry point, which runs bf16 and f16 on the tensor-core kernels (attention_mma_forward.cu; on
// Hopper, when chosen, attention_sm90_forward.cu: attention_kernel() below), and the f32 kernel,
// plain FMAs (the exact path: mma.sync has no f32 inputs, and TF32 would miss f32's 1e-5 parity).
//
// A block owns one tile of 64 query rows of one (b, h) and streams the key/value tiles that its
// rows can see (attn::key_tiles_for_query_tile): never the T x T matrix, and never a tile wholly
// outside the rows' window bands or wholly in their future, so a local head of window W reads
// O(W + 64) keys per query tile and costs O(T * W) in all.
//
// Online softmax: for each row the block keeps m (the largest logit seen so far), l (the sum of
// exp(s - m) over the keys seen so far) and O (the sum of exp(s - m) v over the same keys, in f32
// shared memory). A new key tile with row maximum m' moves the reference to m_new = max(m, m'):
// l and O are multiplied by alpha = exp(m - m_new), then the tile's exp(s - m_new) and
// exp(s - m_new) v are added. After the last tile out = O / l and lse = m + log(l), which the
// backward uses to recompute the probabilities exp(s - lse) without storing them. A row that has
// seen only masked keys so far has m = -inf; exponents are then taken against 0 instead, so that
// -inf - -inf never makes a NaN (every real row ends with at least its own key).
//
// The statistics ride along: each lane keeps the largest |logit| and the smallest logit it saw, so
// max |logit| and the row range m - min (ops/attention.h) cost one max and one min per logit.
#include <atomic>
#include <cstdlib>
#include <string>

#include "ops/cuda/attention_common.cuh"
#include "ops/cuda/common.cuh"
#include "ops/cuda/attention_mma.cuh"

namespace keel::cuda {

namespace {

// -1 until set_attention_kernel chooses; then KEEL_ATTENTION decides (attention_kernel).
std::atomic<int> chosen_kernel{-1};

}  // namespace

void set_attention_kernel(AttentionKernel kernel) { chosen_kernel = static_cast<int>(kernel); }

AttentionKernel attention_kernel() {
  if (const int k = chosen_kernel; k >= 0) return static_cast<AttentionKernel>(k);
  // Read once; a value keel does not know throws, and a static whose initializer threw is tried
  // again at the next call (std::call_once may hang when its function throws).
  static const AttentionKernel from_env = [] {
    const char* v = std::getenv("KEEL_ATTENTION");
    const std::string name = v ? v : "";
    if (!name.empty() && name != "mma" && name != "sm90")
      throw ConfigError("attention", "KEEL_ATTENTION=" + name + " names no attention kernel",
                        "set it to mma (every GPU) or sm90 (the warpgroup kernels on an H100 or H200), or unset it");
    return name == "sm90" ? AttentionKernel::sm90 : AttentionKernel::mma;
  }();
  return from_env;
}

namespace {

using namespace attn;

// Tile sizes and the shared-memory layout of the f32 forward for kernel width D: 64 query rows
// against 32-key tiles (D = 128: 113 KB; D = 256: 209 KB, an H100's).
template <int D>
struct Fwd {
  static constexpr int kBr = kOwnRows, kBc = 32;
  static constexpr int ldT = ld_f32(D), ldS = ld_f32(kBc), ldP = ld_f32(kBc), ldO = ld_f32(D);
  static constexpr int kSize = 4;
  struct Layout {
    int q, k, v, s, p, o, bytes;
  };
  static constexpr Layout layout() {
    SmemCarver c;
    Layout l{};
    l.q = c.take(kBr * ldT * kSize);  // the block's queries
    l.k = c.take(kBc * ldT * kSize);  // current key tile
    l.v = c.take(kBc * ldT * kSize);  // current value tile
    l.s = c.take(kBr * ldS * 4);      // logits of the tile
    l.p = c.take(kBr * ldP * kSize);  // probabilities of the tile (the A operand of P V)
    l.o = c.take(kBr * ldO * 4);      // running output O
    l.bytes = c.bytes;
    return l;
  }
  static_assert(layout().bytes <= max_shared_bytes(D), "must fit the shared memory of a block");
};

// Shapes: q, k, v, out (B, H, T, D) f32 at dims.q, .k, .v, .out (Rows), D = dims.D <= kWidth, the
// kernel width (tile columns D..kWidth-1 are zeros: attention_tiles.h); lse (B, H, T) f32;
// max_logit, max_range (H) f32 read as bits.
// Grid (B*H, ceil(T / 64)), 128 threads: block (bh, y) owns query rows [64 qt, 64 qt + 64) of
// pair bh = b*H + h, qt counted from the end (see below). Warp w owns rows 16w..16w+15 of the tile;
// in the per-element phase, lanes 2r and 2r+1 share row r of the warp (even and odd columns).
// One function, in the order of the algorithm (Q in, then per key tile S, the online softmax and
// O += P V, then the statistics): the row state (m, l) and the warp's O tile live across the loop.
template <int kWidth>
__global__ void __launch_bounds__(kThreads)
    attention_forward_kernel(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                             float* __restrict__ out, float* __restrict__ lse, unsigned* __restrict__ max_logit,
                             unsigned* __restrict__ max_range, Dims dims) {
  using F = Fwd<kWidth>;
  constexpr typename F::Layout L = F::layout();
  constexpr int kBr = F::kBr, kBc = F::kBc, ldT = F::ldT, ldS = F::ldS, ldP = F::ldP, ldO = F::ldO;
  KEEL_DYNAMIC_SHARED(unsigned char, smem, 128);
  float* Qs = reinterpret_cast<float*>(smem + L.q);
  float* Ks = reinterpret_cast<float*>(smem + L.k);
  float* Vs = reinterpret_cast<float*>(smem + L.v);
  float* Ss = reinterpret_cast<float*>(smem + L.s);
  float* Ps = reinterpret_cast<float*>(smem + L.p);
  float* Os = reinterpret_cast<float*>(smem + L.o);
  KEEL_SHARED(unsigned, block_max);
  KEEL_SHARED(unsigned, block_range);

  const int bh = blockIdx.x, h = bh % dims.H, seq_len = dims.T, D = dims.D, w = dims.window[h];
  // Under a causal mask the last query tiles see the most keys: launching them first (blocks run
  // roughly in index order) keeps the long ones from being the tail of the grid.
  const int qt = gridDim.y - 1 - blockIdx.y, q0 = qt * kBr;
  q += dims.q.pair(bh, dims.H), k += dims.k.pair(bh, dims.H), v += dims.v.pair(bh, dims.H);
  out += dims.out.pair(bh, dims.H);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int row = warp * kRowsPerWarp + (lane >> 1), par = lane & 1;  // this lane's row in the tile
  const int i = q0 + row;                                              // ... and its query index

  load_tile<kWidth>(Qs, ldT, q + static_cast<int64_t>(q0) * dims.q.t, kBr, seq_len - q0, D, dims.q.t);
  for (int e = threadIdx.x; e < kBr * ldO; e += kThreads) Os[e] = 0.0f;
  if (threadIdx.x == 0) block_max = block_range = 0;

  float m_run = -INFINITY, l_run = 0.0f;  // row statistics; both lanes of a row hold the same values
  unsigned amax = 0;                      // largest |logit| bits this lane saw (NaN bits beat all)
  float lo = INFINITY;                    // smallest allowed logit this lane saw; the row's max is m_run
  const TileRange keys = key_tiles_for_query_tile(qt, kBr, kBc, seq_len, w);
  for (int kt = keys.begin; kt < keys.end; ++kt) {
    const int k0 = kt * kBc;
    __syncthreads();  // the previous tile's K, V are no longer read (and Q, O are in place)
    load_tile<kWidth>(Ks, ldT, k + static_cast<int64_t>(k0) * dims.k.t, kBc, seq_len - k0, D, dims.k.t);
    load_tile<kWidth>(Vs, ldT, v + static_cast<int64_t>(k0) * dims.v.t, kBc, seq_len - k0, D, dims.v.t);
    __syncthreads();

    {  // S_w = Q_w K^T: the warp's 16 rows against the tile's kBc keys
      WarpAcc<kBc> s;
      s.zero();
      s.template add_abt<kWidth>(Qs + warp * 16 * ldT, ldT, Ks, ldT);
      s.store(Ss + warp * 16 * ldS, ldS);
    }
    __syncwarp();

    // Per row: scale, cap, mask, then the online-softmax update described at the top.
    float x[kBc / 2];
    float mx = -INFINITY;
#pragma unroll
    for (int c2 = 0; c2 < kBc / 2; ++c2) {
      const int c = 2 * c2 + par;
      float s = logit(Ss[row * ldS + c], dims);
      if (allowed(i, k0 + c, w, seq_len)) {
        amax = max(amax, stat_bits(s));
        lo = fminf(lo, s);
      } else {
        s = -INFINITY;
      }
      x[c2] = s;
      mx = fmaxf(mx, s);
    }
    const float m_new = fmaxf(m_run, warp_max_pair(mx));
    const float m_use = m_new == -INFINITY ? 0.0f : m_new;
    const float alpha = attn_exp<float>(m_run - m_use);  // 0 while the row had seen nothing
    float sum = 0.0f;
#pragma unroll
    for (int c2 = 0; c2 < kBc / 2; ++c2) {
      const float p = attn_exp<float>(x[c2] - m_use);  // masked: exp(-inf) = 0
      sum += p;
      Ps[row * ldP + 2 * c2 + par] = p;
    }
    l_run = l_run * alpha + warp_sum_pair(sum);
    m_run = m_new;
    for (int d = par; d < D; d += 2) Os[row * ldO + d] *= alpha;
    __syncwarp();

    {  // O_w += P_w V
      WarpAcc<kWidth> o;
      o.load(Os + warp * 16 * ldO, ldO);
      o.template add_ab<kBc>(Ps + warp * 16 * ldP, ldP, Vs, ldT);
      o.store(Os + warp * 16 * ldO, ldO);
    }
  }
  __syncwarp();

  // out = O / l; lse = m + log l. Rows past the sequence end (l = 0) are never written; a NaN l
  // (a NaN logit) must stay NaN in the output, so the test is == 0, not > 0.
  const float inv = l_run == 0.0f ? 0.0f : 1.0f / l_run;
  for (int d = par; d < D; d += 2) Os[row * ldO + d] *= inv;
  if (par == 0 && i < seq_len) lse[static_cast<int64_t>(bh) * seq_len + i] = m_run + logf(l_run);
  __syncwarp();
  store_rows<kWidth>(out, Os + warp * 16 * ldO, ldO, q0 + warp * 16, seq_len, 1.0f, D, dims.out.t);

  // The row's logit range: m_run is already the row's max over both lanes; its min is the smaller
  // of the two lanes' minima. fmaxf and fminf skip a NaN, but a NaN logit made this lane's amax
  // NaN bits (above +inf's), and then the range is NaN too. Rows past the end count 0.
  lo = fminf(lo, __shfl_xor_sync(0xffffffffu, lo, 1));
  unsigned arange = i < seq_len ? stat_bits(m_run - lo) : 0u;
  if (amax > 0x7f800000u) arange = amax;

  publish_head_stats(amax, arange, &block_max, &block_range, max_logit + h, max_range + h);
}

}  // namespace

void attention_forward(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const std::vector<int64_t>& window,
                       double scale, double softcap, Tensor& out, Tensor& lse, Tensor& max_logit,
                       Tensor& max_range) {
  constexpr const char* kOp = "attention (CUDA forward)";
  const Tensor q = kernel_input(q_in), k = kernel_input(k_in), v = kernel_input(v_in);
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3);
  check_tensor(kOp, "q", q, q, q.dtype(), q.shape());
  check_tensor(kOp, "k", k, q, q.dtype(), q.shape());
  check_tensor(kOp, "v", v, q, q.dtype(), q.shape());
  check_tensor(kOp, "out", out, q, q.dtype(), q.shape());
  check_tensor(kOp, "lse", lse, q, DType::f32, {B, H, T});
  check_tensor(kOp, "max_logit", max_logit, q, DType::f32, {H});
  check_tensor(kOp, "max_range", max_range, q, DType::f32, {H});
  Dims dims = make_dims(kOp, q, window, scale, softcap);
  dims.q = rows_of(q), dims.k = rows_of(k), dims.v = rows_of(v), dims.out = rows_of(out);
  const int dev = q.device().index;
  KEEL_CHECK_CUDA(cudaSetDevice(dev));
  if (H > 0) {
    detail::count_copy();
    KEEL_CHECK_CUDA(cudaMemsetAsync(max_logit.raw_data(), 0, H * sizeof(float), detail::stream(dev)));
    detail::count_copy();
    KEEL_CHECK_CUDA(cudaMemsetAsync(max_range.raw_data(), 0, H * sizeof(float), detail::stream(dev)));
  }
  if (B * H * T == 0) return;  // nothing to attend; the statistics are 0, as on the CPU
  if (q.dtype() != DType::f32) {
    if (!attention_sm90_forward(q, k, v, dims, out, lse, max_logit, max_range))
      attention_mma_forward(q, k, v, dims, out, lse, max_logit, max_range);  // DTypeError but bf16, f16
    return;
  }
  with_width<32>(kOp, D, [&]<int HD>() {
    const dim3 grid(static_cast<unsigned>(B * H), static_cast<unsigned>((T + kOwnRows - 1) / kOwnRows));
    launch(attention_forward_kernel<HD>, grid, Fwd<HD>::layout().bytes, dev, static_cast<const float*>(q.raw_data()),
           static_cast<const float*>(k.raw_data()), static_cast<const float*>(v.raw_data()),
           static_cast<float*>(out.raw_data()), static_cast<float*>(lse.raw_data()),
           static_cast<unsigned*>(max_logit.raw_data()), static_cast<unsigned*>(max_range.raw_data()), dims);
  });
}

}  // namespace keel::cuda
