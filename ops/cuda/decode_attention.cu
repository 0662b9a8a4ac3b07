// Decode attention on the GPU, split over the keys (flash-decoding): a few new queries against a
// long KV cache.
//
// A decode step has only B * H * t query rows (6 at batch 1 for the paper's model), far fewer
// than a GPU has multiprocessors, so one block per row would leave it idle. Each row's keys are
// cut into n_split chunks instead, and a block of 128 threads owns one (row, chunk): it streams
// its keys 128 at a time, one key per thread for the logit q . k, and keeps an online softmax (m
// the largest logit so far, l the sum of exp(s - m), and the unnormalised output acc = sum of
// exp(s - m) v, rescaled by exp(m - m_new) when m grows, as the flash forward does). It writes
// (acc, m, l) to a small f32 workspace; a second kernel merges a row's chunks:
//   M = max_s m_s,  L = sum_s l_s exp(m_s - M),  out = sum_s acc_s exp(m_s - M) / L.
// n_split is picked so the launch has about two blocks per multiprocessor and no chunk is
// shorter than 256 keys. A row's keys are [band_start(p, w), p], so a local head's 50 keys fill
// one chunk and its other chunks are empty blocks that only write (0, -inf, 0): it reads its
// window and nothing else. The key of position j sits in slot j % S of the cache.
#include <algorithm>

#include "ops/attention_band.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/decode_attention.h"

namespace keel::cuda {

namespace {

using namespace dev;

constexpr int kBlock = 128;          // a block, and the keys of one tile (one per thread)
constexpr int kMinKeysPerSplit = 256;  // shorter chunks would cost more to merge than to read
constexpr int kMaxHeads = 128;         // windows travel to the kernel by value

struct DecodeDims {
  int64_t position;  // of the first query
  int64_t S;         // cache slots per head
  int64_t chunk;     // keys per split, a multiple of kBlock
  int H, t;
  float scale, softcap;
  int window[kMaxHeads];
};

// q (R = B*H*t, D), k, v (B*H, S, D) -> part (R, n_split, D + 2) f32: acc (D), m, l per chunk.
// Grid (R, n_split), kBlock threads.
template <typename T, int D>
__global__ void __launch_bounds__(kBlock)
    decode_partial_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                          float* __restrict__ part, DecodeDims dims) {
  static_assert(kBlock % D == 0, "groups of D threads split the P V product");
  constexpr int G = kBlock / D;
  __shared__ float qs[D];
  __shared__ float ps[kBlock];  // exp(s - m) of the tile's keys
  __shared__ float accs[kBlock];
  __shared__ float scratch[32];
  const int r = blockIdx.x, tid = threadIdx.x, g = tid / D, d = tid % D;
  const int64_t bh = r / dims.t, p = dims.position + r % dims.t;
  const int64_t lo = band_start<int64_t>(p, dims.window[bh % dims.H]);
  const int64_t begin = lo + int64_t(blockIdx.y) * dims.chunk;
  const int64_t end = begin + dims.chunk < p + 1 ? begin + dims.chunk : p + 1;
  const T* K = k + bh * dims.S * D;
  const T* V = v + bh * dims.S * D;

  for (int e = tid; e < D; e += kBlock) qs[e] = to_f32(q[int64_t(r) * D + e]);
  __syncthreads();

  float m = -INFINITY, l = 0.0f, acc = 0.0f;  // acc: element d of group g's share of the output
  for (int64_t j0 = begin; j0 < end; j0 += kBlock) {
    const int64_t j = j0 + tid;
    float s = -INFINITY;
    if (j < end) {
      const T* kr = K + (j % dims.S) * D;
      float dot = 0.0f;
#pragma unroll 8
      for (int e = 0; e < D; ++e) dot += qs[e] * to_f32(kr[e]);
      s = dot * dims.scale;
      if (dims.softcap > 0) s = dims.softcap * tanhf(s / dims.softcap);
    }
    // The tile's first key is always real, so m_new is finite; on the first tile exp(-inf) = 0.
    const float m_new = fmaxf(m, block_max(s, scratch));
    const float e = j < end ? expf(s - m_new) : 0.0f;
    ps[tid] = e;
    const float alpha = expf(m - m_new);
    l = l * alpha + block_sum(e, scratch);  // its barriers also publish ps
    m = m_new;
    acc *= alpha;
    const int n = end - j0 < kBlock ? static_cast<int>(end - j0) : kBlock;
    for (int jj = g; jj < n; jj += G) acc += ps[jj] * to_f32(V[((j0 + jj) % dims.S) * D + d]);
  }

  accs[tid] = acc;
  __syncthreads();
  float* out = part + (int64_t(r) * gridDim.y + blockIdx.y) * (D + 2);
  if (tid < D) {
    float a = 0.0f;
    for (int gg = 0; gg < G; ++gg) a += accs[gg * D + tid];
    out[tid] = a;
  }
  if (tid == 0) {
    out[D] = m;
    out[D + 1] = l;
  }
}

// part (R, n_split, D + 2) -> out (R, D): a row's chunks merged. Grid R, D threads.
template <typename T, int D>
__global__ void __launch_bounds__(128) decode_combine_kernel(const float* __restrict__ part, T* __restrict__ out,
                                                             int n_split) {
  const int r = blockIdx.x, d = threadIdx.x;
  const float* pr = part + int64_t(r) * n_split * (D + 2);
  float M = -INFINITY;
  for (int s = 0; s < n_split; ++s) M = fmaxf(M, pr[s * (D + 2) + D]);
  float L = 0.0f, o = 0.0f;
  for (int s = 0; s < n_split; ++s) {
    const float c = expf(pr[s * (D + 2) + D] - M);  // an empty chunk (m = -inf) adds nothing
    L += pr[s * (D + 2) + D + 1] * c;
    o += pr[s * (D + 2) + d] * c;
  }
  out[int64_t(r) * D + d] = from_f32<T>(o / L);
}

}  // namespace

