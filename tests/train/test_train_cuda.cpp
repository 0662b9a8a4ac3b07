// Mixed-precision training on the GPU: a bf16 GPT-2's gradients accumulate over micro-batches
// in f32 (AdamW's f32 gradient buffers), so grad-accum 8 is one 8x batch up to the bf16
// rounding of each micro-batch's own gradient, not of the running sum; and f16 training takes
// its first step (the loss is scaled in f32); --attention-kernel sm90 trains on Hopper's
// attention kernels. Skipped without a GPU.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "apps/gpt2/run/checkpoint.h"
#include "apps/gpt2/run/metrics.h"
#include "apps/gpt2/train/trainer.h"
#include "core/cuda/counters.h"
#include "core/cuda/runtime.h"
#include "core/factory.h"
#include "cuda_test.h"
#include "nn/gpt2.h"
#include "ops/cuda_compare.h"
#include "optim/adamw.h"
#include "ops/cuda/attention.h"
#include "optim/loss_scaler.h"
#include "train_fixture.h"

using namespace keel;

TEST_CASE("CUDA bf16 GPT-2: grad-accum 8 sums the micro-batch gradients in f32 and matches one 8x batch") {
  KEEL_REQUIRE_CUDA();
  const Device dev = Device::cuda(0);
  nn::GPT2Config c;
  c.n_layer = 2, c.n_head = 2, c.n_embd = 64, c.block_size = 32, c.vocab_size = 512, c.bias = false;
  nn::GPT2 model(c, 5);
  model.to(dev);
  model.to(DType::bf16);
  optim::AdamW opt(model.named_parameters());
  optim::LossScaler scaler(DType::bf16);  // disabled for bf16: scale 1, but the same code path
  const int64_t M = 8, T = 32;
  std::vector<int32_t> ids(M * (T + 1));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 7919 + 13) % 512);
  auto batch = [&](int64_t first, int64_t n) {  // rows [first, first + n): inputs and next-token targets
    std::vector<int32_t> x, y;
    for (int64_t r = first; r < first + n; ++r)
      for (int64_t t = 0; t < T; ++t) x.push_back(ids[r * (T + 1) + t]), y.push_back(ids[r * (T + 1) + t + 1]);
    return std::pair{from_vector(x, {n, T}).to(dev), from_vector(y, {n, T}).to(dev)};
  };
  auto grads = [&] {
    std::vector<std::vector<double>> g;
    for (auto& [name, p] : model.named_parameters()) {
      REQUIRE(p.grad().dtype() == DType::f32);
      g.push_back(p.grad().to_vector<double>());
    }
    return g;
  };

  // Accumulated: 8 micro-batches of 1 into the f32 buffers, as the trainer does.
  opt.zero_grad();
  for (int64_t m = 0; m < M; ++m) {
    auto [x, y] = batch(m, 1);
    scaler.scale_loss(model.forward(x, y).loss, 1.0 / M).backward();
  }
  const auto acc = grads();
  // Each micro-batch alone (its bf16 gradient, widened), summed in f64 here.
  std::vector<std::vector<double>> sum, abs_sum;
  for (int64_t m = 0; m < M; ++m) {
    opt.zero_grad();
    auto [x, y] = batch(m, 1);
    scaler.scale_loss(model.forward(x, y).loss, 1.0 / M).backward();
    const auto g = grads();
    if (sum.empty()) sum.assign(g.size(), {}), abs_sum.assign(g.size(), {});
    for (size_t i = 0; i < g.size(); ++i) {
      sum[i].resize(g[i].size()), abs_sum[i].resize(g[i].size());
      for (size_t j = 0; j < g[i].size(); ++j) sum[i][j] += g[i][j], abs_sum[i][j] += std::abs(g[i][j]);
    }
  }
  // The f32 accumulation is the exact sum up to f32 rounding (8 additions).
  for (size_t i = 0; i < acc.size(); ++i)
    for (size_t j = 0; j < acc[i].size(); ++j)
      REQUIRE(std::abs(acc[i][j] - sum[i][j]) <= 1e-6 * abs_sum[i][j] + 1e-30);
  // One batch of 8: the same mean gradient, up to each micro-batch's bf16 rounding.
  opt.zero_grad();
  auto [x8, y8] = batch(0, M);
  scaler.scale_loss(model.forward(x8, y8).loss).backward();
  const auto big = grads();
  size_t i = 0;
  for (auto& [name, p] : model.named_parameters()) {
    CAPTURE(name);
    const Tensor a = from_vector(acc[i], p.shape(), {DType::f64}), b = from_vector(big[i], p.shape(), {DType::f64});
    CHECK(cudatest::worst_row_rel_err(a, b) < 2e-2);
    ++i;
  }
}

TEST_CASE("CUDA f16 training: the first step is taken at scale 2^16, logged and checkpointed") {
  KEEL_REQUIRE_CUDA();
  app::TrainConfig c = testing::tiny_config("cuda_f16");
  c.model.n_head = 2;  // head dim 32
  c.device = "cuda";
  c.dtype = "f16";
  c.max_steps = 3;
  c.log_every = 1;
  app::train(c);
  std::vector<app::MetricsRecord> train;
  for (auto& r : app::read_metrics(app::metrics_path(c.run_dir)))
    if (r.kind == app::RecordKind::Train) train.push_back(r);
  REQUIRE(train.size() == 3);
  CHECK_FALSE(train[0].skipped);  // f16 2^16 * loss was inf: this step was always skipped
  CHECK(train[0].loss_scale == 65536.0);
  CHECK(std::isfinite(train[0].loss));
  const auto ckpt = app::latest_checkpoint(c.run_dir);
  REQUIRE(ckpt);
  bool found = false;
  for (const auto& [name, t] : app::load_checkpoint(*ckpt).optimizer)
    if (name == "scaler.scale") {
      found = true;
      CHECK(t.item() == 65536.0);
    }
  CHECK(found);
}

TEST_CASE("CUDA train --attention-kernel sm90: Hopper's kernels run (on compute capability 9.0), mma's losses") {
  KEEL_REQUIRE_CUDA();
  auto run = [](const std::string& kernel) {
    app::TrainConfig c = testing::tiny_config("cuda_kernel_" + kernel);
    c.model.n_head = 1;  // head dim 64: a width of the warpgroup kernel
    c.device = "cuda";
    c.dtype = "bf16";
    c.max_steps = 3;
    c.log_every = 1;
    c.attention_kernel = kernel;
    const uint64_t maps = cuda::counters().tensor_maps;
    app::train(c);
    CHECK(cuda::attention_kernel() == cuda::AttentionKernel::mma);  // the run's choice ended with it
    return std::pair{cuda::counters().tensor_maps - maps, testing::train_records(c.run_dir)};
  };
  const auto [mma_maps, mma] = run("mma");
  const auto [sm90_maps, sm90] = run("sm90");
  CHECK(mma_maps == 0);
  if (cuda::device_info(0).runs_sm90a())
    CHECK(sm90_maps > 0);
  else
    CHECK(sm90_maps == 0);
  REQUIRE(mma.size() == 3);
  REQUIRE(sm90.size() == 3);
  for (size_t i = 0; i < 3; ++i) CHECK(sm90[i].loss == doctest::Approx(mma[i].loss).epsilon(1e-2));
}
