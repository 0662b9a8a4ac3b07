// Flash-attention forward on Hopper (sm_90a), FlashAttention-3's way (Shah et al. 2024): the
// algorithm of the mma.sync kernel (attention_mma_forward.cu, whose header names the variables),
// with its three kinds of work moved onto sm_90's asynchronous units:
//   copies    a producer warpgroup issues TMA copies (core/cuda/ptx_sm90.cuh, tma_load) of Q once
//             and of K and V tile by tile into rings of kStages slots; mbarriers say when a
//             slot is full (the copy's bytes landed) and when it is empty again (every consumer
//             warp is done with it). No consumer thread computes an address or waits for a copy
//             of its own.
//   products  consumer warpgroups of 64 query rows each (two, three at width 64) compute S = Q K^T
//             and O += P V with wgmma (core/cuda/wgmma.cuh): a warpgroup's 128 threads issue one 64 x N x 16
//             product together, its operands read straight from shared memory through matrix
//             descriptors (P from registers), so no ldmatrix moves tiles into registers first.
//   registers setmaxnreg moves registers from the producer (24 a thread: it holds a loop counter)
//             to the consumers (Sm90Fwd: S, the previous tile's P and O are 160 at width 128).
// Everything between the products is the mma kernel's, shared with it
// (attention_online_softmax.cuh): wgmma's accumulator gives each warp 16 rows in mma.sync's C
// layout, so the online softmax, the masks of causal and windowed heads, the soft cap and the
// statistics run as they do there. TMA writes each tile with its 128-byte swizzle and wgmma's
// descriptors read it back with theirs: rows of 64 elements, so a tile of width 128 is two
// panels of 64 columns (docs/attention-kernels.md, section 6.1, walks the kernel step by step).
//
// The block's key tiles are those of its kBr rows (attn::key_tiles_for_query_tile); a warpgroup
// computes only the tiles its own 64 rows see (a local head's warpgroup skips most of them) but
// waits for each tile and marks it consumed, so that no warpgroup runs a round ahead of the ring.
//
// FlashAttention-3's two schedules of the products are here: the consumer warpgroups take turns
// at the tensor cores (ping-pong, attention_sm90.cuh's Turns), so that one's softmax runs while
// another's products do, and inside a warpgroup tile i's softmax runs while tile i - 1's P V
// product does (consume). The output leaves as FlashAttention-3's does: each warpgroup writes its rows of O
// into its rows of the Q tile, which its last S product has finished reading, and one thread
// stores them with TMA (the map clips the rows past the sequence and the padding columns).
#include "ops/cuda/attention_online_softmax.cuh"
#include "ops/cuda/attention_sm90.cuh"

