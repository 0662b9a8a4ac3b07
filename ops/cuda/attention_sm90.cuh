// The pieces of keel's Hopper attention kernels (sm_90a) around the algorithm: the matrix
// descriptors of the swizzled tiles that TMA writes, the rings of mbarriers between the producer
// warpgroup and the consumers, the turns the consumer warpgroups take at the tensor cores, and
// the tensor maps. attention_sm90_forward.cu and attention_sm90_backward.cu are built from them;
// docs/attention-kernels.md, section 6.1, walks the forward.
#pragma once

#include "core/cuda/ptx.cuh"
#include "core/cuda/tensor_map.h"
#include "core/cuda/ptx_sm90.cuh"
#include "core/cuda/wgmma.cuh"
#include "ops/cuda/attention_common.cuh"
#include "ops/cuda/common.cuh"

namespace keel::cuda::attn::sm90 {

// The descriptor of a tile of 128-byte rows written with the 128-byte swizzle (8 rows 1024 bytes
// apart; lbo: the next panel of an MN-major operand, 0 for a K-major one), from which k_major and
// mn_major step. A kernel builds it once per tile and adds constant offsets per k-step.
__device__ __forceinline__ uint64_t tile_descriptor(uint32_t tile, uint32_t lbo) {
  return ptx::wgmma_descriptor(tile, lbo, 1024, ptx::Swizzle::b128);
}

// A descriptor `bytes` further into shared memory: its address field (bits 0-13) counts 16-byte
// units, and an address inside the 228 KB of shared memory never carries out of it.
__device__ __forceinline__ uint64_t advanced(uint64_t desc, uint32_t bytes) { return desc + bytes / 16; }

// A K-major operand (rows of the tile are M or N, its columns k) at k-step kk (columns 16 kk ..
// 16 kk + 15), which start 32 bytes into a 128-byte row of panel kk / 4 (panels of `rows` rows).
__device__ __forceinline__ uint64_t k_major(uint64_t tile, int rows, int kk) {
  return advanced(tile, (kk / 4) * rows * 128 + (kk % 4) * 32);
}

// V as the B operand of P V (k = keys 16 kk .., N = the head's columns): MN-major, each key's
// columns contiguous; the next 64 columns are the next panel (the tile descriptor's lbo), the next
// 8 keys 1024 bytes on.
__device__ __forceinline__ uint64_t mn_major(uint64_t tile, int kk) { return advanced(tile, kk * 16 * 128); }

// The mbarriers of the block's copies: Q's, and a ring of kStages slots for K and one for V, each
// slot with a `full` barrier (the producer's arrive_expect_tx; the copy's bytes complete it) and
// an `empty` one (one arrival per consumer warp). K and V have barriers of their own because a
// consumer is done with a tile's K after its S product and with its V only after its P V
// product, which it issues a turn later (attention_sm90_forward.cu, consume).
struct Ring {
  uint64_t *full, *empty;
};
struct Barriers {
  uint64_t* q_full;
  Ring k, v;
  __device__ explicit Barriers(uint64_t* at, int stages)
      : q_full(at), k{at + 1, at + 1 + stages}, v{at + 1 + 2 * stages, at + 1 + 3 * stages} {}
};

// Where a consumer is in the rings: the slot of its current key tile and the parity that tile's
// round waits on (round r: parity r & 1), stepped tile by tile instead of recomputed from the
// tile's index (a division, a remainder and their shifts at every wait and release).
template <int kStages>
struct RingPos {
  int slot = 0;
  uint32_t parity = 0;
  __device__ RingPos next() const {
    return slot + 1 == kStages ? RingPos{0, parity ^ 1u} : RingPos{slot + 1, parity};
  }
};

// The producer's copy of tile kt of an operand into its ring's slot at.slot (`dst`), once the
// consumers emptied it (the slot's previous round: parity at.parity ^ 1, so the first round
// passes at once: ptx_sm90.cuh). Coordinates (column, row, head, batch): rows past the sequence
// end arrive as zeros. A tile is kRows rows of kPanels panels (64 columns, kRows x 128 bytes each).
template <int kRows, int kPanels, int kStages>
__device__ void load_tile(unsigned char* dst, const CUtensorMap* map, const Ring& ring, RingPos<kStages> at, int kt,
                          int h, int b) {
  ptx::mbarrier_wait_parity(ring.empty + at.slot, at.parity ^ 1);
  ptx::mbarrier_arrive_expect_tx(ring.full + at.slot, kRows * kPanels * 128);
  for (int p = 0; p < kPanels; ++p) {
    const int32_t c[4] = {64 * p, kt * kRows, h, b};
    ptx::tma_load(dst + p * kRows * 128, map, c, ring.full + at.slot);
  }
}

// A consumer warp is done with a slot: every lane's wgmmas that read it have completed (their
// waits returned), then one arrival for the warp.
__device__ __forceinline__ void release(uint64_t* empty, int lane) {
  __syncwarp();
  if (lane == 0) ptx::mbarrier_arrive(empty);
}

// A key tile the warpgroup computes nothing in (a local head's warpgroup outside its band): its
// K and V slots are released as soon as their copies have landed (a slot released earlier
// could be refilled while its copy is still in flight).
template <int kStages>
__device__ __forceinline__ void skip_tile(const Barriers& bars, RingPos<kStages> at, int lane) {
  ptx::mbarrier_wait_parity(bars.k.full + at.slot, at.parity);
  release(bars.k.empty + at.slot, lane);
  ptx::mbarrier_wait_parity(bars.v.full + at.slot, at.parity);
  release(bars.v.empty + at.slot, lane);
}

// The kConsumers consumer warpgroups take turns at the tensor cores (FlashAttention-3's
// ping-pong, round robin for three): a warpgroup issues its products only in its turn, and hands
// the turn to the next as soon as they are issued, so that one warpgroup's softmax runs while
// another's products do. Turn k of warpgroup c is phase k of named barrier 1 + c: c's 128 threads
// sync on it, the warpgroup before it arrives on it when its own turn ends. The last warpgroup
// arrives once first (warpgroup 0 goes first) and leaves out its last hand-over, so every
// barrier ends with no phase open. All warpgroups take the same turns (the forward's consume:
// one a key tile of the block and one more), those they issue nothing in included. Barriers 1
// .. kConsumers are the turns'; kFree is the first id left for the kernel.
template <int kConsumers>
struct Turns {
  static_assert(kConsumers == 2 || kConsumers == 3, "turns for two or three consumer warpgroups");
  static constexpr int kThreads = 256;  // the warpgroup whose turn it is, and the one handing it over
  static constexpr int kFree = 1 + kConsumers;
  int own, next;
  __device__ explicit Turns(int c) : own(1 + c), next(1 + (c + 1) % kConsumers) {
    if (c == kConsumers - 1) ptx::named_barrier_arrive(1, kThreads);
  }
  __device__ void take() const { ptx::named_barrier_sync(own, kThreads); }
  __device__ void pass(bool last) const {
    if (!(last && own == kConsumers)) ptx::named_barrier_arrive(next, kThreads);
  }
  // A turn with nothing to issue.
  __device__ void idle(bool last) const {
    take();
    pass(last);
  }
};

// A key tile of the block (in the rings at `at`) when the warpgroup computes nothing in it: its
// slots released (skip_tile) and its turn taken and passed at once.
template <int kStages, int kConsumers>
__device__ __forceinline__ void idle_tile(const Barriers& bars, RingPos<kStages> at, int lane,
                                          const Turns<kConsumers>& turns) {
  skip_tile(bars, at, lane);
  turns.idle(false);
}

// Host side: the tensor maps through which the kernels read their tiles (q, k, v, dO) and write
// the forward's (out).
// A tensor map of one (B, H, T, D) operand: boxes of 64 columns x `rows` rows of one head.
// Dimensions of one element ignore their stride, which TMA still wants a multiple of 16.
inline CUtensorMap operand_map(const Tensor& x, const attn::Rows& r, int64_t B, int64_t H, int64_t T, int64_t D,
                               int rows) {
  auto stride = [](int64_t n, int64_t elems) { return n == 1 ? uint64_t(16) : uint64_t(elems) * 2; };
  return tensor_map(x.raw_data(), x.dtype(), {uint64_t(D), uint64_t(T), uint64_t(H), uint64_t(B)},
                    {uint64_t(r.t) * 2, stride(H, r.h_), stride(B, r.b_)}, {64, uint32_t(rows), 1, 1},
                    TmaSwizzle::b128);
}

// Whether TMA can read or write x's rows as attn::Rows r describes them: 16-byte aligned start
// and strides.
inline bool tma_addressable(const Tensor& x, const attn::Rows& r, int64_t B, int64_t H) {
  auto ok = [](int64_t n, int64_t elems) { return n == 1 || elems * 2 % 16 == 0; };
  return reinterpret_cast<uintptr_t>(x.raw_data()) % 16 == 0 && r.t * 2 % 16 == 0 && ok(H, r.h_) && ok(B, r.b_);
}

// Whether the warpgroup kernels take a call: chosen (attention_kernel(), ops/cuda/attention.h),
// on a GPU that runs sm_90a, in bf16 or f16 at kernel widths 64 and 128 (D 40..128), with every
// operand TMA moves addressable: q, k, v and x (the forward's out, the backward's dO) at rows
// x_rows. The one rule both entry points apply; where it says no, the mma kernels run the call.
inline bool sm90_takes(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& x, const attn::Rows& x_rows,
                       const attn::Dims& dims) {
  const int64_t B = q.size(0), H = q.size(1), width = attn::kernel_width(q.size(3), 16);
  return attention_kernel() == AttentionKernel::sm90 && dev::runs_sm90a(q.device().index) &&
         (q.dtype() == DType::bf16 || q.dtype() == DType::f16) && (width == 64 || width == 128) &&
         tma_addressable(q, dims.q, B, H) && tma_addressable(k, dims.k, B, H) && tma_addressable(v, dims.v, B, H) &&
         tma_addressable(x, x_rows, B, H);
}

}  // namespace keel::cuda::attn::sm90