void decode_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<int64_t>& window,
                              int64_t position, double scale, double softcap, Tensor& out) {
  constexpr const char* kOp = "decode_attention (CUDA)";
  const int64_t B = q.size(0), H = q.size(1), t = q.size(2), D = q.size(3), S = k.size(2);
  const int64_t R = B * H * t;
  if (R == 0 || D == 0) return;
  if (H > kMaxHeads)
    throw ShapeError(kOp, "CUDA decode attention supports up to " + std::to_string(kMaxHeads) + " heads, got " +
                              std::to_string(H));
  if (R > 2147483647) throw ShapeError(kOp, "too many query rows for one launch: " + shape_str(q.shape()));
  DecodeDims dims{};
  dims.position = position;
  dims.S = S;
  dims.H = static_cast<int>(H);
  dims.t = static_cast<int>(t);
  dims.scale = static_cast<float>(scale);
  dims.softcap = static_cast<float>(softcap);
  int64_t span = 0;  // the most keys a row reads: the last query's
  for (int64_t h = 0; h < H; ++h) {
    // A window that reaches key 0 from every query is full causal: 0, which also fits an int.
    dims.window[h] = window[h] >= position + t ? 0 : static_cast<int>(window[h]);
    span = std::max(span, position + t - band_start(position + t - 1, window[h]));
  }
  const int dev = q.device().index;
  KEEL_CHECK_CUDA(cudaSetDevice(dev));
  // About two blocks per multiprocessor, no chunk below kMinKeysPerSplit, chunks of whole tiles.
  const int64_t want = (2 * int64_t(sm_count(dev)) + R - 1) / R;
  const int64_t most = std::max<int64_t>(1, (span + kMinKeysPerSplit - 1) / kMinKeysPerSplit);
  int64_t n_split = std::clamp<int64_t>(want, 1, std::min<int64_t>(most, 65535));
  dims.chunk = ((span + n_split - 1) / n_split + kBlock - 1) / kBlock * kBlock;
  n_split = (span + dims.chunk - 1) / dims.chunk;
  Tensor part = empty({R, n_split, D + 2}, {DType::f32, q.device()});
  cudaStream_t stream = detail::stream(dev);

  visit_cuda_float(q.dtype(), kOp, [&]<typename T>() {
    auto run = [&]<int HD>() {
      launch_kernel(decode_partial_kernel<T, HD>, dim3(static_cast<unsigned>(R), static_cast<unsigned>(n_split)),
                    dim3(kBlock), 0, stream, static_cast<const T*>(q.raw_data()),
                    static_cast<const T*>(k.raw_data()), static_cast<const T*>(v.raw_data()),
                    static_cast<float*>(part.raw_data()), dims);
      KEEL_CHECK_LAUNCH();
      launch_kernel(decode_combine_kernel<T, HD>, dim3(static_cast<unsigned>(R)), dim3(HD), 0, stream,
                    static_cast<const float*>(part.raw_data()), static_cast<T*>(out.raw_data()),
                    static_cast<int>(n_split));
      KEEL_CHECK_LAUNCH();
    };
    switch (D) {
      case 32: return run.template operator()<32>();
      case 64: return run.template operator()<64>();
      case 128: return run.template operator()<128>();
      default:
        throw ShapeError(kOp, "head dim D = " + std::to_string(D) + " has no CUDA kernel",
                         "the CUDA attention kernels support head dims 32, 64 and 128 (or run on the CPU)");
    }
  });
}

}  // namespace keel::cuda
