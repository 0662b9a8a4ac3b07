// AdamW::step_gated, the step whose apply-or-skip and clip factor the GPU decides, against the
// host's decision (read the norm and loss, then step(lr, clip_coefficient(...)) or nothing):
// the same bits in every parameter, moment, master weight and step count, across applied,
// clipped, NaN-gradient and NaN-loss steps, and no host wait. On the CPU the host decides.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/copy.h"
#include "core/cuda/counters.h"
#include "core/factory.h"
#include "cuda_test.h"
#include "optim/adamw.h"
#include "optim/clip.h"
#include "optim/step_readback.h"

using namespace keel;
using namespace keel::optim;

namespace {
bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  return x.empty() || std::memcmp(x.data(), y.data(), x.size() * sizeof(double)) == 0;
}

// 61 parameters (two tables of a dtype pair): bf16 with f32 masters, f32 and f64, 1-D and 2-D.
NamedTensors parameters(Device device) {
  Generator gen(7);
  const DType dtypes[] = {DType::bf16, DType::f32, DType::f64};
  NamedTensors out;
  for (int i = 0; i < 61; ++i) {
    const int64_t n = (int64_t(i) * 389) % 700 + 1;
    out.emplace_back("p" + std::to_string(i), randn(i % 2 ? Shape{n} : Shape{n, 2}, gen, {dtypes[i % 3]}).to(device));
  }
  return out;
}

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// What a training step hands the optimizer at step k: gradients (f32 for bf16 parameters, as
// zero_grad makes them) and a loss. Step 2 has a NaN gradient, step 4 a NaN loss, step 3 large
// gradients (clipped at every step but 3's norm is the largest), step 5 one parameter without.
struct StepInput {
  std::vector<Tensor> grads;
  double loss;
};
StepInput input(const NamedTensors& params, int k, Device device) {
  Generator gen(100 + k);
  StepInput in{{}, k == 4 ? kNaN : 2.5 + k};
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i].second;
    const DType dt = p.dtype() == DType::f64 ? DType::f64 : DType::f32;
    Tensor g = randn(p.shape(), gen, {dt});
    if (k == 3) g = from_vector<double>(std::vector<double>(size_t(p.numel()), 40.0), p.shape(), {dt});
    if (k == 2 && i == 17) g = from_vector<double>(std::vector<double>(size_t(p.numel()), kNaN), p.shape(), {dt});
    in.grads.push_back(k == 5 && i == 30 ? Tensor() : g.to(device));
  }
  return in;
}

void set_grads(NamedTensors& params, const StepInput& in) {
  for (size_t i = 0; i < params.size(); ++i) {
    params[i].second.zero_grad();
    if (in.grads[i].defined()) params[i].second.set_grad(in.grads[i].clone());
  }
}

// Steps 1..6 of both optimizers (the reference decides on the host), with max_norm 1.
void run_both(AdamW& gated, NamedTensors& gp, AdamW& ref, NamedTensors& rp, Device device, keel::cuda::Counters* waits) {
  const double max_norm = 1.0;
  for (int k = 1; k <= 6; ++k) {
    const double lr = 1e-3 * k;
    const StepInput in = input(gp, k, device);
    set_grads(rp, in);
    const double norm = grad_norm(tensors_of(rp));
    if (std::isfinite(norm) && std::isfinite(in.loss)) ref.step(lr, clip_coefficient(norm, max_norm));

    set_grads(gp, in);
    StepReadback rb(device, 2);
    copy_(rb.buffer(), from_vector<double>({0.0, in.loss}, {2}));
    const keel::cuda::Counters before = keel::cuda::counters();
    grad_sum_of_squares(tensors_of(gp), rb);
    gated.step_gated(lr, max_norm, rb.buffer(), StepReadback::kGradSumSq, 1);
    if (waits && k > 1) waits->syncs += (keel::cuda::counters() - before).syncs;  // step 1 uploads the tables
  }
}

void check_same(AdamW& gated, NamedTensors& gp, AdamW& ref, NamedTensors& rp) {
  for (size_t i = 0; i < gp.size(); ++i) {
    CAPTURE(gp[i].first);
    CHECK(same_bits(gp[i].second, rp[i].second));
  }
  const NamedTensors a = gated.state(), b = ref.state();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    CAPTURE(a[i].first);
    CHECK(a[i].first == b[i].first);
    CHECK(same_bits(a[i].second, b[i].second));  // moments, masters and step counts
  }
  CHECK(gated.step_count() == ref.step_count());
}

void check_device(Device device) {
  NamedTensors gp = parameters(device), rp = parameters(device);
  AdamW gated(gp, {.lr = 1e-3, .weight_decay = 0.1}), ref(rp, {.lr = 1e-3, .weight_decay = 0.1});
  keel::cuda::Counters waits;
  run_both(gated, gp, ref, rp, device, &waits);
  CHECK(waits.syncs == 0);
  CHECK(ref.step_count() == 4);  // steps 2 and 4 were skipped
  check_same(gated, gp, ref, rp);

  // A step the host takes after gated ones starts from the device's counts.
  const StepInput in = input(gp, 1, device);
  set_grads(gp, in);
  set_grads(rp, in);
  gated.step(2e-3);
  ref.step(2e-3);
  check_same(gated, gp, ref, rp);

  // A loaded state replaces the device's counts: both continue from ref's.
  gated.load_state(ref.state());
  run_both(gated, gp, ref, rp, device, nullptr);
  check_same(gated, gp, ref, rp);
}
}  // namespace

TEST_CASE("a step the GPU decides takes the host's step, bit for bit, with no host wait") {
  KEEL_REQUIRE_CUDA();
  check_device(Device::cuda(0));
}

TEST_CASE("on the CPU a gated step is the host's decision") { check_device(Device::cpu()); }

TEST_CASE("a gated step refuses scalars it cannot read") {
  NamedTensors p = parameters(Device::cpu());
  AdamW opt(p, {});
  CHECK_THROWS_AS(opt.step_gated(1e-3, 1.0, zeros({2}, {DType::f64}), 0, 2), ShapeError);
  CHECK_THROWS_AS(opt.step_gated(1e-3, 1.0, zeros({2}, {DType::f32}), 0, 1), ShapeError);
  CHECK_THROWS_AS(opt.step_gated(1e-3, -1.0, zeros({2}, {DType::f64}), 0, 1), ValueError);
}
