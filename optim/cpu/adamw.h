// The CPU kernels of the AdamW step (optim/adamw.h). optim/cuda/adamw.h declares the
// very same functions for the other device; optim/adamw.cpp picks one by the tensors' device.
#pragma once

#include "core/tensor.h"
#include "optim/adamw_math.h"

namespace keel::optim::cpu {

// The fused AdamW step of one parameter (optim/adamw_math.h's formula, element by element).
// All tensors contiguous, numel N, on one device:
//   param (N) f32 | f64 | bf16 | f16, updated in place (rounded from master when one is given)
//   grad (N) f32 | f64 | bf16 | f16
//   m, v (N) f32 (f64 when param is f64)
//   master (N) f32 when param is bf16/f16, else undefined (the f32/f64 param is its own master)
void adamw_step(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, Tensor& master, const AdamWScalars& s);

}  // namespace keel::optim::cpu
