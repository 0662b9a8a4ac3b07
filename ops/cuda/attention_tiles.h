// The tile arithmetic of the CUDA flash-attention kernels (attention_forward.cu,
// attention_backward.cu), host and device alike, so a CPU test checks it in any build.
//
// Tiling, in one paragraph. Every kernel works on (batch b, head h) slices of (B, H, T, D) tensors,
// cut into tiles of consecutive rows: a block of the forward owns one query tile and streams the
// key tiles its rows can see; the backward's dK/dV block owns one key tile and streams the query
// tiles that can see it; its dQ block does as the forward. Query i sees keys j in its band
// [band_start(i, w), i] (w = 0: full causal; w >= 1: the last w keys, the query's own included).
// Bands of consecutive rows slide by one, so the union over a tile's rows is one contiguous range
// of keys, and the tiles a block visits are one contiguous range of tile indices: the functions
// below give it exactly (no tile without an allowed pair, none missed), which is what makes a
// local head cost O(T * W) and a global one skip the future half of the matrix.
#pragma once

#include <cstdint>

#include "core/host_device.h"
#include "ops/attention_band.h"

namespace keel::cuda {

namespace attn {

// Window as the kernels take it: 0 when the head is full causal, including every w >= T (such a
// band reaches key 0 from every row anyway), so that w < T whenever it is not 0.
inline int normalize_window(int64_t w, int64_t T) { return (w <= 0 || w >= T) ? 0 : static_cast<int>(w); }

// Whether query i sees key j: both inside the sequence, no future key, inside the band.
KEEL_HD inline bool allowed(int i, int j, int w, int T) { return i < T && j <= i && j >= band_start(i, w); }

struct TileRange {
  int begin, end;  // tile indices [begin, end)
  KEEL_HD bool contains(int i) const { return i >= begin && i < end; }
};

// Whether every pair of queries [q0, q0 + rows) and keys [k0, k0 + cols) is allowed: the queries
// are inside the sequence, the last key is at or before the first query, and the first key is
// inside the last query's band (bands slide right with the query). The flash kernels give such
// tiles (most tiles of a long sequence) a path without a per-element test.
KEEL_HD inline bool all_allowed(int q0, int rows, int k0, int cols, int w, int T) {
  return q0 + (rows - 1) < T && k0 + (cols - 1) <= q0 && k0 >= band_start(q0 + (rows - 1), w);
}

// The key tiles (of bc keys) where all_allowed holds for queries [q0, q0 + rows): one range,
// from the first tile inside the last query's band to the last tile at or before the first
// query; empty when the queries run past the sequence. A kernel compares a tile's index with it
// instead of testing the tile's corners each time.
KEEL_HD inline TileRange whole_key_tiles(int q0, int rows, int bc, int w, int T) {
  if (q0 + (rows - 1) >= T) return {0, 0};
  return {(band_start(q0 + (rows - 1), w) + bc - 1) / bc, (q0 + 1) / bc};
}


// Key tiles (of bc keys) that query tile qt (rows [qt*br, qt*br + br) ∩ [0, T)) visits: from the
// tile holding the first row's band start to the tile holding the last row itself.
KEEL_HD inline TileRange key_tiles_for_query_tile(int qt, int br, int bc, int T, int w) {
  const int first_row = qt * br;
  const int last_row = (first_row + br < T ? first_row + br : T) - 1;
  return {band_start(first_row, w) / bc, last_row / bc + 1};
}

// Query tiles (of br rows) that see key tile kt (keys [kt*bc, kt*bc + bc) ∩ [0, T)): from the tile
// holding the first key (no query sees a future key) to the tile holding the last query whose band
// still reaches the tile's last key, j + w - 1 (or the end of the sequence for a global head).
KEEL_HD inline TileRange query_tiles_for_key_tile(int kt, int bc, int br, int T, int w) {
  const int first_key = kt * bc;
  const int last_key = (first_key + bc < T ? first_key + bc : T) - 1;
  const int last_query = (w == 0 || last_key + w - 1 >= T) ? T - 1 : last_key + w - 1;
  return {first_key / br, last_query / br + 1};
}

constexpr int kMaxHeads = 128;  // windows travel to the kernels by value

// Head dims: every multiple of 8 from 8 to 256, FlashAttention-2's set. Compiling a kernel per
// head dim would be 32 instantiations of every kernel (in nvcc and four host-compiler presets), so
// the kernels are compiled for a few widths, powers of two, and head dim D runs on the narrowest
// width kWidth >= D: tile columns D..kWidth-1 are loaded as zeros, which add exact zeros to every dot
// product over the head dim (Q K^T, dO V^T) and make output columns that are zero and never
// stored, so the result is bit for bit that of a D-wide kernel. Global rows keep their own stride. The
// price is the padded columns' share of the work, under 2x and 0 at the powers of two themselves.
constexpr int kMaxHeadDim = 256;
inline bool head_dim_supported(int64_t D) { return D >= 8 && D <= kMaxHeadDim && D % 8 == 0; }
// The width that runs head dim D: the smallest power of two >= D, but at least `narrowest` (16 for
// the tensor-core kernels, whose k-step is 16 wide; 32 for the f32 kernels, a column per lane).
constexpr int kernel_width(int64_t D, int narrowest) {
  int w = narrowest;
  while (w < D) w *= 2;
  return w;
}

}  // namespace attn

}  // namespace keel::cuda
