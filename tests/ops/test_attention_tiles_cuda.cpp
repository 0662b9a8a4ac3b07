// The tile arithmetic of the CUDA flash-attention kernels (ops/cuda/attention_tiles.h) against
// the definition of which keys a query sees, pair by pair: the key tiles a query tile visits and
// the query tiles a key tile is seen by (no tile without an allowed pair, none missed), the whole
// tiles that take the kernels' path without a mask (all_allowed, whole_key_tiles), and a local
// head's O(W) tiles. Host code
// only: it runs in every build, with or without a GPU.
#include <doctest/doctest.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "ops/cuda/attention_tiles.h"

TEST_CASE("CUDA attention tile ranges visit exactly the tiles holding allowed pairs") {
  using namespace keel::cuda::attn;
  // The spec's definition, written independently of the kernels' helpers.
  auto spec_allowed = [](int64_t i, int64_t j, int64_t w) { return j <= i && (w == 0 || j > i - w); };
  // (rows, keys) of every block and warp the kernels use, forward and backward, at every width
  // (the forward's warps of 32 and of 16 rows; width 256's 32-key and 32-query tiles), and more.
  const std::vector<std::pair<int, int>> tiles = {{64, 64}, {64, 32}, {32, 64}, {16, 16}, {1, 1},  {64, 16},
                                                  {128, 64}, {64, 128}, {16, 64}, {128, 32}, {16, 32}, {32, 16}};
  int checked = 0;
  for (int T : {1, 2, 7, 31, 32, 33, 63, 64, 65, 100, 129, 200})
    for (int64_t w_raw : {0, 1, 2, 3, 5, 16, 31, 32, 33, 50, 63, 64, 65, 100, 199, 200, 1000}) {
      const int w = normalize_window(w_raw, T);
      for (int i = 0; i < T; ++i)
        for (int j = 0; j < T; ++j) REQUIRE(allowed(i, j, w, T) == spec_allowed(i, j, w_raw));
      for (auto [br, bc] : tiles) {
        const int nq = (T + br - 1) / br, nk = (T + bc - 1) / bc;
        // Brute force: tile pair (qt, kt) holds an allowed pair or not.
        std::vector<std::vector<bool>> hit(nq, std::vector<bool>(nk, false));
        for (int i = 0; i < T; ++i)
          for (int j = 0; j < T; ++j)
            if (spec_allowed(i, j, w_raw)) hit[i / br][j / bc] = true;
        for (int qt = 0; qt < nq; ++qt) {
          const TileRange r = key_tiles_for_query_tile(qt, br, bc, T, w);
          for (int kt = 0; kt < nk; ++kt) {
            INFO("T " << T << " w " << w_raw << " tiles " << br << "x" << bc << " qt " << qt << " kt " << kt);
            REQUIRE(hit[qt][kt] == (kt >= r.begin && kt < r.end));
          }
        }
        for (int kt = 0; kt < nk; ++kt) {
          const TileRange r = query_tiles_for_key_tile(kt, bc, br, T, w);
          for (int qt = 0; qt < nq; ++qt) {
            INFO("T " << T << " w " << w_raw << " tiles " << br << "x" << bc << " kt " << kt << " qt " << qt);
            REQUIRE(hit[qt][kt] == (qt >= r.begin && qt < r.end));
          }
        }
        ++checked;
      }
    }
  CHECK(checked == 12 * 17 * 12);
}

TEST_CASE("CUDA attention's whole tiles: all_allowed and whole_key_tiles hold exactly when every pair is allowed") {
  using namespace keel::cuda::attn;
  auto spec_allowed = [](int i, int j, int w, int T) { return i < T && j <= i && (w == 0 || j > i - w); };
  int whole = 0, masked = 0;
  for (int T : {1, 16, 37, 70})
    for (int w_raw : {0, 1, 15, 16, 17, 40, 100}) {
      const int w = normalize_window(w_raw, T);
      for (auto [rows, cols] : {std::pair{16, 16}, {16, 128}, {64, 16}, {16, 64}, {3, 5}})
        for (int q0 = 0; q0 < T + 2; ++q0)
          for (int k0 = 0; k0 < T + 2; ++k0) {
            bool every = true;
            for (int i = q0; i < q0 + rows; ++i)
              for (int j = k0; j < k0 + cols; ++j) every = every && spec_allowed(i, j, w_raw, T);
            INFO("T " << T << " w " << w_raw << " tile " << rows << "x" << cols << " at " << q0 << ", " << k0);
            REQUIRE(all_allowed(q0, rows, k0, cols, w, T) == every);
            ++(every ? whole : masked);
            if (k0 % cols == 0) {  // a tile of the kernels' grid: whole_key_tiles says the same
              const TileRange r = whole_key_tiles(q0, rows, cols, w, T);
              REQUIRE((k0 / cols >= r.begin && k0 / cols < r.end) == every);
            }
          }
    }
  CHECK(whole > 1000);  // both classes are exercised
  CHECK(masked > 1000);
}

TEST_CASE("CUDA attention: a local head visits O(W) key tiles per query tile") {
  using namespace keel::cuda::attn;
  // The claim behind O(T * W): window 50 with 64-key tiles touches at most 2 tiles per 64 queries,
  // whatever T is; a global head touches qt + 1.
  const int T = 16384, nq = T / 64;
  int64_t local = 0, global = 0;
  for (int qt = 0; qt < nq; ++qt) {
    const TileRange l = key_tiles_for_query_tile(qt, 64, 64, T, 50), g = key_tiles_for_query_tile(qt, 64, 64, T, 0);
    CHECK(l.end - l.begin <= 2);
    CHECK(g.end - g.begin == qt + 1);
    local += l.end - l.begin;
    global += g.end - g.begin;
  }
  CHECK(local <= 2 * nq);
  CHECK(global == int64_t(nq) * (nq + 1) / 2);
}
