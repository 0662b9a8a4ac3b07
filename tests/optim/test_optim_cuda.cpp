// The CUDA paths of optim against the CPU ones on the same inputs: the fused AdamW kernel,
// the gradient sum of squares (clipping) and the in-place scale (clipping, loss scaling).
// Skipped without a GPU.
#include <doctest/doctest.h>

#include <cmath>

#include "core/factory.h"
#include "cuda_test.h"
#include "ops/cuda_compare.h"
#include "optim/adamw.h"
#include "optim/clip.h"
#include "optim/loss_scaler.h"

using namespace keel;
using namespace keel::optim;

namespace {
// The worst row's relative error (tests/ops/cuda_compare.h): one wrong row cannot hide.
double rel_err(const Tensor& a, const Tensor& b) { return cudatest::worst_row_rel_err(a, b); }
}  // namespace

TEST_CASE("CUDA AdamW matches the CPU AdamW for every parameter dtype") {
  KEEL_REQUIRE_CUDA();
  for (DType dt : {DType::f32, DType::bf16, DType::f16, DType::f64}) {
    CAPTURE(std::string(dtype_name(dt)));
    Generator gen(11);
    Tensor w_cpu = randn({64, 33}, gen, {dt}), b_cpu = randn({33}, gen, {dt});
    Tensor w_gpu = w_cpu.to(Device::cuda()), b_gpu = b_cpu.to(Device::cuda());
    AdamW cpu({{"w", w_cpu}, {"b", b_cpu}}, {.lr = 1e-2});
    AdamW gpu({{"w", w_gpu}, {"b", b_gpu}}, {.lr = 1e-2});
    for (int s = 0; s < 3; ++s) {
      for (auto* pair : {&w_cpu, &b_cpu}) {
        Tensor g = randn(pair->shape(), gen, {dt});
        pair->set_grad(g);
        (pair == &w_cpu ? w_gpu : b_gpu).set_grad(g.to(Device::cuda()));
      }
      cpu.step();
      gpu.step();
    }
    double tol = dt == DType::f64 ? 1e-12 : dt == DType::f32 ? 1e-5 : 1e-2;
    CHECK(rel_err(w_gpu, w_cpu) < tol);
    CHECK(rel_err(b_gpu, b_cpu) < tol);
    auto sc = cpu.state(), sg = gpu.state();
    for (size_t i = 0; i < sc.size(); ++i) {
      CAPTURE(sc[i].first);
      CHECK(rel_err(sg[i].second, sc[i].second) < (dt == DType::f64 ? 1e-12 : 1e-5));
    }
  }
}

TEST_CASE("CUDA clipping and unscaling match the CPU, non-finite gradients included") {
  KEEL_REQUIRE_CUDA();
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    CAPTURE(std::string(dtype_name(dt)));
    Generator gen(12);
    Tensor p_cpu = zeros({1000, 37}, {dt}), p_gpu = zeros({1000, 37}, {dt, Device::cuda()});
    Tensor g = randn({1000, 37}, gen, {dt});
    p_cpu.set_grad(g.clone());
    p_gpu.set_grad(g.to(Device::cuda()));
    double nc = clip_grad_norm({p_cpu}, 1.0), ng = clip_grad_norm({p_gpu}, 1.0);
    CHECK(ng == doctest::Approx(nc).epsilon(1e-12));
    CHECK(rel_err(p_gpu.grad(), p_cpu.grad()) < 1e-6);
    LossScaler sc(DType::f16, {.init_scale = 4.0});
    CHECK(sc.unscale_({p_gpu}));
    CHECK(sc.unscale_({p_cpu}));
    CHECK(rel_err(p_gpu.grad(), p_cpu.grad()) < 1e-6);
    std::vector<double> bad(37 * 1000, 0.0);
    bad[5] = std::nan("");
    p_gpu.set_grad(from_vector<double>(bad, {1000, 37}, {dt, Device::cuda()}));
    CHECK(std::isnan(clip_grad_norm({p_gpu}, 1.0)));
    CHECK_FALSE(sc.unscale_({p_gpu}));
  }
}
