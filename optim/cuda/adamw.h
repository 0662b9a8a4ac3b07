// The CUDA kernels of the AdamW step (optim/adamw.h). optim/cpu/adamw.h declares the
// very same functions for the other device; optim/adamw.cpp picks one by the tensors' device.
// Plain C++ (no CUDA headers); a build without CUDA links optim/cuda/no_cuda.cpp instead, whose
// functions raise DeviceError.
#pragma once

#include <vector>

#include "core/tensor.h"
#include "optim/adamw_math.h"

namespace keel::optim::cuda {

// The fused AdamW step of one parameter (optim/adamw_math.h's formula, element by element).
// All tensors contiguous, numel N, on one device:
//   param (N) f32 | f64 | bf16 | f16, updated in place (rounded from master when one is given)
//   grad (N) f32 | f64 | bf16 | f16
//   m, v (N) f32 (f64 when param is f64)
//   master (N) f32 when param is bf16/f16, else undefined (the f32/f64 param is its own master)
void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, Tensor& master, const AdamWScalars& s);

// One parameter's tensors for adamw_step_multi, each as adamw_step takes them, with its scalars.
struct AdamWTensors {
  Tensor param, grad, m, v, master;
  AdamWScalars s;
};
// adamw_step on every item, the same bits, in 1 launch per 48 items of one (param dtype, grad
// dtype, device) group rather than 1 per item: a small step is otherwise bound by the host's
// launches. Items of 0 elements are skipped; the checks are adamw_step's.
void adamw_step_multi(std::vector<AdamWTensors>& items);

// A step the device decides (AdamW::step_gated): whether to apply it and by what factor to clip
// are read from the step's scalars where they are, so the host launches the step without waiting
// for the device. Every tensor on one GPU:
//   scalars (S) f64              the step's readback: the gradients' sum of squares, the loss
//   counts (P) i64               each parameter's step count; the last entry counts step() calls
//   stepped (P) i32              1 where this step advances the count, else 0
//   control (2) f64, written     [1 if the step is applied else 0, the clip's factor]
//   bc1, bc2_sqrt (L) f64        1 - b1^t and sqrt(1 - b2^t) for t < L, computed on the host
struct AdamWGate {
  Tensor scalars;
  int64_t sumsq_slot = 0, loss_slot = 0;
  double max_norm = 0;  // 0: no clipping
  Tensor counts, stepped, control, bc1, bc2_sqrt;
  double lr = 0;
};
// One block: norm = sqrt(scalars[sumsq_slot]); applied = norm and scalars[loss_slot] are finite;
// factor = max_norm / (norm + 1e-6) when applied and norm > max_norm (and max_norm > 0), else 1
// (optim::clip_coefficient's f64 arithmetic, correctly rounded on both); counts += stepped when
// applied.
void adamw_decide(AdamWGate& gate);
// adamw_step_multi after adamw_decide: nothing when control[0] is 0; else item i runs with the
// clip's factor control[1] and the step count t = counts[counter[i]] (its step size lr / bc1[t],
// its bias correction bc2_sqrt[t]), the bits that AdamW::step(lr, factor) gives on the host.
// items[i].s supplies the rest (betas, eps, decay).
void adamw_step_multi_gated(std::vector<AdamWTensors>& items, const std::vector<int>& counter, const AdamWGate& gate);

}  // namespace keel::optim::cuda
