// optim's kernels have the op shape (docs/ops.md): optim/cpu/*.h and optim/cuda/*.h declare the
// same functions, and without CUDA the CUDA ones raise DeviceError with the way out.
#include <doctest/doctest.h>

#include <string>
#include <type_traits>

#include "core/cuda/runtime.h"
#include "core/factory.h"
#include "optim/cpu/adamw.h"
#include "optim/cpu/grad_math.h"
#include "optim/cuda/adamw.h"
#include "optim/cuda/grad_math.h"

using namespace keel;

static_assert(std::is_same_v<decltype(optim::cpu::adamw_step), decltype(optim::cuda::adamw_step)>);
static_assert(std::is_same_v<decltype(optim::cpu::sum_of_squares), decltype(optim::cuda::sum_of_squares)>);
static_assert(std::is_same_v<decltype(optim::cpu::scale_inplace), decltype(optim::cuda::scale_inplace)>);

TEST_CASE("without CUDA, optim's CUDA kernels raise DeviceError with the way out") {
  if (cuda::built_with_cuda()) {
    MESSAGE("keel was built with CUDA: the stubs are not linked, nothing to check");
    return;
  }
  Tensor t = zeros({4}), m = zeros({4}), v = zeros({4}), master;
  auto way_out = [](const DeviceError& e) {
    return std::string(e.what()).find("rebuild with the `cuda` preset") != std::string::npos;
  };
  int raised = 0;
  try {
    optim::cuda::adamw_step(t, t, m, v, master, optim::AdamWScalars{});
  } catch (const DeviceError& e) {
    CHECK(way_out(e));
    ++raised;
  }
  try {
    optim::cuda::sum_of_squares(t);
  } catch (const DeviceError& e) {
    CHECK(way_out(e));
    ++raised;
  }
  try {
    optim::cuda::scale_inplace(t, 2.0);
  } catch (const DeviceError& e) {
    CHECK(way_out(e));
    ++raised;
  }
  CHECK(raised == 3);
}

TEST_CASE("the CPU gradient kernels: sum of squares in f64 and an in-place scale, half dtypes included") {
  Tensor t = from_vector<float>({1, -2, 3}, {3});
  CHECK(optim::cpu::sum_of_squares(t) == 14.0);
  optim::cpu::scale_inplace(t, 0.5);
  CHECK(t.to_vector<float>() == std::vector<float>{0.5f, -1.0f, 1.5f});
  Tensor h = from_vector<float>({1, -2, 3}, {3}).to(DType::bf16);
  CHECK(optim::cpu::sum_of_squares(h) == 14.0);
  CHECK_THROWS_AS(optim::cpu::sum_of_squares(zeros({2}, {DType::i64})), DTypeError);
}
