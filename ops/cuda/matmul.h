// The CUDA kernels of matmul and linear (ops/matmul.h). ops/cpu/matmul.h declares the very
// same functions for the other device; the front end ops/matmul.cpp picks one by the tensors' device.
// No autograd, no argument checks (the front end's job). Tensors: on one CUDA device, f32, bf16
// or f16, computed in f32 (f64 raises DTypeError: it exists for CPU gradient checks).
// Plain C++ (no CUDA headers); a build without CUDA links ops/cuda/no_cuda.cpp instead, whose
// functions raise DeviceError. Work is queued on the device's compute stream unless it says it waits.
#pragma once

#include "core/tensor.h"

namespace keel::cuda {

// a (..., M, K), b (..., K, N), batch dims broadcast, any strides -> (..., M, N) contiguous.
Tensor matmul(const Tensor& a, const Tensor& b);
// Backward of matmul for grad (..., M, N): da = grad @ b^T, db = a^T @ grad, each summed over
// the batch elements its operand was broadcast to, so they come back in a_shape / b_shape.
Tensor matmul_grad_a(const Tensor& grad, const Tensor& b, const Shape& a_shape);
Tensor matmul_grad_b(const Tensor& grad, const Tensor& a, const Shape& b_shape);
// x (..., K), weight (N, K), bias (N) or undefined -> (..., N) = x @ weight^T + bias.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias);
// Backward of linear for grad (..., N): dx (..., K) = grad @ weight, dweight (N, K) =
// grad^T @ x over all rows, dbias (N) = grad summed over all rows.
Tensor linear_grad_x(const Tensor& grad, const Tensor& weight);
Tensor linear_grad_weight(const Tensor& grad, const Tensor& x);
Tensor linear_grad_bias(const Tensor& grad);

}  // namespace keel::cuda
