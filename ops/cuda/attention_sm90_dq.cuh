// The Hopper backward's dQ (attention_sm90_backward.cu): dQ = dS K sums over all 128 keys of a
// block, but each consumer warpgroup holds the dS^T of its own 64. So both write their dS^T into
// one shared tile (store_ds), meet at a named barrier, and each computes a slice of the tile's dQ
// from the whole tile (issue_dq: half the rows with 128-query tiles, else half the columns). A
// slice leaves through shared memory (stage_dq) and is added to global memory by the producer
// warpgroup's second warp with one bulk reduction (add_dq), FlashAttention-3's way;
// sm90_dq_convert_kernel puts the sums in place. F is the kernel's Sm90Bwd.
#pragma once

#include "ops/cuda/attention_mma.cuh"
#include "ops/cuda/attention_sm90.cuh"

namespace keel::cuda::attn::sm90 {

// Named barriers (0 is __syncthreads): the consumers' dS^T tile is whole (256 threads); consumer
// c's staging buffer b holds a slice (kDqFull + 2 c + b), and is free again (kDqFree + 2 c + b),
// each between the consumer's 128 threads and the producer's dQ warp (160). A barrier a buffer,
// also for "full": a consumer may stage into its second buffer before the warp has synced on the
// first, and two phases' arrivals on one barrier would merge (a phase completes at any 160).
constexpr int kDsReady = 1, kDqFull = 2, kDqFree = 6, kDqThreads = 128 + 32;
// Consumer warpgroups of 64 keys a block (Sm90Bwd::kConsumers), at every width: the named
// barriers above are numbered for two.
constexpr int kBwdConsumers = 2;

// Where a block works and what its dQ slices are added to.
struct BwdArgs {
  float* dq_accum;  // (B H, nq, kConsumers, 64 x kDqCols) f32, zeroed
  int* flags;       // the ordered kernel's hand-over flags, one per slice; null: unordered
  int pair, nq, w;
  int kt, k0;        // the block's key tile and first key (kt 64 kBwdConsumers)
  TileRange tiles;   // the query tiles that see its keys
  TileRange mine[kBwdConsumers];  // those that see consumer c's 64 keys
};

// Issues the warpgroup's dQ slice (64 queries x kDqCols columns) = dS K over the block's 128 keys,
// one commit group: ds the slice's panel of the dS^T tile (its 64 queries; read MN-major, as
// dS), k the slice's panel of K (MN-major).
template <typename T, typename F>
__device__ __forceinline__ void issue_dq(float (&dq)[F::kDqCols / 8][4], uint64_t ds, uint64_t k) {
  auto& d = reinterpret_cast<float(&)[F::kDqCols / 2]>(dq);
  ptx::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < F::kBc / 16; ++kk)
    ptx::wgmma_m64k16<F::kDqCols, T, true, true>(d, mn_major(ds, kk), mn_major(k, kk), kk > 0);
  ptx::wgmma_commit_group();
}

// The warp's dS^T (A fragments da: keys g, g + 8 of its 16 rows, queries 16 kk + 2t, + 1, + 8,
// + 9) into its rows of the swizzled dS^T tile (row: the warp's first in panel 0; a panel a 64
// queries, 128 bytes a row; chunk (q / 8) XOR (row % 8), and row % 8 is the lane's g).
template <typename F>
__device__ __forceinline__ void store_ds(unsigned char* row, const uint32_t (&da)[F::kBr / 16][4], int g, int t) {
#pragma unroll
  for (int kk = 0; kk < F::kBr / 16; ++kk)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = g + 8 * (e & 1), chunk = 2 * kk + (e >> 1);  // of 8 queries
      *reinterpret_cast<uint32_t*>(row + chunk / 8 * F::kBc * 128 + r * 128 + ((chunk % 8 ^ g) << 4) + 4 * t) =
          da[kk][e];
    }
}

// The warpgroup's dQ slice of a query tile into its staging buffer `buf`, once the producer's dQ
// warp has added what it held there kDqBuffers tiles ago: thread i's accumulators, 4 at a time, at float4
// m * 128 + i (conflict-free), fenced for the async proxy and handed to that warp (add_dq).
template <typename F>
__device__ void stage_dq(const float (&dq)[F::kDqCols / 8][4], unsigned char* smem, int c, int buf) {
  const int i = threadIdx.x % 128;
  float* stage = reinterpret_cast<float*>(smem + F::kDQ + (F::kDqBuffers * c + buf) * F::kDQBytes);
  ptx::named_barrier_sync(kDqFree + 2 * c + buf, kDqThreads);
#pragma unroll
  for (int m = 0; m < F::kDqCols / 8; ++m)
    *reinterpret_cast<float4*>(stage + 4 * (m * 128 + i)) = make_float4(dq[m][0], dq[m][1], dq[m][2], dq[m][3]);
  ptx::fence_proxy_async();
  ptx::named_barrier_arrive(kDqFull + 2 * c + buf, kDqThreads);
}

