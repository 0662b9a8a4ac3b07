// Global-norm gradient clipping (torch.nn.utils.clip_grad_norm_).
#pragma once

#include <vector>

#include "core/named_tensors.h"
#include "core/tensor.h"
#include "optim/step_readback.h"

namespace keel::optim {

// params: the parameters whose .grad to clip (undefined grads are skipped).
// Returns the global L2 norm of all gradients before clipping, accumulated in f64. When it
// exceeds max_norm (> 0), every gradient is scaled in place by max_norm / (norm + 1e-6).
// When some gradient holds inf or NaN the result is inf or NaN and nothing is scaled: the
// caller should skip the step (the norm is what goes into the log).
// The sum of squares is the f64 sum, in list order, of each gradient's (optim::sum_of_squares),
// computed on the gradients' device and read once. With a readback it lands in its kGradSumSq
// slot and the readback is read (its one copy to the host); without, a slot of its own is.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm, StepReadback* readback = nullptr);
inline double clip_grad_norm(const NamedTensors& params, double max_norm) {
  return clip_grad_norm(tensors_of(params), max_norm);
}

// The same norm without clipping (for logging when clipping is off).
double grad_norm(const std::vector<Tensor>& params, StepReadback* readback = nullptr);
// grad_norm's sum of squares into readback's kGradSumSq slot, not read: the norm is its square
// root once the readback is read (AdamW::step_gated reads it on the device).
void grad_sum_of_squares(const std::vector<Tensor>& params, StepReadback& readback);

// The factor clip_grad_norm scales every gradient by for a global norm `norm`: max_norm /
// (norm + 1e-6) when the norm exceeds max_norm (> 0, finite: ValueError otherwise), else 1,
// also for an inf or NaN norm. For a step that applies it as it reads the gradients
// (AdamW::step(lr, grad_scale)) instead of in a pass of its own.
double clip_coefficient(double norm, double max_norm);
// The ValueError clip_coefficient throws for a max_norm that is not positive and finite, raised
// before a norm is computed.
void check_max_norm(double max_norm);

// The defined gradients of params, in list order.
std::vector<Tensor> gradients_of(const std::vector<Tensor>& params);

}  // namespace keel::optim
