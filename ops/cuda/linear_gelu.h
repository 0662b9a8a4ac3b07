// The CUDA kernel of linear_gelu (ops/linear_gelu.h). ops/cpu/linear_gelu.h declares the very
// same function for the other device; the front end ops/linear_gelu.cpp picks one by the tensors' device.
// No autograd, no argument checks (the front end's job). Tensors: on one CUDA device, f32, bf16
// or f16, computed in f32 (f64 raises DTypeError). The backward is gelu_backward then linear's
// gradients (ops/cuda/gelu.h, ops/cuda/matmul.h), called by the front end.
// Plain C++ (no CUDA headers); a build without CUDA links ops/cuda/no_cuda.cpp instead, whose
// functions raise DeviceError. Work is queued on the device's compute stream.
#pragma once

#include "core/tensor.h"

namespace keel::cuda {

// x (..., K), weight (N, K), bias (N) or undefined -> (..., N) contiguous = gelu(x @ weight^T + bias).
// pre: when not null, set to the pre-activation x @ weight^T + bias (..., N) contiguous, in x's
// dtype, which the backward differentiates the GELU at.
Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor* pre);

// grad (..., N), weight (N, K), pre (..., K) contiguous -> dpre (..., K) contiguous =
// (grad @ weight) * gelu'(pre): the gradient reaching linear_gelu's pre-activation through a
// linear layer on its output (ops/mlp.h). linear_grad_x then gelu_backward, bit for bit, in
// f32; in bf16/f16 one cublasLtMatmul with the DGELU epilogue where cuBLASLt offers one (the
// product is rounded once, after the derivative, where the unfused path rounds it first).
Tensor linear_grad_x_dgelu(const Tensor& grad, const Tensor& weight, const Tensor& pre);

}  // namespace keel::cuda
