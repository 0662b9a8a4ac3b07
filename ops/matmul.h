// Matrix products: batched matmul and the fully connected layer (linear).
//
// Both are differentiable. The CPU kernels use Eigen's GEMM (multi-threaded through OpenMP)
// and read strided operands in place: a matrix whose rows or whose columns are unit-stride
// (a plain tensor or a transposed view) is mapped without a copy; anything else is packed.
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

// CPU kernels, shared by the forward and backward of the front ends above. No autograd, no
// argument checks: callers pass CPU tensors of one dtype (f32 or f64) with fitting shapes.
namespace cpu {

// The batch shape a (..., M, K) and b (..., K, N) broadcast to; ShapeError naming `op` if none.
Shape matmul_batch_shape(const Tensor& a, const Tensor& b, const char* op);

// c (M, N) with unit column stride; a (M, K), b (K, N) any strides:
// c = a @ b, or c += a @ b when accumulate.
void gemm(const Tensor& a, const Tensor& b, Tensor& c, bool accumulate = false);

// a (..., M, K), b (..., K, N), batch dims broadcast, any strides -> (..., M, N) contiguous.
Tensor matmul(const Tensor& a, const Tensor& b);
// Backward of matmul for grad (..., M, N): da = grad @ b^T, db = a^T @ grad, each summed over
// the batch elements its operand was broadcast to, so they come back in a_shape / b_shape.
Tensor matmul_grad_a(const Tensor& grad, const Tensor& b, const Shape& a_shape);
Tensor matmul_grad_b(const Tensor& grad, const Tensor& a, const Shape& b_shape);

// x (..., K), weight (N, K), bias (N) or undefined -> (..., N).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias);
// Backward of linear for grad (..., N): dx (..., K) = grad @ weight, dweight (N, K) =
// grad^T @ x over all rows, dbias (N) = grad summed over all rows.
Tensor linear_grad_x(const Tensor& grad, const Tensor& weight);
Tensor linear_grad_weight(const Tensor& grad, const Tensor& x);
Tensor linear_grad_bias(const Tensor& grad);

}  // namespace cpu
}  // namespace keel
