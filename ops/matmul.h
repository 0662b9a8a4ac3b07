// Matrix products: batched matmul and the fully connected layer (linear).
//
// Both are differentiable. The CPU kernels use Eigen's GEMM, one block of the result's rows per
// chunk of keel's threads (core/parallel.h, ops/cpu/matmul.cpp), and read strided operands in
// place: a matrix whose rows or whose columns are unit-stride (a plain tensor or a transposed
// view) is mapped without a copy; anything else is packed.
#pragma once

#include "core/tensor.h"

namespace keel {

// a (..., M, K), b (..., K, N) -> (..., M, N). The batch dims (all but the last two) broadcast
// by NumPy rules, so b may be a plain (K, N) matrix shared by every batch element of a.
// Both need at least 2 dims, the same floating dtype and the same device.
Tensor matmul(const Tensor& a, const Tensor& b);

// x (..., K), weight (N, K) as in PyTorch's nn.Linear, bias (N) or undefined -> (..., N):
// y = x @ weight^T + bias, computed as one GEMM over the flattened leading dims of x.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});

}  // namespace keel
