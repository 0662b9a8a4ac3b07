// Hopper's warpgroup attention kernels (ops/cuda/attention_sm90_forward.cu, _backward.cu) and how
// they are chosen (ops/cuda/attention.h: set_attention_kernel, KEEL_ATTENTION). Their parity grid
// is the mma kernels' own, run again with KEEL_ATTENTION=sm90 (tests/ops/CMakeLists.txt); here:
// that the choice reaches the kernels where they run (a GPU of compute capability 9.0, which the
// emulated H100 is) and nowhere else, counted by the tensor maps each encodes (4: the forward's q,
// k, v, out; the backward's q, k, v, dO), and that a KEEL_ATTENTION keel does not know is one
// clear error.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <iterator>
#include <string>

#include "attention_cuda_check.h"
#include "core/cuda/counters.h"
#include "core/cuda/runtime.h"
#include "core/error.h"

using namespace keel;
using namespace keel::attention_test;

namespace {

// Tensor maps one forward of (B, H, T, D) in dt encodes.
uint64_t maps_of_forward(int64_t T, int64_t D, DType dt, const std::vector<int64_t>& window) {
  Generator gen(7);
  const Device dev = Device::cuda(0);
  const Shape shape{1, static_cast<int64_t>(window.size()), T, D};
  const Tensor q = randn(shape, gen).to(dt).to(dev), k = randn(shape, gen).to(dt).to(dev),
               v = randn(shape, gen).to(dt).to(dev);
  const uint64_t before = cuda::counters().tensor_maps;
  (void)attention(q, k, v, {0, window});
  return cuda::counters().tensor_maps - before;
}

// Tensor maps one backward of (B, H, T, D) in dt encodes (after its forward).
uint64_t maps_of_backward(int64_t T, int64_t D, DType dt, const std::vector<int64_t>& window) {
  Generator gen(8);
  const Device dev = Device::cuda(0);
  const int64_t H = static_cast<int64_t>(window.size());
  const Shape shape{1, H, T, D};
  const Tensor q = randn(shape, gen).to(dt).to(dev), k = randn(shape, gen).to(dt).to(dev),
               v = randn(shape, gen).to(dt).to(dev), g = randn(shape, gen).to(dt).to(dev);
  Tensor out = empty(shape, {dt, dev}), lse = empty({1, H, T}, {DType::f32, dev});
  Tensor max_logit = empty({H}, {DType::f32, dev}), max_range = empty({H}, {DType::f32, dev});
  const double scale = 1 / std::sqrt(static_cast<double>(D));
  cuda::attention_forward(q, k, v, window, scale, 0, out, lse, max_logit, max_range);
  Tensor dq = empty(shape, {dt, dev}), dk = empty(shape, {dt, dev}), dv = empty(shape, {dt, dev});
  const uint64_t before = cuda::counters().tensor_maps;
  cuda::attention_backward(q, k, v, out, lse, g, window, scale, 0, dq, dk, dv);
  return cuda::counters().tensor_maps - before;
}

}  // namespace

TEST_CASE("CUDA attention, sm90 chosen: the warpgroup forward runs on Hopper at head dims 40 .. 128, mma elsewhere") {
  KEEL_REQUIRE_CUDA();
  const uint64_t hopper = cuda::device_info(0).runs_sm90a() ? 4 : 0;  // the forward's tensor maps where the kernel runs
  {
    const cuda::AttentionKernelScope sm90(cuda::AttentionKernel::sm90);
    for (DType dt : {DType::bf16, DType::f16}) {
      INFO(dtype_name(dt));
      CHECK(maps_of_forward(70, 64, dt, {0, 5}) == hopper);
      CHECK(maps_of_forward(70, 128, dt, {0}) == hopper);
      CHECK(maps_of_forward(70, 40, dt, {3}) == hopper);   // width 64, columns 40.. zeros from TMA
      CHECK(maps_of_forward(70, 32, dt, {0}) == 0);        // width 32: the mma kernel
      CHECK(maps_of_forward(70, 256, dt, {0}) == 0);       // width 256: the mma kernel
    }
    CHECK(maps_of_forward(70, 64, DType::f32, {0}) == 0);  // f32: the exact FMA kernel
  }
  const cuda::AttentionKernelScope mma(cuda::AttentionKernel::mma);
  CHECK(maps_of_forward(70, 64, DType::bf16, {0}) == 0);
}

