// The CUDA kernel of add_layernorm (ops/add_layernorm.h). ops/cpu/add_layernorm.h declares the
// very same function for the other device; the front end ops/add_layernorm.cpp picks one by the
// tensors' device. No autograd, no argument checks (the front end's job). Tensors: on one CUDA
// device, f32, bf16 or f16, computed in f32. The backward is layernorm's (ops/cuda/layernorm.h)
// with its dx_add. Plain C++ (no CUDA headers); a build without CUDA links ops/cuda/no_cuda.cpp
// instead, whose function raises DeviceError. Work is queued on the device's compute stream.
#pragma once

#include "core/tensor.h"

namespace keel::cuda {

// x, y (N, C), weight (C), bias (C) or undefined, contiguous -> out (N, C) = layernorm(h); h (N, C)
// = x + y, mean and rstd (N) are allocated and filled in (f32 on CUDA, x's dtype on the CPU).
Tensor add_layernorm_forward(const Tensor& x, const Tensor& y, const Tensor& weight, const Tensor& bias, double eps,
                             Tensor& h, Tensor& mean, Tensor& rstd);

}  // namespace keel::cuda
