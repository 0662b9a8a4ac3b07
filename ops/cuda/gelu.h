// The CUDA kernels of GELU, tanh form (ops/gelu.h). ops/cpu/gelu.h declares the very
// same functions for the other device; the front end ops/gelu.cpp picks one by the tensors' device.
// No autograd, no argument checks (the front end's job). Tensors: on one CUDA device, f32, bf16
// or f16, computed in f32 (f64 raises DTypeError: it exists for CPU gradient checks).
// Plain C++ (no CUDA headers); a build without CUDA links ops/cuda/no_cuda.cpp instead, whose
// functions raise DeviceError. Work is queued on the device's compute stream unless it says it waits.
#pragma once

#include "core/tensor.h"

namespace keel::cuda {

// x (N) contiguous -> (N)
Tensor gelu_forward(const Tensor& x);
// grad, x (N) contiguous -> dx (N) = grad * gelu'(x)
Tensor gelu_backward(const Tensor& grad, const Tensor& x);

}  // namespace keel::cuda
