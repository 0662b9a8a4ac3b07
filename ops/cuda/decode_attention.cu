// Decode attention on the GPU, split over the keys (flash-decoding): a few new queries against a
// long KV cache, every head of a layer in one launch.
//
// A decode step has only B * H * t query rows (6 at batch 1 for the paper's model), far fewer
// than a GPU has multiprocessors, so one block per row would leave it idle. Each row's keys are
// cut into n_split chunks instead, and a block of 128 threads owns one (row, chunk): it streams
// its keys 128 at a time, one key per thread for the logit q . k, and keeps an online softmax (m
// the largest logit so far, l the sum of exp(s - m), and the unnormalised output acc = sum of
// exp(s - m) v, rescaled by exp(m - m_new) when m grows, as the flash forward does).
//   n_split == 1  the block owns the whole row and writes out = acc / l itself: one launch.
//   n_split > 1   it writes (acc, m, l) to a small f32 workspace, and the row's chunks are
//                 merged: M = max_s m_s, L = sum_s l_s exp(m_s - M),
//                 out = sum_s acc_s exp(m_s - M) / L (merge_column). With the cache's counters
//                 (DecodeCache::done) the last of a row's blocks to finish merges it, in the same
//                 launch; without them a second kernel does (decode_combine_kernel). Either way
//                 chunk by chunk in order, so the two give the same bits.
// Chunks are kChunk keys from the row's first key, however long the row (the rule and its reason
// are at the launch). A row's keys are [band_start(p, w), p], so a local head's 50 keys fill one
// chunk and its other chunks are empty blocks that only write (0, -inf, 0): it reads its window
// and nothing else.
//
// The heads come in two groups with caches of their own (a local ring, a global cache: see
// DecodeCache), the key of position j in slot j % S of the head's group, so LS-attention's local
// and global heads share the launch as MHSA's heads do. In the generation step the new token's
// key and value arrive with the queries, and the block that will read them writes them into
// their slot first (see decode_partial_kernel): no copies before the launch, and the output
// goes out as (B, 1, H, D), the layout c_proj reads.
#include <algorithm>

#include "core/cuda/ptx.cuh"
#include "ops/attention_band.h"
#include "ops/cuda/attention_tiles.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/decode_attention.h"

