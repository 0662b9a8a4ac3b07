// The CPU kernels of GELU, tanh form (ops/gelu.h). ops/cuda/gelu.h declares the very
// same functions for the other device; the front end ops/gelu.cpp picks one by the tensors' device.
// No autograd, no argument checks (the front end's job). Tensors: on the CPU, f32 or f64
// (the CPU computes in these; other dtypes raise DTypeError).
#pragma once

#include "core/tensor.h"

namespace keel::cpu {

// x (N) contiguous -> (N)
Tensor gelu_forward(const Tensor& x);
// grad, x (N) contiguous -> dx (N) = grad * gelu'(x)
Tensor gelu_backward(const Tensor& grad, const Tensor& x);

}  // namespace keel::cpu
