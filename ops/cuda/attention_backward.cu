// Flash-attention backward (FlashAttention-2 scheme), every head pattern: the entry point, which
// computes D_i and then runs bf16 and f16 on the tensor-core kernel (attention_mma_backward.cu;
// on Hopper, when chosen, attention_sm90_backward.cu, which computes D_i itself), and the f32
// kernels, plain FMAs (the exact path, as in attention_forward.cu).
//
// With S the (scaled, capped) logits, P = exp(S - lse) recomputed from q, k and the forward's lse:
//   dV = P^T dO,  dP = dO V^T,  dS = P * (dP - D_i) with D_i = rowsum(dO_i * O_i),
//   dS0 = dS * (1 - (S / c)^2) under soft-capping c (the derivative of c tanh(s / c)),
//   dQ = scale dS0 K,  dK = scale dS0^T Q.
// D_i equals rowsum(P * dP) but needs only the saved output, so it is one small kernel first.
//
// Then, for f32, two kernels, neither with atomics, so results are deterministic:
//  - dK/dV: a block owns a tile of 64 keys and streams the query tiles that can see it
//    (attn::query_tiles_for_key_tile: for a local head only queries within the window after the
//    keys), accumulating its dK, dV rows in registers;
//  - dQ: a block owns a tile of 64 queries and streams the key tiles its rows can see, like the
//    forward, accumulating dQ in registers.
// dQ recomputes S and dP, which the dK/dV kernel also computes: two more products than an atomic
// dQ, bought with readability and run-to-run identical gradients.
#include "core/factory.h"
#include "ops/cuda/attention.h"
#include "ops/cuda/attention_common.cuh"
#include "ops/cuda/attention_mma.cuh"
#include "ops/cuda/common.cuh"

namespace keel::cuda {

namespace {

using namespace attn;

// Shared-memory layout of both kernels (f32): 64 own rows (4 warps x 16) against streamed tiles
// of 32 rows, for kernel width D (D = 128: 125 KB; D = 256: 218 KB, an H100's).
//   own, own2:   the block's own rows (K, V for dK/dV; Q, dO for dQ)
//   str, str2:   the streamed tile (Q, dO for dK/dV; K, V for dQ)
//   stat, stat2: lse and D_i of the query rows involved (streamed or own)
//   s, dp:       S and dP of the warp's 16 rows against the streamed tile
//   p:           P or dS of the same (the A operand of the next product)
// The final accumulators are staged through the first bytes (`stage`) once every warp is done
// with the tiles there.
template <int D>
struct Bwd {
  static constexpr int kOwn = kOwnRows, kStr = 32;
  static constexpr int ldT = ld_f32(D), ldS = ld_f32(kStr), ldP = ld_f32(kStr), ldO = ld_f32(D);
  static constexpr int kSize = 4;
  struct Layout {
    int own, own2, str, str2, stat, stat2, s, dp, p, bytes;
  };
  static constexpr Layout layout() {
    SmemCarver c;
    Layout l{};
    l.own = c.take(kOwn * ldT * kSize);
    l.own2 = c.take(kOwn * ldT * kSize);
    l.str = c.take(kStr * ldT * kSize);
    l.str2 = c.take(kStr * ldT * kSize);
    l.stat = c.take(kOwn * 4);
    l.stat2 = c.take(kOwn * 4);
    l.s = c.take(kOwn * ldS * 4);
    l.dp = c.take(kOwn * ldS * 4);
    l.p = c.take(kOwn * ldP * kSize);
    l.bytes = c.bytes;
    return l;
  }
  static_assert(layout().bytes <= max_shared_bytes(D), "must fit the shared memory of a block");
  static_assert(kOwn * ldO * 4 <= layout().s, "the f32 staging area must fit in the tile regions");
};

// Shapes: out, dout (B, H, T, D) in T at dims.out, dims.dout -> dvec (B, H, T) f32,
// D_i = sum_d dout[i, d] * out[i, d]. One warp per row (B*H*T rows), lanes over d.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    attention_dvec_kernel(const T* __restrict__ out, const T* __restrict__ dout, float* __restrict__ dvec, int64_t rows,
                          Dims dims) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (r >= rows) return;  // whole warps leave together: the shuffles below see full warps
  const int lane = threadIdx.x & 31;
  const int bh = static_cast<int>(r / dims.T), i = static_cast<int>(r % dims.T);
  const float s = row_dvec(out + dims.out.pair(bh, dims.H) + static_cast<int64_t>(i) * dims.out.t,
                           dout + dims.dout.pair(bh, dims.H) + static_cast<int64_t>(i) * dims.dout.t, dims.D, lane);
  if (lane == 0) dvec[r] = s;
}

