// A fully connected layer followed by GPT-2's GELU (tanh form, ops/gelu.h) as one op: the first
// half of the transformer MLP, gelu(linear(x, weight, bias)).
//
// Why one op: on a GPU the GELU (and the bias) ride in the matrix product's epilogue
// (cuBLASLt's GELU_AUX_BIAS), so the (..., N) activation is written once, not written by the
// product and then read and written again by a separate GELU kernel; that is one launch and one
// read + write of the MLP's widest activation fewer per layer and step. The backward needs the
// pre-activation, which the same call writes when a gradient is wanted. On the CPU the op is
// exactly linear then gelu, bit for bit (the same kernels on the same values), and it is the
// reference the CUDA path is checked against.
#pragma once

#include "core/tensor.h"

namespace keel {

// x (..., K), weight (N, K) as in PyTorch's nn.Linear, bias (N) or undefined -> (..., N):
// y = gelu(x @ weight^T + bias). Differentiable in x, weight and bias; the backward keeps the
// pre-activation (..., N) and the operands linear's backward keeps, nothing more.
Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias = {});

}  // namespace keel