namespace keel::cuda {

namespace {

using namespace dev;

constexpr int kBlock = 128;       // a block, and the keys of one tile (one per thread)
constexpr int64_t kChunk = 256;   // keys per split: see the launch
constexpr int kMaxHeads = 128;    // windows travel to the kernel by value
static_assert(kChunk % kBlock == 0, "a chunk is whole tiles");

struct DecodeDims {
  int64_t position;  // of the first query
  int64_t S0, S1;    // cache slots per head of the first group (heads [0, H0)) and of the second
  int64_t chunk;     // keys per split: kChunk
  int H, H0, t;
  int D;  // head dim, the rows' stride: at most the kernel width
  float scale, softcap;
  int window[kMaxHeads];
};

// Where a launch reads and writes. The caches are written (the new token) and read in the same
// launch, so they are neither const nor __restrict__: the compiler must not route their loads
// through the read-only cache, which does not see the block's own writes.
template <typename T>
struct DecodeArgs {
  const T* q;                 // (B*H*t, D)
  const T *k_new, *v_new;     // (B*H, D), or null: nothing to write (t == 1 when set)
  T *k0, *v0;                 // (B, H0, S0, D)
  T *k1, *v1;                 // (B, H - H0, S1, D)
  float* part;                // (R, n_split, D + 2) when n_split > 1
  T* out;                     // (R, D): written by the block of a lone split, or by the merge
  const int64_t* position;    // (1): the first query's position, or null: dims.position
  int* done;                  // (R) zeros: the blocks of a row count themselves; null: a second
                              // launch merges (decode_combine_kernel)
};

// Column d of a row merged from its n_split chunks (acc (D), m, l each, D + 2 floats apart),
// in chunk order. Loads through L2 (__ldcg): in the one-launch merge other blocks wrote them.
__device__ __forceinline__ float merge_column(const float* pr, int n_split, int D, int d) {
  float M = -INFINITY;
  for (int s = 0; s < n_split; ++s) M = fmaxf(M, __ldcg(pr + s * (D + 2) + D));
  float L = 0.0f, o = 0.0f;
  for (int s = 0; s < n_split; ++s) {
    const float c = expf(__ldcg(pr + s * (D + 2) + D) - M);  // an empty chunk (m = -inf) adds nothing
    L += __ldcg(pr + s * (D + 2) + D + 1) * c;
    o += __ldcg(pr + s * (D + 2) + d) * c;
  }
  return o / L;
}

// q (R = B*H*t, D), cache (B, H0, S0, D) + (B, H - H0, S1, D) -> out (R, D) when n_split == 1,
// else part (R, n_split, D + 2) f32: acc (D), m, l per chunk. k_new, v_new (B*H, D) go into
// slot position % S first. D = dims.D <= kWidth, the kernel width (attention_tiles.h: a few widths
// serve every head dim). Grid (R, n_split), kBlock threads.
// The P V product: the block is G groups of kCols threads, thread d of a group owns columns
// d + kCols c (c < kPer) and the group every G-th key of the tile; columns at or past D idle.
// One function, in the order of one token's attention: its running max, sum and accumulator live
// across the key-tile loop.
template <typename T, int kWidth>
__global__ void __launch_bounds__(kBlock) decode_partial_kernel(DecodeArgs<T> a, DecodeDims dims) {
  constexpr int kCols = kWidth < kBlock ? kWidth : kBlock, G = kBlock / kCols, kPer = kWidth / kCols;
  static_assert(kBlock % kCols == 0 && kWidth % kCols == 0, "groups of kCols threads split the P V product");
  KEEL_SHARED(float[kWidth], qs);
  KEEL_SHARED(float[kBlock], ps);  // exp(s - m) of the tile's keys
  KEEL_SHARED(float[kPer * kBlock], accs);
  KEEL_SHARED(float[32], scratch);
  const int D = dims.D;
  const int r = blockIdx.x, tid = threadIdx.x, g = tid / kCols, d = tid % kCols;
  const int64_t bh = r / dims.t, p = (a.position ? *a.position : dims.position) + r % dims.t;
  const int b = static_cast<int>(bh / dims.H), h = static_cast<int>(bh % dims.H);
  const bool first = h < dims.H0;  // which group holds the head
  const int64_t S = first ? dims.S0 : dims.S1;
  const int64_t head = first ? int64_t(b) * dims.H0 + h : int64_t(b) * (dims.H - dims.H0) + (h - dims.H0);
  T* K = (first ? a.k0 : a.k1) + head * S * D;
  T* V = (first ? a.v0 : a.v1) + head * S * D;
  const int64_t lo = band_start<int64_t>(p, dims.window[h]);
  const int64_t begin = lo + int64_t(blockIdx.y) * dims.chunk;
  const int64_t end = begin + dims.chunk < p + 1 ? begin + dims.chunk : p + 1;

  // The new key is part of its own query's window, so it must be in its slot before the tile
  // loop reads the slot. Only the block whose chunk holds position p reads that slot: earlier
  // chunks end before p, later ones are empty, and the key the slot held (position p - S) is in
  // no window (the front end checked every span). So that block writes it, and the barrier
  // below makes the write visible to its threads; no other block touches the slot.
  if (a.k_new != nullptr && begin <= p && p < begin + dims.chunk) {
    const int64_t slot = (p % S) * D;
    for (int e = tid; e < D; e += kBlock) {
      K[slot + e] = a.k_new[bh * D + e];
      V[slot + e] = a.v_new[bh * D + e];
    }
  }
  for (int e = tid; e < D; e += kBlock) qs[e] = to_f32(a.q[int64_t(r) * D + e]);
  __syncthreads();

  float m = -INFINITY, l = 0.0f, acc[kPer] = {};  // acc[c]: column d + kCols c of group g's share
  for (int64_t j0 = begin; j0 < end; j0 += kBlock) {
    const int64_t j = j0 + tid;
    float s = -INFINITY;
    if (j < end) {
      const T* kr = K + (j % S) * D;
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
    const int n = end - j0 < kBlock ? static_cast<int>(end - j0) : kBlock;
#pragma unroll
    for (int c = 0; c < kPer; ++c) {
      const int col = d + kCols * c;
      acc[c] *= alpha;
      if (col < D)
        for (int jj = g; jj < n; jj += G) acc[c] += ps[jj] * to_f32(V[((j0 + jj) % S) * D + col]);
    }
  }

#pragma unroll
  for (int c = 0; c < kPer; ++c) accs[c * kBlock + tid] = acc[c];
  __syncthreads();
  // Column col: the sum over the groups of the threads that own it.
  auto column = [&](int col) {
    float o = 0.0f;
    for (int gg = 0; gg < G; ++gg) o += accs[col / kCols * kBlock + gg * kCols + col % kCols];
    return o;
  };
  if (gridDim.y == 1) {  // the whole row: normalise here, nothing to merge (the combine's M = m)
    for (int col = tid; col < D; col += kBlock) a.out[int64_t(r) * D + col] = from_f32<T>(column(col) / l);
    return;
  }
  float* out = a.part + (int64_t(r) * gridDim.y + blockIdx.y) * (D + 2);
  for (int col = tid; col < D; col += kBlock) out[col] = column(col);
  if (tid == 0) {
    out[D] = m;
    out[D + 1] = l;
  }
  if (a.done == nullptr) return;  // decode_combine_kernel merges
  // The row's chunks are in once every block of the row has counted itself: the last to count
  // merges them (the others' writes released by their count, acquired by its own) and sets the
  // counter back to 0 for the next launch.
  KEEL_SHARED(bool, last);
  __syncthreads();  // the block's partial sums are written
  if (tid == 0) {
    __threadfence();
    last = ptx::atom_add_acq_rel_gpu(a.done + r, 1) == static_cast<int>(gridDim.y) - 1;
  }
  __syncthreads();
  if (!last) return;
  const float* pr = a.part + int64_t(r) * gridDim.y * (D + 2);
  for (int col = tid; col < D; col += kBlock)
    a.out[int64_t(r) * D + col] = from_f32<T>(merge_column(pr, static_cast<int>(gridDim.y), D, col));
  if (tid == 0) a.done[r] = 0;
}

// part (R, n_split, D + 2) -> out (R, D): a row's chunks merged. Grid R, D threads.
template <typename T>
__global__ void __launch_bounds__(attn::kMaxHeadDim) decode_combine_kernel(const float* __restrict__ part,
                                                                          T* __restrict__ out, int n_split, int D) {
  const int r = blockIdx.x, d = threadIdx.x;
  out[int64_t(r) * D + d] = from_f32<T>(merge_column(part + int64_t(r) * n_split * (D + 2), n_split, D, d));
}

template <typename T>
T* ptr_or_null(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.raw_data()) : nullptr;
}

constexpr const char* kOp = "decode_attention (CUDA)";

// ShapeError unless one launch can take q's R rows: a kernel for head dim D, at most kMaxHeads
// heads (their windows travel by value), and R within the grid's x limit.
void check_launchable(const Tensor& q, int64_t H, int64_t D, int64_t R) {
  if (!attn::head_dim_supported(D))
    throw ShapeError(kOp, "head dim D = " + std::to_string(D) + " has no CUDA kernel",
                     "the CUDA attention kernels take head dims that are multiples of 8 from 8 to " +
                         std::to_string(attn::kMaxHeadDim) + " (or run on the CPU)");
  if (H > kMaxHeads)
    throw ShapeError(kOp, "CUDA decode attention supports up to " + std::to_string(kMaxHeads) + " heads, got " +
                              std::to_string(H));
  if (R > 2147483647) throw ShapeError(kOp, "too many query rows for one launch: " + shape_str(q.shape()));
}

// The kernel's dims for q (B, H, t, D) against the cache, and span: the most keys a row reads,
// which decides the split (split_count).
DecodeDims decode_dims(const Tensor& q, const DecodeCache& cache, const std::vector<int64_t>& window,
                       int64_t position, double scale, double softcap, int64_t& span) {
  const int64_t H = q.size(1), t = q.size(2), D = q.size(3);
  DecodeDims dims{};
  dims.position = position;
  dims.H = static_cast<int>(H);
  dims.H0 = cache.k_local.defined() ? static_cast<int>(cache.k_local.size(1)) : 0;
  dims.S0 = dims.H0 > 0 ? cache.k_local.size(2) : 1;
  dims.S1 = dims.H0 < H ? cache.k_global.size(2) : 1;
  dims.t = static_cast<int>(t);
  dims.D = static_cast<int>(D);
  dims.scale = static_cast<float>(scale);
  dims.softcap = static_cast<float>(softcap);
  dims.chunk = kChunk;
  for (int64_t h = 0; h < H; ++h) {
    if (cache.position.defined()) {
      // The position is read on the device (a decode step captured in a CUDA graph, where a host
      // value would be frozen): the grid covers what the cache can hold, a row's chunks past its
      // position exit at once, and a window reaching key 0 needs no rewriting (band_start).
      dims.window[h] = static_cast<int>(std::min<int64_t>(window[h], 2147483647));
      span = std::max(span, h < dims.H0 ? dims.S0 : dims.S1);
      continue;
    }
    // A window that reaches key 0 from every query is full causal: 0, which also fits an int.
    dims.window[h] = window[h] >= position + t ? 0 : static_cast<int>(window[h]);
    span = std::max(span, position + t - band_start(position + t - 1, window[h]));
  }
  return dims;
}

// One rule for the split, the same whether the position is on the host (an eager step: span is
// the keys the row has) or on the device (a replayed graph: span is the slots the cache has):
// chunks of kChunk keys counted from the row's first key. A chunk's keys, its f32 partial sums
// and the order the combine adds them in then depend only on the keys present, and the chunks
// a larger grid adds are empty, adding exact zeros (and a lone chunk's own normalisation,
// acc / l, is the combine's with M = m), so eager and replayed steps agree bit for bit at
// every length. Sizing the chunks by the length (or the capacity) would round differently in
// the two. A fixed size also keeps a short row cheap: up to kChunk keys it is one launch with
// no workspace. Long rows get more blocks than the multiprocessors need at large batch, each
// merged by the combine at D + 2 floats: small next to the kChunk keys and values it read.
int64_t split_count(int64_t span) {
  const int64_t n_split = std::max<int64_t>(1, (span + kChunk - 1) / kChunk);
  if (n_split > 65535)
    throw ShapeError(kOp, "a row of " + std::to_string(span) + " keys needs more than 65535 chunks of " +
                              std::to_string(kChunk) + " keys (the grid's y limit)");
  return n_split;
}

// ShapeError unless `done` (the cache's counters, for the one-launch merge) holds an i32 zero per
// query row on q's device.
void check_done_counters(const Tensor& done, const Tensor& q, int64_t R) {
  if (done.dtype() != DType::i32 || done.numel() < R || !done.is_contiguous() || done.device() != q.device())
    throw ShapeError(kOp, "cache.done must hold an i32 zero per query row (" + std::to_string(R) +
                              ") on q's device: " + shape_str(done.shape()));
}

// The launches for kernel width kWidth: the partial kernel over (row, chunk), then the combine unless
// a lone chunk or the one-launch merge has finished the rows.
template <typename T, int kWidth>
void launch_decode(const DecodeArgs<T>& args, const DecodeDims& dims, int64_t R, int64_t n_split, bool merge_here,
                   cudaStream_t stream) {
  launch_kernel(decode_partial_kernel<T, kWidth>, dim3(static_cast<unsigned>(R), static_cast<unsigned>(n_split)),
                dim3(kBlock), 0, stream, args, dims);
  KEEL_CHECK_LAUNCH();
  if (n_split == 1 || merge_here) return;
  launch_kernel(decode_combine_kernel<T>, dim3(static_cast<unsigned>(R)), dim3(static_cast<unsigned>(dims.D)), 0,
                stream, static_cast<const float*>(args.part), args.out, static_cast<int>(n_split), dims.D);
  KEEL_CHECK_LAUNCH();
}

}  // namespace

// q (B, H, t, D), k_new, v_new (B, H, 1, D) or undefined, cache (B, Hl, S0, D) + (B, H - Hl, S1, D)
// -> out (B, H, t, D)
void decode_attention_forward(const Tensor& q, const Tensor& k_new, const Tensor& v_new, const DecodeCache& cache,
                              const std::vector<int64_t>& window, int64_t position, double scale, double softcap,
                              Tensor& out) {
  const int64_t B = q.size(0), H = q.size(1), t = q.size(2), D = q.size(3);
  const int64_t R = B * H * t;
  if (R == 0 || D == 0) return;
  check_launchable(q, H, D, R);
  int64_t span = 0;  // the most keys a row reads: the last query's
  const DecodeDims dims = decode_dims(q, cache, window, position, scale, softcap, span);
  const int dev = q.device().index;
  KEEL_CHECK_CUDA(cudaSetDevice(dev));
  const int64_t n_split = split_count(span);
  // One split writes the output itself: no workspace, no combine launch. Several merge in the
  // same launch when the cache brings a counter per row.
  Tensor part = n_split > 1 ? empty({R, n_split, D + 2}, {DType::f32, q.device()}) : Tensor();
  const bool merge_here = n_split > 1 && cache.done.defined();
  if (merge_here) check_done_counters(cache.done, q, R);
  cudaStream_t stream = detail::stream(dev);

  visit_cuda_float(q.dtype(), kOp, [&]<typename T>() {
    const DecodeArgs<T> args{static_cast<const T*>(q.raw_data()),
                             ptr_or_null<T>(k_new),
                             ptr_or_null<T>(v_new),
                             ptr_or_null<T>(cache.k_local),
                             ptr_or_null<T>(cache.v_local),
                             ptr_or_null<T>(cache.k_global),
                             ptr_or_null<T>(cache.v_global),
                             ptr_or_null<float>(part),
                             static_cast<T*>(out.raw_data()),
                             ptr_or_null<const int64_t>(cache.position),
                             merge_here ? static_cast<int*>(cache.done.raw_data()) : nullptr};
    switch (attn::kernel_width(D, 16)) {
      case 16: return launch_decode<T, 16>(args, dims, R, n_split, merge_here, stream);
      case 32: return launch_decode<T, 32>(args, dims, R, n_split, merge_here, stream);
      case 64: return launch_decode<T, 64>(args, dims, R, n_split, merge_here, stream);
      case 128: return launch_decode<T, 128>(args, dims, R, n_split, merge_here, stream);
      default: return launch_decode<T, 256>(args, dims, R, n_split, merge_here, stream);
    }
  });
}

}  // namespace keel::cuda