// The producer warpgroup's warp 1 adds the consumers' dQ slices to dq_accum, as FlashAttention-3
// does, so that no consumer waits for an add: per query tile and consumer, once the slice is
// staged, lane 0 waits for the key tiles above this one (ordered), adds the whole slice with one
// bulk reduction, and waits until it is done (ordered: then hands the flag on) or has read shared
// memory; then the buffer is free for the consumer's kDqBuffers-th tile from this one. Each
// buffer's first turn is free at once; a turn no consumer will take is left out, so every barrier
// ends with no phase open.
template <typename F>
__device__ void add_dq(const BwdArgs& args, unsigned char* smem, int seq_len) {
  const int lane = threadIdx.x % 32, n = args.tiles.end - args.tiles.begin;
  for (int c = 0; c < F::kConsumers; ++c)
    for (int b = 0; b < F::kDqBuffers && b < n; ++b) ptx::named_barrier_arrive(kDqFree + 2 * c + b, kDqThreads);
  for (int i = 0; i < n; ++i) {
    const int qt = args.tiles.begin + i;
    for (int c = 0; c < F::kConsumers; ++c) {
      ptx::named_barrier_sync(kDqFull + 2 * c + i % F::kDqBuffers, kDqThreads);
      if (lane == 0) {
        const int64_t slice = (static_cast<int64_t>(args.pair) * args.nq + qt) * F::kConsumers + c;
        const int buf = F::kDqBuffers * c + i % F::kDqBuffers;
        const float* stage = reinterpret_cast<const float*>(smem + F::kDQ + buf * F::kDQBytes);
        int* flag = args.flags ? args.flags + slice : nullptr;
        if (flag)
          ptx::spin_wait_equal(flag, key_tiles_for_query_tile(qt, F::kBr, F::kBc, seq_len, args.w).end - 1 - args.kt);
        ptx::bulk_reduce_add_f32(args.dq_accum + slice * (F::kDQBytes / 4), stage, F::kDQBytes);
        ptx::bulk_commit_group();
        if (flag) {
          ptx::bulk_wait_group<0>();  // the adds are done: hand the slice on
          __threadfence();
          ptx::red_release_gpu_add(flag, 1);
        } else {
          ptx::bulk_wait_group_read<0>();
        }
      }
      __syncwarp();
      if (i + F::kDqBuffers < n) ptx::named_barrier_arrive(kDqFree + 2 * c + i % F::kDqBuffers, kDqThreads);
    }
  }
}

// Shapes: dq_accum as the kernel leaves it -> dq (B, H, T, D) in T at dims.dq, times scale. A
// thread per 8 columns of a row (n8 = B H T D / 8). Row r of a tile, column j lie in slice c =
// (j / kDqCols) kRowSlices + r / 64 (issue_dq's), where (r' = r % 64, j' = j % kDqCols) is
// accumulator 4 (j' / 8) + 2 (r' % 16 / 8) + j' % 2 of thread 32 (r' / 16) + 4 (r' % 8) + j' % 8 / 2
// (wgmma's D fragment), staged at float4 (j' / 8) 128 + thread (stage_dq).
template <typename T, typename F>
__global__ void sm90_dq_convert_kernel(const float* __restrict__ dq_accum, T* __restrict__ dq, int64_t n8, float scale,
                                       Dims dims) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n8) return;
  const int64_t row = i / (dims.D / 8), pair = row / dims.T;  // packed row pair T + pos
  const int col = static_cast<int>(i - row * (dims.D / 8)) * 8, pos = static_cast<int>(row - pair * dims.T);
  const int nq = (dims.T + F::kBr - 1) / F::kBr, r = pos % F::kBr % 64, j = col % F::kDqCols;
  const int c = col / F::kDqCols * F::kRowSlices + pos % F::kBr / 64;
  const float* slice = dq_accum + ((pair * nq + pos / F::kBr) * F::kConsumers + c) * (F::kDQBytes / 4);
  const float* at = slice + 4 * (j / 8 * 128 + 32 * (r / 16) + 4 * (r % 8)) + 2 * (r % 16 / 8);
  uint32_t out[4];
#pragma unroll
  for (int t = 0; t < 4; ++t) {  // columns j + 2t, + 1: thread + t, the same two accumulators
    const float2 x = *reinterpret_cast<const float2*>(at + 4 * t);
    out[t] = mma::pack2<T>(x.x * scale, x.y * scale);
  }
  ptx::store_16(dq + dims.dq.pair(static_cast<int>(pair), dims.H) + static_cast<int64_t>(pos) * dims.dq.t + col,
                make_uint4(out[0], out[1], out[2], out[3]));
}

}  // namespace keel::cuda::attn::sm90