namespace keel::cuda {

namespace {

using namespace attn;
using namespace attn::mma;
using namespace attn::sm90;

// Tiles and shared memory (bytes; 1024-aligned offsets: the 128-byte swizzle's period) for
// kernel width kWidth (64 or 128, kCols to the device functions, which take the struct):
// Q (kBr x kWidth), then kStages slots of K and V (kBc x kWidth each), then the barriers
// (attention_sm90.cuh, Barriers). A tile is kWidth / 64 panels of 64 columns, each panel rows x
// 128 bytes, as a TMA box of 64 columns writes it.
template <int kWidth, bool kNoSoftcap>
struct Sm90Fwd {
  // FlashAttention-3's shapes: two consumer warpgroups at width 128; three at width 64, whose
  // smaller products leave more of each tile's fixed work (softmax, waits) to hide. With 512
  // threads ptxas gives each 128 registers; a soft cap's tanh needs more (it spilled), so a
  // soft-capped kernel keeps two consumers at width 64 too.
  static constexpr int kCols = kWidth;
  static constexpr int kConsumers = kWidth == 64 && kNoSoftcap ? 3 : 2;
  static constexpr int kBr = 64 * kConsumers, kBc = 128, kStages = 2;
  static constexpr int kThreads = 128 * (1 + kConsumers);  // warpgroup 0 produces
  // setmaxnreg: the producer keeps 24 registers a thread, the consumers share the rest of the
  // SM's 64K (O, S and the previous tile's P live across the loop: 160 at width 128, 128 at 64).
  // ptxas allocates within the launch's share (65536 / kThreads), whatever setmaxnreg grants.
  static constexpr int kProducerRegs = 24, kConsumerRegs = kConsumers == 3 ? 160 : 240;
  static_assert(128 * (kProducerRegs + kConsumers * kConsumerRegs) <= 65536, "the SM's register file");
  static constexpr int kPanels = kWidth / 64;
  static constexpr int kQBytes = kBr * kWidth * 2, kTileBytes = kBc * kWidth * 2;
  static constexpr int kQ = 0, kK = kQBytes, kV = kK + kStages * kTileBytes, kBars = kV + kStages * kTileBytes;
  static constexpr int kBytes = kBars + 8 * (1 + 4 * kStages);  // Barriers: q_full, then K's and V's rings
  static_assert(kWidth == 64 || kWidth == 128, "panels of 64 columns, wgmma N of 64 or 128");
  static_assert(kBytes <= 227 * 1024, "must fit an H100's shared memory");
};

// The producer (one thread): Q's panels once, then K and V of each key tile into the next slot
// of their rings.
template <typename F>
__device__ void produce(const CUtensorMap* qm, const CUtensorMap* km, const CUtensorMap* vm, unsigned char* smem,
                        const Barriers& bars, int q0, int h, int b, TileRange tiles) {
  ptx::mbarrier_arrive_expect_tx(bars.q_full, F::kQBytes);
  for (int p = 0; p < F::kPanels; ++p) {
    const int32_t at[4] = {64 * p, q0, h, b};
    ptx::tma_load(smem + F::kQ + p * F::kBr * 128, qm, at, bars.q_full);
  }
  RingPos<F::kStages> at;
  for (int kt = tiles.begin; kt < tiles.end; ++kt, at = at.next()) {
    load_tile<F::kBc, F::kPanels>(smem + F::kK + at.slot * F::kTileBytes, km, bars.k, at, kt, h, b);
    load_tile<F::kBc, F::kPanels>(smem + F::kV + at.slot * F::kTileBytes, vm, bars.v, at, kt, h, b);
  }
}

// Issues s (this warp's 16 rows x kBc, the C layout) = the warpgroup's 64 query rows of the Q
// tile (q: the descriptor of its first row) times the K tile (k), transposed: kWidth / 16 chained
// wgmmas, one commit group. s reads as undefined until a wait covers the group.
template <typename T, typename F>
__device__ __forceinline__ void issue_scores(float (&s)[F::kBc / 8][4], uint64_t q, uint64_t k) {
  auto& d = reinterpret_cast<float(&)[F::kBc / 2]>(s);
  ptx::wgmma_fence_operand(d);
  ptx::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < F::kCols / 16; ++kk)
    ptx::wgmma_m64k16<F::kBc, T>(d, k_major(q, F::kBr, kk), k_major(k, F::kBc, kk), kk > 0);
  ptx::wgmma_commit_group();
}

// Issues o (16 rows x kWidth) += P V, one commit group: P in registers as A fragments (p, which
// must stay unchanged until a wait covers the group), V the tile whose descriptor is v.
template <typename T, typename F>
__device__ __forceinline__ void issue_pv(float (&o)[F::kCols / 8][4], const uint32_t (&p)[F::kBc / 16][4],
                                         uint64_t v) {
  auto& d = reinterpret_cast<float(&)[F::kCols / 2]>(o);
  ptx::wgmma_fence_operand(d);
  ptx::wgmma_fence();  // orders the registers written since the last wait (p, and o rescaled) before the products
#pragma unroll
  for (int kk = 0; kk < F::kBc / 16; ++kk) ptx::wgmma_m64k16_rs<F::kCols, T, true>(d, p[kk], mn_major(v, kk), true);
  ptx::wgmma_commit_group();
}

// The kernel's outputs and where this block works (dims stays the kernel's parameter: a copy of
// its windows would go to local memory).
struct FwdArgs {
  const CUtensorMap* out;  // O's map (box: 64 columns x 64 rows)
  float* lse;
  int bh, w, q0;
  TileRange tiles;  // the block's key tiles
};

// The online softmax of a key tile's scores s for this warp (tile classes as in the mma kernel,
// per warp: `whole` when every pair of its 16 rows is allowed, else masked); alpha is what O
// must be rescaled by.
template <bool kNoSoftcap, int kS>
__device__ __forceinline__ void tile_softmax(float (&s)[kS][4], const RowState& row, float log2_scale,
                                             const SoftCap& cap, const TilePlace& at, bool whole, float (&alpha)[2]) {
  if (whole)
    softmax_update<false, kNoSoftcap>(s, row, log2_scale, cap, at, alpha);
  else
    softmax_update<true, kNoSoftcap>(s, row, log2_scale, cap, at, alpha);
}

// O / l of this warp's rows into the warpgroup's rows of the Q tile (q: its first row in panel 0;
// Q's last reader, the last S product, has completed), where the TMA store reads them: row r,
// column 8 d + 2 t of panel d / 8 at chunk (d % 8) XOR (r % 8) of the row's 128 bytes, r % 8 being
// the lane's g (so a warp's 4-byte stores hit 32 different banks). lse = m + log l; a NaN l (a
// NaN logit) stays NaN, so the test is == 0. Folds the rows' statistics into logit_bits and
// range_bits.
template <typename T, typename F, bool kNoSoftcap>
__device__ void stage_rows(const FwdArgs& args, const Dims& dims, unsigned char* q, int warp, const int (&rows)[2],
                           const float (&o)[F::kCols / 8][4], const RowState& row, unsigned& logit_bits,
                           unsigned& range_bits) {
  const int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
  const float vs = kNoSoftcap ? dims.scale : 1.0f;  // score -> logit
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float sum = quad_sum(row.l[r]);
    const float inv = sum == 0.0f ? 0.0f : 1.0f / sum;
    unsigned char* dst = q + (16 * warp + g + 8 * r) * 128 + 4 * t;
#pragma unroll
    for (int d = 0; d < F::kCols / 8; ++d)
      *reinterpret_cast<uint32_t*>(dst + d / 8 * F::kBr * 128 + ((d % 8 ^ g) << 4)) =
          pack2<T>(o[d][2 * r] * inv, o[d][2 * r + 1] * inv);
    if (rows[r] >= dims.T) continue;
    const float hi = row.m[r] * vs;
    if (t == 0) args.lse[static_cast<int64_t>(args.bh) * dims.T + rows[r]] = hi + logf(sum);
    add_row_stats(hi, row.lo[r], vs, logit_bits, range_bits);
  }
}

