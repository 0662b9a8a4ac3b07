// The CPU kernel of linear_gelu (ops/linear_gelu.h). ops/cuda/linear_gelu.h declares the very
// same function for the other device; the front end ops/linear_gelu.cpp picks one by the tensors' device.
// No autograd, no argument checks (the front end's job). Tensors: on the CPU, f32 or f64
// (the CPU computes in these; other dtypes raise DTypeError). The backward is gelu_backward
// then linear's gradients (ops/cpu/gelu.h, ops/cpu/matmul.h), called by the front end.
#pragma once

#include "core/tensor.h"

namespace keel::cpu {

// x (..., K), weight (N, K), bias (N) or undefined -> (..., N) contiguous = gelu(x @ weight^T + bias).
// pre: when not null, set to the pre-activation x @ weight^T + bias (..., N) contiguous, in x's
// dtype, which the backward differentiates the GELU at.
Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor* pre);

// grad (..., N), weight (N, K), pre (..., K) contiguous -> dpre (..., K) contiguous =
// (grad @ weight) * gelu'(pre): the gradient reaching linear_gelu's pre-activation through a
// linear layer on its output (ops/mlp.h). linear_grad_x then gelu_backward, bit for bit, on
// the CPU.
Tensor linear_grad_x_dgelu(const Tensor& grad, const Tensor& weight, const Tensor& pre);

}  // namespace keel::cpu
