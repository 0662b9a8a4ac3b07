// gpt2 train --z-loss on the GPU against the CPU (f32, the same seed and batches): the losses
// with their z-loss term and the logged log Z agree step by step, as the same run on two devices
// must. Skipped without a GPU.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <vector>

#include "apps/gpt2/run/metrics.h"
#include "apps/gpt2/train/trainer.h"
#include "cuda_test.h"
#include "train_fixture.h"

using namespace keel;
using namespace keel::app;

using testing::train_records;

TEST_CASE("a z-loss run on the GPU logs the CPU run's losses and log Z") {
  KEEL_REQUIRE_CUDA();
  TrainConfig cpu = testing::tiny_config("z_cpu");
  cpu.model.n_head = 2;  // head dim 32, which the CUDA attention kernels take
  cpu.max_steps = 6;
  cpu.val_every = 0;
  cpu.z_loss = 0.05;
  TrainConfig gpu = cpu;
  gpu.device = "cuda";
  gpu.run_dir = testing::scratch_dir("z_gpu").string();
  train(cpu);
  train(gpu);
  const auto a = train_records(cpu.run_dir), b = train_records(gpu.run_dir);
  REQUIRE(a.size() == 6);
  REQUIRE(b.size() == 6);
  for (size_t i = 0; i < a.size(); ++i) {
    CAPTURE(i);
    // f32 on both, summed in other orders: agreement to f32's accumulated rounding.
    CHECK(b[i].loss == doctest::Approx(a[i].loss).epsilon(1e-4));
    CHECK(b[i].log_z_mean == doctest::Approx(a[i].log_z_mean).epsilon(1e-4));
    CHECK(b[i].log_z_max == doctest::Approx(a[i].log_z_max).epsilon(1e-4));
  }
  // The z-loss is in those losses: without it the first step's loss is lower by about z (log Z)^2.
  TrainConfig plain = gpu;
  plain.run_dir = testing::scratch_dir("z_gpu_plain").string();
  plain.z_loss = 0;
  plain.max_steps = 1;
  train(plain);
  const double extra = b[0].loss - train_records(plain.run_dir)[0].loss;
  CHECK(extra == doctest::Approx(cpu.z_loss * b[0].log_z_mean * b[0].log_z_mean).epsilon(0.01));
}