// The warpgroup's rows of O, staged in q by stage_rows, to global memory: every thread's writes
// fenced for the async proxy, the warpgroup's own named barrier (after the turns' ids), then
// one thread issues a TMA store per panel and waits until they have read shared memory.
template <typename F>
__device__ void store_rows(const FwdArgs& args, unsigned char* q, int c, int first, int h, int b) {
  ptx::fence_proxy_async();
  ptx::named_barrier_sync(Turns<F::kConsumers>::kFree + c, 128);
  if (threadIdx.x % 128 != 0) return;
  for (int p = 0; p < F::kPanels; ++p) {
    const int32_t at[4] = {64 * p, first, h, b};
    ptx::tma_store(args.out, at, q + p * F::kBr * 128);
  }
  ptx::bulk_commit_group();
  ptx::bulk_wait_group_read<0>();
}

// A consumer warpgroup c (0 .. kConsumers - 1: query rows q0 + 64 c ..): every key tile of the block, then
// out and lse of its rows; returns its statistics' bits through logit_bits and range_bits.
// FlashAttention-3's overlap inside a warpgroup: in the turn of its tile i it issues S_i and then
// P V of tile i - 1 (P kept as A fragments in p), waits for S_i alone and runs S_i's softmax
// while its own P V runs; O is rescaled once that product has completed. Its tiles (mine, a
// range of the block's) are a first tile (S only), the steady loop, and the last P V in the turn
// after; the block's other tiles are skipped, one turn each; and one turn more, the last.
template <typename T, typename F, bool kNoSoftcap>
__device__ void consume(const FwdArgs& args, const Dims& dims, unsigned char* smem, const Barriers& bars, int c,
                        unsigned& logit_bits, unsigned& range_bits) {
  constexpr int kS = F::kStages;
  const int seq_len = dims.T, w = args.w;
  const int warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int first = args.q0 + 64 * c, top = first + 16 * warp;  // the warpgroup's, the warp's first row
  const int rows[2] = {top + g, top + g + 8};
  const TileRange mine =
      first < seq_len ? key_tiles_for_query_tile(first / 64, 64, F::kBc, seq_len, w) : TileRange{0, 0};
  const TileRange whole = whole_key_tiles(top, 16, F::kBc, w, seq_len);  // the warp's tiles without a mask
  // Descriptors of this warpgroup's rows of Q and of the first K and V slots; a slot is a constant
  // number of 16-byte units further.
  const uint32_t base = ptx::shared_address(smem);
  const uint64_t q_desc = tile_descriptor(base + F::kQ + 64 * c * 128, 0);
  const uint64_t k_desc = tile_descriptor(base + F::kK, 0), v_desc = tile_descriptor(base + F::kV, F::kBc * 128);
  auto slot = [](uint64_t desc, int s) { return advanced(desc, s * F::kTileBytes); };
  float o[F::kCols / 8][4] = {}, sc[F::kBc / 8][4], alpha[2];
  uint32_t p[F::kBc / 16][4];  // P of the tile whose P V is issued next
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {}, lo[2] = {INFINITY, INFINITY};
  const RowState row{m, l, lo};
  const float log2_scale = (kNoSoftcap ? dims.scale : 1.0f) * kLog2e;
  const SoftCap cap(dims);
  auto& d_s = reinterpret_cast<float(&)[F::kBc / 2]>(sc);
  auto& d_o = reinterpret_cast<float(&)[F::kCols / 2]>(o);
  const Turns<F::kConsumers> turns(c);
  ptx::mbarrier_wait_parity(bars.q_full, 0);
  int kt = args.tiles.begin;  // the block's key tile
  RingPos<kS> at, prev;       // its place in the rings, and the previous tile's
  bool last_taken = false;    // the turn after the block's last tile
  for (; kt < mine.begin; ++kt, at = at.next()) idle_tile(bars, at, lane, turns);
  if (mine.begin < mine.end) {
    ptx::mbarrier_wait_parity(bars.k.full + at.slot, at.parity);
    turns.take();
    issue_scores<T, F>(sc, q_desc, slot(k_desc, at.slot));
    turns.pass(false);
    ptx::wgmma_wait_group<0>();
    ptx::wgmma_fence_operand(d_s);
    tile_softmax<kNoSoftcap>(sc, row, log2_scale, cap, TilePlace{rows, kt * F::kBc, t, w, seq_len},
                             whole.contains(kt), alpha);
    release(bars.k.empty + at.slot, lane);  // O is 0: nothing to rescale
    to_a_fragments<T>(p, sc);
    for (++kt, prev = at, at = at.next(); kt < mine.end; ++kt, prev = at, at = at.next()) {  // S, previous P V
      ptx::mbarrier_wait_parity(bars.k.full + at.slot, at.parity);
      ptx::mbarrier_wait_parity(bars.v.full + prev.slot, prev.parity);
      turns.take();
      issue_scores<T, F>(sc, q_desc, slot(k_desc, at.slot));
      issue_pv<T, F>(o, p, slot(v_desc, prev.slot));
      turns.pass(false);
      ptx::wgmma_wait_group<1>();  // S; the P V issued after it may still run
      ptx::wgmma_fence_operand(d_s);
      tile_softmax<kNoSoftcap>(sc, row, log2_scale, cap, TilePlace{rows, kt * F::kBc, t, w, seq_len},
                               whole.contains(kt), alpha);
      release(bars.k.empty + at.slot, lane);
      ptx::wgmma_wait_group<0>();
      ptx::wgmma_fence_operand(d_o);
      release(bars.v.empty + prev.slot, lane);
      rescale_rows(o, alpha);
      to_a_fragments<T>(p, sc);
    }
    last_taken = kt == args.tiles.end;  // the last tile's P V, in the next turn: tile kt's, or the last
    ptx::mbarrier_wait_parity(bars.v.full + prev.slot, prev.parity);
    turns.take();
    issue_pv<T, F>(o, p, slot(v_desc, prev.slot));
    turns.pass(last_taken);
    ptx::wgmma_wait_group<0>();
    ptx::wgmma_fence_operand(d_o);
    release(bars.v.empty + prev.slot, lane);
    if (!last_taken) {  // that turn was tile kt's, a tile without products of this warpgroup's
      skip_tile(bars, at, lane);
      ++kt, at = at.next();
    }
  }
  for (; kt < args.tiles.end; ++kt, at = at.next()) idle_tile(bars, at, lane, turns);
  if (!last_taken) turns.idle(true);
  unsigned char* q_rows = smem + F::kQ + 64 * c * 128;
  stage_rows<T, F, kNoSoftcap>(args, dims, q_rows, warp, rows, o, row, logit_bits, range_bits);
  if (first < seq_len) store_rows<F>(args, q_rows, c, first, blockIdx.y, blockIdx.z);
}

