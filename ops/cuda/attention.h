// The CUDA flash-attention kernels behind attention() (ops/attention.h), and the tile arithmetic
// they share with their CPU test. Plain C++: no CUDA headers, so the front end and the tests
// include it in any build; the kernel entry points are defined only when keel is built with CUDA.
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
#include <vector>

#include "core/tensor.h"

#if defined(__CUDACC__)
#define KEEL_ATTN_HD __host__ __device__
#else
#define KEEL_ATTN_HD
#endif

namespace keel::cuda {

namespace attn {

// Window as the kernels take it: 0 when the head is full causal, including every w >= T (such a
// band reaches key 0 from every row anyway), so that w < T whenever it is not 0.
inline int normalize_window(int64_t w, int64_t T) { return (w <= 0 || w >= T) ? 0 : static_cast<int>(w); }

// First key query i may see under window w (normalised).
KEEL_ATTN_HD inline int band_start(int i, int w) { return (w == 0 || i - w + 1 < 0) ? 0 : i - w + 1; }

// Whether query i sees key j: both inside the sequence, no future key, inside the band.
KEEL_ATTN_HD inline bool allowed(int i, int j, int w, int T) { return i < T && j <= i && j >= band_start(i, w); }

struct TileRange {
  int begin, end;  // tile indices [begin, end)
};

// Key tiles (of bc keys) that query tile qt (rows [qt*br, qt*br + br) ∩ [0, T)) visits: from the
// tile holding the first row's band start to the tile holding the last row itself.
KEEL_ATTN_HD inline TileRange key_tiles_for_query_tile(int qt, int br, int bc, int T, int w) {
  const int first_row = qt * br;
  const int last_row = (first_row + br < T ? first_row + br : T) - 1;
  return {band_start(first_row, w) / bc, last_row / bc + 1};
}

// Query tiles (of br rows) that see key tile kt (keys [kt*bc, kt*bc + bc) ∩ [0, T)): from the tile
// holding the first key (no query sees a future key) to the tile holding the last query whose band
// still reaches the tile's last key, j + w - 1 (or the end of the sequence for a global head).
KEEL_ATTN_HD inline TileRange query_tiles_for_key_tile(int kt, int bc, int br, int T, int w) {
  const int first_key = kt * bc;
  const int last_key = (first_key + bc < T ? first_key + bc : T) - 1;
  const int last_query = (w == 0 || last_key + w - 1 >= T) ? T - 1 : last_key + w - 1;
  return {first_key / br, last_query / br + 1};
}

constexpr int kMaxHeads = 128;          // windows travel to the kernels by value
constexpr int kHeadDims[] = {32, 64, 128};  // the head dims the kernels are compiled for

}  // namespace attn

#if defined(KEEL_WITH_CUDA)
// Same contracts as keel::cpu::attention_forward/backward (ops/attention.h), for CUDA tensors:
// q, k, v, out, dout, dq, dk, dv contiguous (B, H, T, D), one dtype of f32, bf16, f16, one device;
// lse (B, H, T) and max_logit (H) f32. D must be 32, 64 or 128 (ShapeError otherwise), H at most
// attn::kMaxHeads. Every output is fully overwritten, max_logit included. Asynchronous on the
// device's compute stream, like every keel kernel.
void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<int64_t>& window,
                       double scale, double softcap, Tensor& out, Tensor& lse, Tensor& max_logit);
void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                        const Tensor& dout, const std::vector<int64_t>& window, double scale, double softcap,
                        Tensor& dq, Tensor& dk, Tensor& dv);
#endif

}  // namespace keel::cuda
