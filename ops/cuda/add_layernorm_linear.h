// The CUDA kernel of add_layernorm_linear (ops/add_layernorm_linear.h), the decode step's fusion
// of a block's residual add, its LayerNorm and the linear layer that reads it. Only the GPU has
// it: elsewhere, and for more rows than it takes, the front end composes add_layernorm (or
// layernorm) and linear (or linear_gelu), which is its reference. No autograd, no argument checks
// (the front end's job). Tensors: on one CUDA device, f32, bf16 or f16, computed in f32. Plain
// C++ (no CUDA headers); a build without CUDA links ops/cuda/no_cuda.cpp instead, whose functions
// raise DeviceError. Work is queued on the device's compute stream.
#pragma once

#include "core/tensor.h"

namespace keel::cuda {

// Whether the kernel takes M rows of width C in dtype t: a few rows (a decode step's batch),
// whose add and LayerNorm every block redoes in shared memory.
bool add_layernorm_linear_fits(int64_t M, int64_t C, DType t);

// x (M, C), y (M, C) or undefined, ln_weight (C), ln_bias (C) or undefined, weight (N, C), bias
// (N) or undefined, all contiguous, M and C as add_layernorm_linear_fits allows, N >= 1 -> out (M, N) =
// layernorm(h) @ weight^T + bias, then gelu (tanh form) when `gelu`; h (M, C) = x + y is
// allocated and written when y is defined (else h = x). h and layernorm(h) are rounded to x's
// dtype as add_layernorm rounds them, the product accumulated in f32 and rounded once.
Tensor add_layernorm_linear(const Tensor& x, const Tensor& y, const Tensor& ln_weight, const Tensor& ln_bias,
                            double eps, const Tensor& weight, const Tensor& bias, bool gelu, Tensor& h);

}  // namespace keel::cuda