// Shapes: q, k, v, dout, dk, dv (B, H, T, D) f32, D = dims.D <= kWidth, the kernel width (tile
// columns D..kWidth-1 are zeros: attention_tiles.h); lse, dvec (B, H, T) f32.
// Grid (B*H, ceil(T / 64)), 128 threads: block (bh, kt) owns keys [64 kt, 64 kt + 64) of pair bh
// and streams 32-query tiles. Warp w owns keys 16w..16w+15 and computes the transposed products
// (keys x queries): S^T = K_w Q^T, dP^T = V_w dO^T, then dV_w += P^T dO, dK_w += dS^T Q.
// In the per-element phase lanes 2r and 2r+1 share key row r of the warp.
// One function, in the order of the five products: dK and dV accumulate across the query loop.
template <int kWidth>
__global__ void __launch_bounds__(kThreads)
    attention_dkdv_kernel(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                          const float* __restrict__ dout, const float* __restrict__ lse,
                          const float* __restrict__ dvec, float* __restrict__ dk, float* __restrict__ dv, Dims dims) {
  using Bw = Bwd<kWidth>;
  constexpr typename Bw::Layout L = Bw::layout();
  constexpr int kOwn = Bw::kOwn, kStr = Bw::kStr, ldT = Bw::ldT, ldS = Bw::ldS, ldP = Bw::ldP, ldO = Bw::ldO;
  KEEL_DYNAMIC_SHARED(unsigned char, smem, 128);
  float* Ks = reinterpret_cast<float*>(smem + L.own);
  float* Vs = reinterpret_cast<float*>(smem + L.own2);
  float* Qs = reinterpret_cast<float*>(smem + L.str);
  float* dOs = reinterpret_cast<float*>(smem + L.str2);
  float* lse_s = reinterpret_cast<float*>(smem + L.stat);
  float* dvec_s = reinterpret_cast<float*>(smem + L.stat2);
  float* Ss = reinterpret_cast<float*>(smem + L.s);
  float* dPs = reinterpret_cast<float*>(smem + L.dp);
  float* Ps = reinterpret_cast<float*>(smem + L.p);

  const int bh = blockIdx.x, h = bh % dims.H, seq_len = dims.T, D = dims.D, w = dims.window[h];
  const int kt = blockIdx.y, k0 = kt * kOwn;  // early key tiles are seen by the most queries: first
  q += dims.q.pair(bh, dims.H), k += dims.k.pair(bh, dims.H), v += dims.v.pair(bh, dims.H);
  dout += dims.dout.pair(bh, dims.H), dk += dims.dk.pair(bh, dims.H), dv += dims.dv.pair(bh, dims.H);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int row = warp * kRowsPerWarp + (lane >> 1), par = lane & 1;  // this lane's key row in the tile
  const int j = k0 + row;                                              // ... and its key index

  load_tile<kWidth>(Ks, ldT, k + static_cast<int64_t>(k0) * dims.k.t, kOwn, seq_len - k0, D, dims.k.t);
  load_tile<kWidth>(Vs, ldT, v + static_cast<int64_t>(k0) * dims.v.t, kOwn, seq_len - k0, D, dims.v.t);
  WarpAcc<kWidth> dk_acc, dv_acc;
  dk_acc.zero();
  dv_acc.zero();

  const TileRange queries = query_tiles_for_key_tile(kt, kOwn, kStr, seq_len, w);
  for (int qt = queries.begin; qt < queries.end; ++qt) {
    const int q0 = qt * kStr;
    __syncthreads();  // every warp is done with the previous Q, dO tiles (and K, V are in place)
    load_tile<kWidth>(Qs, ldT, q + static_cast<int64_t>(q0) * dims.q.t, kStr, seq_len - q0, D, dims.q.t);
    load_tile<kWidth>(dOs, ldT, dout + static_cast<int64_t>(q0) * dims.dout.t, kStr, seq_len - q0, D, dims.dout.t);
    load_row_stats(lse_s, lse + static_cast<int64_t>(bh) * seq_len + q0, kStr, seq_len - q0, 0.0f);
    load_row_stats(dvec_s, dvec + static_cast<int64_t>(bh) * seq_len + q0, kStr, seq_len - q0, 0.0f);
    __syncthreads();

    {  // S^T_w = K_w Q^T
      WarpAcc<kStr> s;
      s.zero();
      s.template add_abt<kWidth>(Ks + warp * 16 * ldT, ldT, Qs, ldT);
      s.store(Ss + warp * 16 * ldS, ldS);
    }
    __syncwarp();
    // P^T = exp(S^T - lse) on allowed pairs, 0 elsewhere (a select, so a masked pair is never NaN).
#pragma unroll
    for (int c2 = 0; c2 < kStr / 2; ++c2) {
      const int c = 2 * c2 + par;
      const float s = logit(Ss[row * ldS + c], dims);
      const float p = allowed(q0 + c, j, w, seq_len) ? attn_exp<float>(s - lse_s[c]) : 0.0f;
      Ps[row * ldP + c] = p;
    }
    __syncwarp();
    dv_acc.template add_ab<kStr>(Ps + warp * 16 * ldP, ldP, dOs, ldT);  // dV_w += P^T dO
    {  // dP^T_w = V_w dO^T
      WarpAcc<kStr> dp;
      dp.zero();
      dp.template add_abt<kWidth>(Vs + warp * 16 * ldT, ldT, dOs, ldT);
      dp.store(dPs + warp * 16 * ldS, ldS);
    }
    __syncwarp();  // also: the dV product has read P before dS overwrites it
    // dS^T, with p recomputed in f32 (not re-read from its rounded copy).
#pragma unroll
    for (int c2 = 0; c2 < kStr / 2; ++c2) {
      const int c = 2 * c2 + par;
      const float s = logit(Ss[row * ldS + c], dims);
      const float p = allowed(q0 + c, j, w, seq_len) ? attn_exp<float>(s - lse_s[c]) : 0.0f;
      Ps[row * ldP + c] = dlogit(p, dPs[row * ldS + c], dvec_s[c], s, dims);
    }
    __syncwarp();
    dk_acc.template add_ab<kStr>(Ps + warp * 16 * ldP, ldP, Qs, ldT);  // dK_w += dS^T Q
  }

  __syncthreads();  // no warp reads the tiles any more: stage the accumulators over them
  float* stage = reinterpret_cast<float*>(smem) + warp * 16 * ldO;
  dk_acc.store(stage, ldO);
  __syncwarp();
  store_rows<kWidth>(dk, stage, ldO, k0 + warp * 16, seq_len, dims.scale, D, dims.dk.t);
  __syncwarp();
  dv_acc.store(stage, ldO);
  __syncwarp();
  store_rows<kWidth>(dv, stage, ldO, k0 + warp * 16, seq_len, 1.0f, D, dims.dv.t);
}

