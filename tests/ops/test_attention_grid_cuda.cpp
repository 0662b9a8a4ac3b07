// The parity grid of the CUDA attention kernels: every dtype (f32, bf16, f16), head dims 32, 64 and
// 128 (and 8 to 256 off the kernel widths), T from 1 to 4096, windows from 1 (the query alone)
// through the tile widths to beyond T, and inputs that are strided views - each against the CPU op
// in f64, row by row (attention_cuda_check.h). How much runs depends on where
// (attention_test::grid_level): all of it on a GPU; on the emulated GPU in CI every short sequence
// and a covering subset of T = 1000 and 4096 (a global head at T = 4096 is about 10 s of emulation
// per dtype); under the sanitizers the short sequences.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "attention_cuda_check.h"
#include "core/autograd.h"
#include "ops/shape.h"

using namespace keel;
using namespace keel::attention_test;

namespace {

// Windows that give every kind of band at T: the query alone (1), 2, one tile width and either
// side of it (63, 64, 65), T - 1, and the global ones: T, beyond T, 0.
std::vector<int64_t> all_windows(int64_t T) { return {1, 2, 63, 64, 65, std::max<int64_t>(T - 1, 1), T, T + 7, 0}; }

// The short sequences: below, at and across the 16-row warp tiles, the 64-key and 128-row tiles.
void short_sequences(DType dt, uint64_t seed) {
  const bool sanitized = grid_level() == Grid::sanitized;
  const std::vector<int64_t> Ts = sanitized
                                      ? std::vector<int64_t>{1, 17, 65, 129}
                                      : std::vector<int64_t>{1, 2, 15, 16, 17, 63, 64, 65, 127, 128, 129, 255, 257};
  for (int64_t T : Ts)
    for (int64_t D : {32, 64, 128}) check_case({1, T, D, all_windows(T)}, dt, ++seed);
}

// One long sequence: every head dim, or the subset that the emulated GPU affords in CI.
void long_sequence(DType dt, int64_t T, uint64_t seed) {
  const Grid grid = grid_level();
  if (grid == Grid::sanitized) {
    MESSAGE("T = " << T << " is left to the emu tier and GPUs (KEEL_TEST_REDUCED under a sanitizer)");
    return;
  }
  std::vector<int64_t> dims{32, 64, 128}, windows{1, 50, 129, T, T + 7, 0};
  if (grid == Grid::emulated) {
    // One head dim per dtype (all three across the dtypes) and one global head (beyond T).
    dims = {dt == DType::f16 ? int64_t(128) : dt == DType::f32 ? int64_t(32) : int64_t(64)};
    windows = {1, 50, 129, T + 7};
    if (T > 1000) windows = {1, 50, T + 7};
  }
  for (int64_t D : dims) check_case({1, T, D, windows}, dt, ++seed);
}

// Head dims off the kernel widths (ops/cuda/attention_tiles.h: a head dim runs on the narrowest
// width >= it, its padding columns zero): every width with a padded head dim (8 and 16 on the
// tensor-core kernels' width 16, 24 on 32, 40 on 64, 72 and 96 on 128, 136 and 256 on 256; f32's
// narrowest width is 32), across the tiles of every width (width 256 has 32-key forward tiles and
// 64-key x 32-query backward tiles) and the band kinds: the query alone, a short window, a window
// across a tile edge, global. Outputs are poisoned and guarded (attention_cuda_check.h), so a
// padding column that is stored, or a real one that is not, fails.
void padded_head_dims(DType dt, uint64_t seed) {
  const std::vector<int64_t> Ts = grid_level() == Grid::sanitized ? std::vector<int64_t>{17, 65}
                                                                  : std::vector<int64_t>{1, 17, 65, 130};
  for (int64_t D : {8, 16, 24, 40, 72, 96, 136, 256})
    for (int64_t T : Ts) check_case({1, T, D, {1, 3, 33, 0}}, dt, ++seed);
}

}  // namespace

