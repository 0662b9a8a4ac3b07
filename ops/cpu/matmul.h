// The CPU kernels of matmul and linear (ops/matmul.h). ops/cuda/matmul.h declares the very
// same functions for the other device; the front end ops/matmul.cpp picks one by the tensors' device.
// No autograd, no argument checks (the front end's job). Tensors: on the CPU, f32 or f64
// (the CPU computes in these; other dtypes raise DTypeError).
#pragma once

#include <cstdint>
#include <functional>

#include "core/tensor.h"

namespace keel::cpu {

// Run on each block of rows [r0, r1) of a linear product's (R, N) result as soon as the block is
// computed, on the thread that computed it, while it is in that core's cache: how linear_gelu
// applies its GELU and the MLP's backward its GELU derivative (ops/cpu/linear_gelu.cpp).
using RowEpilogue = std::function<void(int64_t r0, int64_t r1)>;

// a (..., M, K), b (..., K, N), batch dims broadcast, any strides -> (..., M, N) contiguous.
Tensor matmul(const Tensor& a, const Tensor& b);
// Backward of matmul for grad (..., M, N): da = grad @ b^T, db = a^T @ grad, each summed over
// the batch elements its operand was broadcast to, so they come back in a_shape / b_shape.
Tensor matmul_grad_a(const Tensor& grad, const Tensor& b, const Shape& a_shape);
Tensor matmul_grad_b(const Tensor& grad, const Tensor& a, const Shape& b_shape);
// x (..., K), weight (N, K), bias (N) or undefined -> (..., N) = x @ weight^T + bias.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias);
// The same into out (..., N) contiguous, in x's dtype, with `after` (when set) on each block of rows.
void linear_into(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out, const RowEpilogue& after = {});
// Backward of linear for grad (..., N): dx (..., K) = grad @ weight, dweight (N, K) =
// grad^T @ x over all rows, dbias (N) = grad summed over all rows.
Tensor linear_grad_x(const Tensor& grad, const Tensor& weight);
// linear_grad_x into dx (..., K) contiguous, in grad's dtype, with `after` (when set) on each block of rows.
void linear_grad_x_into(const Tensor& grad, const Tensor& weight, Tensor& dx, const RowEpilogue& after = {});
Tensor linear_grad_weight(const Tensor& grad, const Tensor& x);
Tensor linear_grad_bias(const Tensor& grad);

}  // namespace keel::cpu