// Shapes: q, k, v, dout, dq (B, H, T, D) f32 at their dims Rows, D = dims.D <= kWidth; lse, dvec
// (B, H, T) f32.
// Grid (B*H, ceil(T / 64)), 128 threads: block (bh, y) owns queries [64 qt, 64 qt + 64) (qt from
// the end, as in the forward) and streams the 32-key tiles they see. Warp w owns queries
// 16w..16w+15: S_w = Q_w K^T, dP_w = dO_w V^T, dQ_w += dS K. Lanes 2r, 2r+1 share query row r.
template <int kWidth>
__global__ void __launch_bounds__(kThreads)
    attention_dq_kernel(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                        const float* __restrict__ dout, const float* __restrict__ lse, const float* __restrict__ dvec,
                        float* __restrict__ dq, Dims dims) {
  using Bw = Bwd<kWidth>;
  constexpr typename Bw::Layout L = Bw::layout();
  constexpr int kOwn = Bw::kOwn, kStr = Bw::kStr, ldT = Bw::ldT, ldS = Bw::ldS, ldP = Bw::ldP, ldO = Bw::ldO;
  KEEL_DYNAMIC_SHARED(unsigned char, smem, 128);
  float* Qs = reinterpret_cast<float*>(smem + L.own);
  float* dOs = reinterpret_cast<float*>(smem + L.own2);
  float* Ks = reinterpret_cast<float*>(smem + L.str);
  float* Vs = reinterpret_cast<float*>(smem + L.str2);
  float* lse_s = reinterpret_cast<float*>(smem + L.stat);
  float* dvec_s = reinterpret_cast<float*>(smem + L.stat2);
  float* Ss = reinterpret_cast<float*>(smem + L.s);
  float* dPs = reinterpret_cast<float*>(smem + L.dp);
  float* Ps = reinterpret_cast<float*>(smem + L.p);

  const int bh = blockIdx.x, h = bh % dims.H, seq_len = dims.T, D = dims.D, w = dims.window[h];
  const int qt = gridDim.y - 1 - blockIdx.y, q0 = qt * kOwn;
  q += dims.q.pair(bh, dims.H), k += dims.k.pair(bh, dims.H), v += dims.v.pair(bh, dims.H);
  dout += dims.dout.pair(bh, dims.H), dq += dims.dq.pair(bh, dims.H);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int row = warp * kRowsPerWarp + (lane >> 1), par = lane & 1;
  const int i = q0 + row;

  load_tile<kWidth>(Qs, ldT, q + static_cast<int64_t>(q0) * dims.q.t, kOwn, seq_len - q0, D, dims.q.t);
  load_tile<kWidth>(dOs, ldT, dout + static_cast<int64_t>(q0) * dims.dout.t, kOwn, seq_len - q0, D, dims.dout.t);
  load_row_stats(lse_s, lse + static_cast<int64_t>(bh) * seq_len + q0, kOwn, seq_len - q0, 0.0f);
  load_row_stats(dvec_s, dvec + static_cast<int64_t>(bh) * seq_len + q0, kOwn, seq_len - q0, 0.0f);
  WarpAcc<kWidth> dq_acc;
  dq_acc.zero();

  const TileRange keys = key_tiles_for_query_tile(qt, kOwn, kStr, seq_len, w);
  for (int kt = keys.begin; kt < keys.end; ++kt) {
    const int k0 = kt * kStr;
    __syncthreads();  // the previous K, V tiles are no longer read (and Q, dO, stats are in place)
    load_tile<kWidth>(Ks, ldT, k + static_cast<int64_t>(k0) * dims.k.t, kStr, seq_len - k0, D, dims.k.t);
    load_tile<kWidth>(Vs, ldT, v + static_cast<int64_t>(k0) * dims.v.t, kStr, seq_len - k0, D, dims.v.t);
    __syncthreads();

    {  // S_w = Q_w K^T, dP_w = dO_w V^T
      WarpAcc<kStr> acc;
      acc.zero();
      acc.template add_abt<kWidth>(Qs + warp * 16 * ldT, ldT, Ks, ldT);
      acc.store(Ss + warp * 16 * ldS, ldS);
      acc.zero();
      acc.template add_abt<kWidth>(dOs + warp * 16 * ldT, ldT, Vs, ldT);
      acc.store(dPs + warp * 16 * ldS, ldS);
    }
    __syncwarp();
    const float lse_i = lse_s[row], d_i = dvec_s[row];
#pragma unroll
    for (int c2 = 0; c2 < kStr / 2; ++c2) {
      const int c = 2 * c2 + par;
      const float s = logit(Ss[row * ldS + c], dims);
      const float p = allowed(i, k0 + c, w, seq_len) ? attn_exp<float>(s - lse_i) : 0.0f;
      Ps[row * ldP + c] = dlogit(p, dPs[row * ldS + c], d_i, s, dims);
    }
    __syncwarp();
    dq_acc.template add_ab<kStr>(Ps + warp * 16 * ldP, ldP, Ks, ldT);  // dQ_w += dS K
  }

  __syncthreads();
  float* stage = reinterpret_cast<float*>(smem) + warp * 16 * ldO;
  dq_acc.store(stage, ldO);
  __syncwarp();
  store_rows<kWidth>(dq, stage, ldO, q0 + warp * 16, seq_len, dims.scale, D, dims.dq.t);
}

}  // namespace