TEST_CASE("CUDA attention parity grid: head dims 8 .. 256 off the kernel widths, every dtype") {
  KEEL_REQUIRE_CUDA();
  for (DType dt : kDTypes) padded_head_dims(dt, 1700 + 100 * static_cast<int>(dt));
}

TEST_CASE("CUDA attention parity grid, f32: T = 1 .. 257, head dims 32/64/128, windows 1 .. beyond T") {
  KEEL_REQUIRE_CUDA();
  short_sequences(DType::f32, 1000);
}

TEST_CASE("CUDA attention parity grid, bf16: T = 1 .. 257, head dims 32/64/128, windows 1 .. beyond T") {
  KEEL_REQUIRE_CUDA();
  short_sequences(DType::bf16, 1100);
}

TEST_CASE("CUDA attention parity grid, f16: T = 1 .. 257, head dims 32/64/128, windows 1 .. beyond T") {
  KEEL_REQUIRE_CUDA();
  short_sequences(DType::f16, 1200);
}

TEST_CASE("CUDA attention parity grid: T = 1000, every dtype") {
  KEEL_REQUIRE_CUDA();
  for (DType dt : kDTypes) long_sequence(dt, 1000, 1300);
}

TEST_CASE("CUDA attention parity grid: T = 4096, bf16") {
  KEEL_REQUIRE_CUDA();
  long_sequence(DType::bf16, 4096, 1400);
}

TEST_CASE("CUDA attention parity grid: T = 4096, f16 and f32") {
  KEEL_REQUIRE_CUDA();
  long_sequence(DType::f16, 4096, 1500);
  long_sequence(DType::f32, 4096, 1600);
}

TEST_CASE("CUDA attention parity grid: q, k, v as the model's qkv split makes them (non-contiguous views)") {
  KEEL_REQUIRE_CUDA();
  // As nn::Attention::project: (B, T, 3C) -> split -> (B, T, H, D) -> transpose -> (B, H, T, D),
  // so each of q, k, v has strides (T * 3C, D, 3C, 1) into one shared buffer.
  const Device dev = Device::cuda(0);
  std::vector<int64_t> Ts{77};
  if (grid_level() != Grid::sanitized) Ts.push_back(1000);
  for (int64_t T : Ts) {
    const int64_t B = 2, H = 4, D = 32, C = H * D;
    const AttentionSpec spec{0, {0, 1, 9, 100}, 0};
    Generator gen(970 + T);
    const Tensor qkv_host = randn({B, T, 3 * C}, gen), g = randn({B, H, T, D}, gen);
    auto views = [&](const Tensor& qkv) {
      std::vector<Tensor> parts = split(qkv, {C, C, C}, -1);
      for (Tensor& t : parts) t = transpose(reshape(t, {B, T, H, D}), 1, 2);
      return parts;
    };
    for (DType dt : kDTypes) {
      Tensor leaf64 = qkv_host.to(dt).to(DType::f64).detach().set_requires_grad(true);
      std::vector<Tensor> v64 = views(leaf64);
      AttentionResult ref = attention(v64[0], v64[1], v64[2], spec);
      ref.out.backward(g.to(dt).to(DType::f64));
      INFO(dtype_name(dt) << ", T " << T);
      Tensor leaf = qkv_host.to(dt).to(dev).detach().set_requires_grad(true);
      std::vector<Tensor> v = views(leaf);
      REQUIRE_FALSE(v[0].is_contiguous());
      cudatest::poison({cudatest::bytes_of({B, H, T, D}, dt), cudatest::bytes_of({B, T, 3 * C}, dt)});
      AttentionResult r = attention(v[0], v[1], v[2], spec);
      check_close("out", r.out, ref.out, tolerance(dt));
      check_stat("max_logit", r.max_logit, ref.max_logit, stat_tolerance(dt));
      check_stat("max_range", r.max_range, ref.max_range, stat_tolerance(dt));
      r.out.backward(g.to(dt).to(dev));
      REQUIRE(leaf.grad().defined());
      check_close("d(qkv)", leaf.grad(), leaf64.grad(), tolerance(dt));
    }
  }
}
