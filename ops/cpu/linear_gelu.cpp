// The CPU kernel of linear_gelu: linear's kernel, then gelu's, on its output. The CPU is the
// reference, so it computes exactly what linear followed by gelu computes, bit for bit: fusing
// saves memory traffic on a GPU, and the CPU has no epilogue to fuse into.
#include "ops/cpu/linear_gelu.h"

#include "ops/cpu/gelu.h"
#include "ops/cpu/matmul.h"

namespace keel::cpu {

// x (..., K), weight (N, K), bias (N) or undefined -> (..., N)
Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor* pre) {
  Tensor p = linear(x, weight, bias);  // (..., N) contiguous
  Tensor y = gelu_forward(p.as_strided({p.numel()}, {1}, p.offset()));
  if (pre) *pre = p;
  return y.as_strided(p.shape(), contiguous_strides(p.shape()), y.offset());
}

// grad (..., N), weight (N, K), pre (..., K) -> (..., K)
Tensor linear_grad_x_dgelu(const Tensor& grad, const Tensor& weight, const Tensor& pre) {
  const Tensor dh = linear_grad_x(grad, weight);  // (..., K) contiguous
  const Tensor d = gelu_backward(dh.as_strided({dh.numel()}, {1}, dh.offset()),
                                 pre.as_strided({pre.numel()}, {1}, pre.offset()));
  return d.as_strided(dh.shape(), contiguous_strides(dh.shape()), d.offset());
}

}  // namespace keel::cpu