void attention_backward(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const Tensor& out_in,
                        const Tensor& lse_in, const Tensor& dout_in, const std::vector<int64_t>& window, double scale,
                        double softcap, Tensor& dq, Tensor& dk, Tensor& dv) {
  constexpr const char* kOp = "attention (CUDA backward)";
  const Tensor q = kernel_input(q_in), k = kernel_input(k_in), v = kernel_input(v_in), out = kernel_input(out_in),
               lse = kernel_input(lse_in), dout = kernel_input(dout_in);
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3);
  check_tensor(kOp, "q", q, q, q.dtype(), q.shape());
  check_tensor(kOp, "k", k, q, q.dtype(), q.shape());
  check_tensor(kOp, "v", v, q, q.dtype(), q.shape());
  check_tensor(kOp, "out", out, q, q.dtype(), q.shape());
  check_tensor(kOp, "dout", dout, q, q.dtype(), q.shape());
  check_tensor(kOp, "lse", lse, q, DType::f32, {B, H, T});
  check_tensor(kOp, "dq", dq, q, q.dtype(), q.shape());
  check_tensor(kOp, "dk", dk, q, q.dtype(), q.shape());
  check_tensor(kOp, "dv", dv, q, q.dtype(), q.shape());
  Dims dims = make_dims(kOp, q, window, scale, softcap);
  dims.q = rows_of(q), dims.k = rows_of(k), dims.v = rows_of(v), dims.out = rows_of(out);
  dims.dout = rows_of(dout), dims.dq = rows_of(dq), dims.dk = rows_of(dk), dims.dv = rows_of(dv);
  if (B * H * T == 0) return;  // empty gradients: nothing to write
  const int dev = q.device().index;
  KEEL_CHECK_CUDA(cudaSetDevice(dev));

  // The Hopper kernels compute D_i in their own statistics pass, laid out by query tile: where
  // they take the call, the dvec pass and the kernels below do not run.
  if (attention_sm90_backward(q, k, v, out, lse, dout, dims, dq, dk, dv)) return;
  const int64_t rows = B * H * T;
  Tensor dvec = empty({B, H, T}, {DType::f32, q.device()});
  auto* dp = static_cast<float*>(dvec.raw_data());
  visit_cuda_float(q.dtype(), kOp, [&]<typename E>() {
    launch(attention_dvec_kernel<E>, dim3(static_cast<unsigned>((rows + kWarps - 1) / kWarps)), 0, dev,
           static_cast<const E*>(out.raw_data()), static_cast<const E*>(dout.raw_data()), dp, rows, dims);
  });
  if (q.dtype() != DType::f32) {
    attention_mma_backward(q, k, v, lse, dout, dvec, dims, dq, dk, dv);  // DTypeError but bf16, f16
    return;
  }
  with_width<32>(kOp, D, [&]<int HD>() {
    const auto* qp = static_cast<const float*>(q.raw_data());
    const auto* kp = static_cast<const float*>(k.raw_data());
    const auto* vp = static_cast<const float*>(v.raw_data());
    const auto* gp = static_cast<const float*>(dout.raw_data());
    const auto* lp = static_cast<const float*>(lse.raw_data());
    const dim3 grid(static_cast<unsigned>(B * H), static_cast<unsigned>((T + kOwnRows - 1) / kOwnRows));
    const int smem = Bwd<HD>::layout().bytes;
    launch(attention_dkdv_kernel<HD>, grid, smem, dev, qp, kp, vp, gp, lp, static_cast<const float*>(dp),
           static_cast<float*>(dk.raw_data()), static_cast<float*>(dv.raw_data()), dims);
    launch(attention_dq_kernel<HD>, grid, smem, dev, qp, kp, vp, gp, lp, static_cast<const float*>(dp),
           static_cast<float*>(dq.raw_data()), dims);
  });
}

}  // namespace keel::cuda