// Shapes: q, k, v (B, H, T, D) through their tensor maps (dims {D, T, H, B}, boxes of 64 columns
// and kBr (q) or kBc rows, 128-byte swizzle); out (B, H, T, D) through its map (boxes {64, 64, 1,
// 1}); lse (B, H, T) f32; max_logit, max_range (H) f32 as bits, zeroed before the launch. Grid
// (ceil(T / kBr), H, B) as the mma kernel's, longest query tiles first; Sm90Fwd::kThreads
// threads: warpgroup 0 produces, the others consume.
template <typename T, int kWidth, bool kNoSoftcap>
__global__ void __launch_bounds__(Sm90Fwd<kWidth, kNoSoftcap>::kThreads, 1)
    attention_sm90_forward_kernel(const __grid_constant__ CUtensorMap q_map, const __grid_constant__ CUtensorMap k_map,
                                  const __grid_constant__ CUtensorMap v_map, const __grid_constant__ CUtensorMap o_map,
                                  float* __restrict__ lse, unsigned* __restrict__ max_logit,
                                  unsigned* __restrict__ max_range, Dims dims) {
  using F = Sm90Fwd<kWidth, kNoSoftcap>;
  KEEL_DYNAMIC_SHARED(unsigned char, smem, 1024);
  KEEL_SHARED(unsigned, block_logit);
  KEEL_SHARED(unsigned, block_range);
  const Barriers bars(reinterpret_cast<uint64_t*>(smem + F::kBars), F::kStages);
  const int h = blockIdx.y, b = blockIdx.z, qt = gridDim.x - 1 - blockIdx.x;
  const FwdArgs args{&o_map, lse, b * dims.H + h, dims.window[h], qt * F::kBr,
                        key_tiles_for_query_tile(qt, F::kBr, F::kBc, dims.T, dims.window[h])};
  if (threadIdx.x == 0) {
    block_logit = block_range = 0;
    ptx::mbarrier_init(bars.q_full, 1);
    const Ring rings[2] = {bars.k, bars.v};
    for (const Ring& ring : rings)
      for (int s = 0; s < F::kStages; ++s) {
        ptx::mbarrier_init(ring.full + s, 1);                    // the producer's arrive_expect_tx
        ptx::mbarrier_init(ring.empty + s, 4 * F::kConsumers);  // one arrival per consumer warp
      }
    ptx::fence_proxy_async();  // the barriers are initialized before the copies complete on them
  }
  __syncthreads();
  unsigned logit_bits = 0, range_bits = 0;
  if (threadIdx.x < 128) {
    ptx::setmaxnreg_dec<F::kProducerRegs>();
    if (threadIdx.x == 0) produce<F>(&q_map, &k_map, &v_map, smem, bars, args.q0, h, b, args.tiles);
  } else {
    ptx::setmaxnreg_inc<F::kConsumerRegs>();
    // The warpgroup, as lane 0's: a value the compiler knows is the same in the whole warp, so
    // the descriptors built from it live in uniform registers, where wgmma reads them.
    const int c = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0) - 1;
    consume<T, F, kNoSoftcap>(args, dims, smem, bars, c, logit_bits, range_bits);
  }
  publish_head_stats(logit_bits, range_bits, &block_logit, &block_range, max_logit + h, max_range + h);
}

}  // namespace

