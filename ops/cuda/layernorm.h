// The CUDA kernels of layer normalisation (ops/layernorm.h). ops/cpu/layernorm.h declares the very
// same functions for the other device; the front end ops/layernorm.cpp picks one by the tensors' device.
// No autograd, no argument checks (the front end's job). Tensors: on one CUDA device, f32, bf16
// or f16, computed in f32 (f64 raises DTypeError: it exists for CPU gradient checks).
// Plain C++ (no CUDA headers); a build without CUDA links ops/cuda/no_cuda.cpp instead, whose
// functions raise DeviceError. Work is queued on the device's compute stream unless it says it waits.
#pragma once

#include "core/tensor.h"

namespace keel::cuda {

// x (N, C), weight (C), bias (C) or undefined, contiguous -> y (N, C); mean, rstd (N) are
// allocated and filled in (f32 on CUDA, x's dtype on the CPU).
Tensor layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, Tensor& mean,
                         Tensor& rstd);
// grad, x (N, C), weight (C), mean, rstd (N) -> dx (N, C), dweight (C), dbias (C), each only when
// its need_* flag is set (weight may be undefined when need_x is false). dx_add (N, C), when
// given, is added to dx as it is written: add_layernorm's gradient of h = x + y from h's other
// uses (ops/add_layernorm.h), so the sum costs no pass of its own.
void layernorm_backward(const Tensor& grad, const Tensor& x, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd, bool need_x, bool need_weight, bool need_bias, Tensor& dx,
                        Tensor& dweight, Tensor& dbias, const Tensor& dx_add = {});

}  // namespace keel::cuda
