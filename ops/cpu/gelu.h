// The CPU kernels of GELU, tanh form (ops/gelu.h). ops/cuda/gelu.h declares the very
// same functions for the other device; the front end ops/gelu.cpp picks one by the tensors' device.
// No autograd, no argument checks (the front end's job). Tensors: on the CPU, f32 or f64
// (the CPU computes in these; other dtypes raise DTypeError).
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace keel::cpu {

// x (N) contiguous -> (N)
Tensor gelu_forward(const Tensor& x);
// grad, x (N) contiguous -> dx (N) = grad * gelu'(x)
Tensor gelu_backward(const Tensor& grad, const Tensor& x);

// The same on n elements at raw pointers, on the calling thread (T = float or double): what
// linear_gelu runs on each block of rows its product has just written. y may be x, dx may be grad.
template <typename T>
void gelu_forward_span(const T* x, T* y, int64_t n);
template <typename T>
void gelu_backward_span(const T* grad, const T* x, T* dx, int64_t n);

}  // namespace keel::cpu