bool attention_sm90_forward(const Tensor& q_in, const Tensor& k, const Tensor& v, const attn::Dims& dims_in,
                            Tensor& out, Tensor& lse, Tensor& max_logit, Tensor& max_range) {
  constexpr const char* kOp = "attention (CUDA forward, sm90)";
  if (!sm90_takes(q_in, k, v, out, dims_in.out, dims_in)) return false;
  const int64_t B = q_in.size(0), H = q_in.size(1), T = q_in.size(2), D = q_in.size(3);
  attn::Dims dims = dims_in;
  const Tensor q = with_positive_scale(q_in, dims);  // packed when negated: addressable too
  const int dev = q.device().index;
  visit_half(kOp, q.dtype(), [&]<typename E>() {
    with_width<16>(kOp, D, [&]<int kWidth>() {
      if constexpr (kWidth == 64 || kWidth == 128) {
        auto launch = [&]<bool kNoSoftcap>() {
          using F = Sm90Fwd<kWidth, kNoSoftcap>;
          const CUtensorMap qm = operand_map(q, dims.q, B, H, T, D, F::kBr);
          const CUtensorMap km = operand_map(k, dims.k, B, H, T, D, F::kBc);
          const CUtensorMap vm = operand_map(v, dims.v, B, H, T, D, F::kBc);
          const CUtensorMap om = operand_map(out, dims.out, B, H, T, D, 64);  // a consumer warpgroup's rows
          const dim3 grid(static_cast<unsigned>((T + F::kBr - 1) / F::kBr), static_cast<unsigned>(H),
                          static_cast<unsigned>(B));
          launch_threads(attention_sm90_forward_kernel<E, kWidth, kNoSoftcap>, grid, F::kThreads, F::kBytes, dev, qm,
                         km, vm, om, static_cast<float*>(lse.raw_data()),
                         static_cast<unsigned*>(max_logit.raw_data()), static_cast<unsigned*>(max_range.raw_data()),
                         dims);
        };
        if (dims.softcap == 0.0f)
          launch.template operator()<true>();
        else
          launch.template operator()<false>();
      }
    });
  });
  return true;
}

}  // namespace keel::cuda
