// The fused AdamW step on a CUDA device: one kernel reads the gradient, the moments and the
// master weight of every element, and writes the moments, the master and the parameter.
// Plain C++ (no CUDA headers): optim/adamw.cpp calls it only when KEEL_WITH_CUDA is defined.
#pragma once

#include "core/tensor.h"
#include "optim/adamw_math.h"

namespace keel::optim::cuda {

// All tensors contiguous, numel N, on one CUDA device:
//   param (N) f32 | f64 | bf16 | f16, updated in place (rounded from master when one is given)
//   grad (N) f32 | f64 | bf16 | f16
//   m, v (N) f32 (f64 when param is f64)
//   master (N) f32 when param is bf16/f16, else undefined (the f32/f64 param is its own master)
void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, Tensor& master, const AdamWScalars& s);

}  // namespace keel::optim::cuda
