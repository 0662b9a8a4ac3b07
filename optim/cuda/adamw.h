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

}  // namespace keel::optim::cuda
