// A loss scaler whose state lives on the GPU (LossScaler::keep_on_device) against one on the
// host, step by step through overflows (backoff, down to min_scale), growth after good steps and
// a load: the same scaled loss and gradient bits, the same unscaled gradients, the same scale,
// tracker and skipped count, and no host wait in a step. On the CPU the same calls run on the
// host.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/autograd.h"
#include "core/copy.h"
#include "core/cuda/counters.h"
#include "core/factory.h"
#include "cuda_test.h"
#include "ops/arith.h"
#include "optim/grad_math.h"
#include "optim/loss_scaler.h"

using namespace keel;
using namespace keel::optim;

namespace {
bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  return x.empty() || std::memcmp(x.data(), y.data(), x.size() * sizeof(double)) == 0;
}

constexpr double kInf = std::numeric_limits<double>::infinity();

void check_device(Device device) {
  const LossScalerOptions opt{.init_scale = 8.0, .growth_interval = 3, .min_scale = 2.0};
  LossScaler host(DType::f16, opt), dev(DType::f16, opt);
  dev.keep_on_device(device);
  CHECK(dev.on_device() == device.is_cuda());
  CHECK(dev.loss_grad(1.0).has_value() == !device.is_cuda());  // the scale would have to be read back
  Generator gen(5);
  // The gradients' sum of squares per step: overflows at 3, 4, 5 (the third at min_scale), growth
  // after 3 good steps (7-9), a NaN at 10.
  const double sumsq[] = {1.5, 2.0, kInf, kInf, kInf, 0.5, 1.0, 2.0, 3.0, std::nan(""), 4.0};
  uint64_t waits = 0;
  for (double ss : sumsq) {
    CAPTURE(ss);
    // The scaled loss and its gradient, for an accumulation factor of 1/3 (not a power of two).
    Tensor xh = randn({}, gen).to(device).set_requires_grad(true);
    Tensor xd = xh.detach().clone().set_requires_grad(true);
    std::vector<Tensor> gh, gd;  // f32, bf16 and f16 gradients
    for (DType t : {DType::f32, DType::bf16, DType::f16}) {
      gh.push_back(mul(randn({37}, gen), 300.0).to(t).to(device));
      gd.push_back(gh.back().clone());
    }
    Tensor scalars = from_vector<double>({ss, 0.0, -1.0}, {3}).to(device);

    const keel::cuda::Counters before = keel::cuda::counters();
    Tensor yd = dev.scale_loss(xd, 1.0 / 3.0);
    yd.backward();
    dev.unscale_in_step(gd);
    dev.update_in_step(scalars, 0, 2);
    waits += (keel::cuda::counters() - before).syncs;

    Tensor yh = host.scale_loss(xh, 1.0 / 3.0);
    yh.backward();
    if (host.scale() != 1.0) scale_all_(gh, 1.0 / host.scale());
    host.update(!std::isfinite(std::sqrt(ss)));

    CHECK(same_bits(yd, yh));
    CHECK(same_bits(xd.grad(), xh.grad()));
    for (size_t i = 0; i < gh.size(); ++i) CHECK(same_bits(gd[i], gh[i]));
    CHECK(scalars.to_vector<double>()[2] == host.scale());  // the log's slot: the scale after the update
    CHECK(dev.scale() == host.scale());
    CHECK(dev.growth_tracker() == host.growth_tracker());
    CHECK(dev.skipped_steps() == host.skipped_steps());
  }
  CHECK(waits == 0);
  CHECK(host.skipped_steps() == 4);
  CHECK(host.scale() == 2.0);  // 8, backed off to 4, 2, 2 (min_scale), grown to 4, backed off to 2
  // A loaded state replaces the device's: both go on from it.
  LossScaler other(DType::f16, opt);
  other.update(true);
  other.update(false);
  dev.load_state(other.state());
  CHECK(dev.scale() == other.scale());
  CHECK(dev.growth_tracker() == 1);
  Tensor scalars = from_vector<double>({1.0, 0.0, 0.0}, {3}).to(device);
  dev.update_in_step(scalars, 0, 2);
  other.update(false);
  CHECK(dev.state()[0].second.item() == other.scale());
  CHECK(dev.growth_tracker() == other.growth_tracker());
}
}  // namespace

TEST_CASE("a loss scaler kept on the GPU scales, unscales and updates as the host's, with no host wait") {
  KEEL_REQUIRE_CUDA();
  check_device(Device::cuda(0));
}

TEST_CASE("a loss scaler's in-step calls on the CPU do the host's arithmetic") { check_device(Device::cpu()); }

TEST_CASE("a disabled scaler's in-step calls change nothing") {
  LossScaler off(DType::bf16);
  off.keep_on_device(Device::cpu());
  Tensor g = from_vector<float>({1.5f, -2.0f}, {2}), scalars = from_vector<double>({kInf, 0.0, 7.0}, {3});
  off.unscale_in_step({g});
  off.update_in_step(scalars, 0, 2);
  CHECK(g.to_vector<float>() == std::vector<float>{1.5f, -2.0f});
  CHECK(scalars.to_vector<double>()[2] == 7.0);
  CHECK(off.scale() == 1.0);
  CHECK(off.skipped_steps() == 0);
}