TEST_CASE("CUDA attention, sm90 chosen: the warpgroup backward runs where the forward does") {
  KEEL_REQUIRE_CUDA();
  const uint64_t hopper = cuda::device_info(0).runs_sm90a() ? 4 : 0;  // q, k, v and dO
  {
    const cuda::AttentionKernelScope sm90(cuda::AttentionKernel::sm90);
    for (DType dt : {DType::bf16, DType::f16}) {
      INFO(dtype_name(dt));
      CHECK(maps_of_backward(70, 64, dt, {0, 5}) == hopper);
      CHECK(maps_of_backward(70, 128, dt, {0}) == hopper);
      CHECK(maps_of_backward(70, 40, dt, {3}) == hopper);
      CHECK(maps_of_backward(70, 32, dt, {0}) == 0);
      CHECK(maps_of_backward(70, 256, dt, {0}) == 0);
    }
    CHECK(maps_of_backward(70, 64, DType::f32, {0}) == 0);
  }
  const cuda::AttentionKernelScope mma(cuda::AttentionKernel::mma);
  CHECK(maps_of_backward(70, 64, DType::bf16, {0}) == 0);
}

TEST_CASE("CUDA attention, sm90 chosen: matches the CPU on every head pattern, soft cap and scale sign") {
  KEEL_REQUIRE_CUDA();
  const cuda::AttentionKernelScope sm90(cuda::AttentionKernel::sm90);
  const std::vector<int64_t> ls = AttentionSpec::ls(6, 5, 50).window;
  const Case cases[] = {
      {2, 300, 64, ls},                          // LS: 5 local heads, 1 global
      {1, 257, 128, {0, 1, 127, 128, 129}},      // bands on the 128-key tiles
      {1, 130, 96, {0, 64}},                     // a padded head dim
      {1, 100, 64, {0, 7}, 0, 5.0, 3.0},         // soft cap
      {1, 66, 128, {0, 10}, -0.4, 0, 1.0},       // negative scale
  };
  // Under a sanitizer each case runs in one of the two dtypes, which differ only in conversions.
  const bool sanitized = grid_level() == Grid::sanitized;
  uint64_t seed = 5300;
  for (DType dt : {DType::bf16, DType::f16})
    for (size_t i = 0; i < std::size(cases); ++i)
      if (!sanitized || (i % 2 == 0) == (dt == DType::bf16)) check_case(cases[i], dt, ++seed);
}

TEST_CASE("CUDA attention: KEEL_ATTENTION chooses the bf16/f16 kernels, and a name keel does not know is an error") {
  KEEL_REQUIRE_CUDA();
  const char* env = std::getenv("KEEL_ATTENTION");
  const std::string name = env ? env : "";
  Generator gen(11);
  const Device dev = Device::cuda(0);
  const Tensor q = randn({1, 1, 8, 64}, gen).to(DType::bf16).to(dev);
  if (name.empty() || name == "mma" || name == "sm90") {
    CHECK(cuda::attention_kernel() == (name == "sm90" ? cuda::AttentionKernel::sm90 : cuda::AttentionKernel::mma));
    CHECK_NOTHROW((void)attention(q, q, q, {0, {0}}));
    return;
  }
  // ctest runs this case with KEEL_ATTENTION=fa9 (tests/ops/CMakeLists.txt).
  const std::string named = "KEEL_ATTENTION=" + name;
  CHECK_THROWS_WITH_AS((void)attention(q, q, q, {0, {0}}), doctest::Contains(named.c_str()), ConfigError);
  CHECK_THROWS_WITH_AS(cuda::attention_kernel(), doctest::Contains("mma (every GPU) or sm90"), ConfigError);
}
