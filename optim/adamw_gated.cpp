// AdamW::step_gated: the step a training loop launches without reading the device.
//
// Whether a step is applied (its loss and gradient norm finite) and by what factor its gradients
// are clipped depend on values the step computed on the GPU. Deciding on the host means copying
// them back, and that copy waits for the whole step: the GPU then idles while the host launches
// the next one. So on a GPU the decision is a kernel (cuda::adamw_decide) that reads the two
// values where they are and writes [applied, factor] to a small control tensor, which the AdamW
// kernels read. What the host computed per parameter from its step count t, the step size lr /
// (1 - b1^t) and sqrt(1 - b2^t), needs t; t advances only on applied steps, so the counts move to
// the device too, and the host keeps a table of the two denominators for every t up to a bound
// (the device divides by the very f64 values the host divided by, so the bits are the host
// path's). The host's counts come back (settle) only when it needs them: a checkpoint (state()),
// or a step it takes itself.
#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>

#include "core/factory.h"
#include "ops/op_costs.h"
#include "optim/adamw.h"
#include "optim/clip.h"
#include "optim/cuda/adamw.h"

namespace keel::optim {

namespace {
void check_slot(const Tensor& scalars, int64_t slot) {
  if (slot < 0 || slot >= scalars.numel())
    throw ShapeError("AdamW::step_gated", "slot " + std::to_string(slot) + " is outside the step's " +
                                              std::to_string(scalars.numel()) + " scalars");
}
}  // namespace

std::vector<int64_t> AdamW::step_counts() const {
  if (device_steps_.live) return device_steps_.counts.to_vector<int64_t>();
  std::vector<int64_t> out;
  for (const Slot& s : slots_) out.push_back(s.steps);
  out.push_back(steps_);
  return out;
}

void AdamW::settle() {
  if (!device_steps_.live) return;
  const std::vector<int64_t> counts = step_counts();
  for (size_t i = 0; i < slots_.size(); ++i) slots_[i].steps = counts[i];
  steps_ = counts.back();
  device_steps_.live = false;
}

void AdamW::step_gated(double lr, double max_norm, const Tensor& scalars, int64_t sumsq_slot, int64_t loss_slot) {
  if (!scalars.defined() || scalars.dim() != 1 || scalars.dtype() != DType::f64 || !scalars.is_contiguous())
    throw ShapeError("AdamW::step_gated", "the step's scalars must be a contiguous 1-d f64 tensor");
  check_slot(scalars, sumsq_slot);
  check_slot(scalars, loss_slot);
  if (max_norm != 0) check_max_norm(max_norm);
  const Device device = scalars.device();
  bool one_gpu = device.is_cuda();
  for (const auto& [name, p] : params_) one_gpu = one_gpu && p.device() == device;
  if (!one_gpu) {  // the host decides: reading host memory costs nothing
    const std::vector<double> v = scalars.to_vector<double>();
    const double norm = std::sqrt(v[size_t(sumsq_slot)]);
    if (std::isfinite(norm) && std::isfinite(v[size_t(loss_slot)]))
      step(lr, max_norm > 0 ? clip_coefficient(norm, max_norm) : 1.0);
    return;
  }

  set_lr(lr);
  zero_unreached_gradients();
  DeviceSteps& d = device_steps_;
  const size_t n = params_.size();
  if (!d.live) {  // the host's counts go to the device, which keeps them from here on
    const std::vector<int64_t> counts = step_counts();
    d.bound = *std::max_element(counts.begin(), counts.end());
    d.counts = from_vector<int64_t>(counts, {static_cast<int64_t>(n + 1)}).to(device);
    if (!d.control.defined()) d.control = zeros({2}, {DType::f64, device});
    d.live = true;
  }
  std::vector<int32_t> stepped(n + 1, 0);
  stepped[n] = 1;  // steps_, the applied steps
  for (size_t i = 0; i < n; ++i) stepped[i] = params_[i].second.grad().defined() ? 1 : 0;
  if (stepped != d.stepped_host) {  // the same parameters step every step of a training run
    d.stepped = from_vector<int32_t>(stepped, {static_cast<int64_t>(n + 1)}).to(device);
    d.stepped_host = stepped;
  }
  d.bound += 1;
  if (!d.bc1.defined() || d.bc1.numel() <= d.bound) {  // doubling: a handful of uploads per run
    const int64_t len = std::max<int64_t>(1024, 2 * (d.bound + 1));
    std::vector<double> bc1(size_t(len), 1.0), bc2(size_t(len), 1.0);
    for (int64_t t = 1; t < len; ++t) std::tie(bc1[size_t(t)], bc2[size_t(t)]) = bias_denominators(t);
    d.bc1 = from_vector<double>(bc1, {len}).to(device);
    d.bc2_sqrt = from_vector<double>(bc2, {len}).to(device);
  }

  cuda::AdamWGate gate{scalars, sumsq_slot, loss_slot, max_norm, d.counts, d.stepped, d.control, d.bc1, d.bc2_sqrt, lr};
  std::vector<cuda::AdamWTensors> batch;
  std::vector<int> counter;
  profiler::Cost cost;
  for (size_t i = 0; i < n; ++i) {
    auto& [name, p] = params_[i];
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    cuda::AdamWTensors item = prepare(name, p, g, slots_[i]);  // checks, betas, eps, decay
    if (item.param.numel() == 0) continue;
    const profiler::Cost c = op_costs::adamw(double(item.param.numel()), p.dtype(), item.grad.dtype(), item.master.defined());
    cost.flops += c.flops, cost.bytes += c.bytes;
    batch.push_back(std::move(item));
    counter.push_back(static_cast<int>(i));
  }
  profiler::Scope prof("adamw", profiler::Phase::optimizer);
  if (prof) prof.cost(cost);
  cuda::adamw_decide(gate);
  cuda::adamw_step_multi_gated(batch, counter, gate);
}

}  // namespace keel::optim
