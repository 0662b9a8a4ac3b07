// Internal to ops/cuda: linear through cuBLASLt with its bias as the epilogue (called by
// ops/cuda/matmul.cu's linear), with a GELU epilogue, and its backward's product with the GELU's
// derivative as the epilogue (called by ops/cuda/linear_gelu.cu: linear_gelu, and
// linear_grad_x_dgelu for the MLP's backward), implemented in ops/cuda/linear_lt.cu. Each falls
// back to unfused kernels when these decline.
// Plain C++ (no CUDA headers).
#pragma once

#include "core/tensor.h"

namespace keel::cuda {

// x2 (R, K) row-major, w (N, K) row-major, bias (N) or undefined -> out (R, N) contiguous =
// x2 w^T + bias in one cublasLtMatmul with the BIAS epilogue; with gelu, out = gelu(that)
// (GELU_BIAS or GELU), and with aux (R, N) contiguous also *aux = that (GELU_AUX_BIAS or
// GELU_AUX). False, with nothing written, when cuBLASLt offers no algorithm for these operands.
bool linear_lt(const Tensor& x2, const Tensor& w, const Tensor& bias, Tensor& out, bool gelu = false,
               Tensor* aux = nullptr);

// x (..., K), weight (N, K), bias (N) or undefined; out (..., N) contiguous, pre (..., N)
// contiguous or null: out = gelu(x @ weight^T + bias), the product, bias and GELU in one
// cublasLtMatmul (epilogue GELU_BIAS, or GELU without a bias); with pre, the epilogue's aux
// output too (GELU_AUX_BIAS / GELU_AUX): *pre = x @ weight^T + bias, rounded to x's dtype.
// False, with nothing queued or written, when cuBLASLt offers no algorithm (x not row-major,
// N not a multiple of 8 with pre, a bias off 16 bytes, an empty product, ...).
bool linear_gelu_lt(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out, Tensor* pre);

// grad (..., N), weight (N, K), pre (..., K) contiguous, dpre (..., K) contiguous: dpre =
// (grad @ weight) * gelu'(pre), the gradient of linear(gelu(pre), weight) with respect to pre,
// in one cublasLtMatmul (epilogue DGELU, pre its aux input; the derivative of the same tanh GELU
// as the forward's epilogue). False, with nothing queued or written, when cuBLASLt offers no
// algorithm (K not a multiple of 8, pre off 16 bytes, an empty product, ...).
bool linear_grad_x_dgelu_lt(const Tensor& grad, const Tensor& weight, const Tensor& pre, Tensor& dpre);

}  // namespace keel::cuda
