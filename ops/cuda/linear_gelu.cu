// linear_gelu on the device: the product, the bias and the GELU in one cublasLtMatmul
// (ops/cuda/linear_lt.h), so the (..., N) pre-activation is written once (as the epilogue's aux
// output, for the backward) or not at all (no gradient), instead of written by the GEMM, read
// and written again by a GELU kernel. When cuBLASLt offers no algorithm for the operands, it is
// linear then gelu, the unfused path, with the same results to rounding.
//
// Which GELU cuBLASLt computes: cublasLt.h and the cuBLAS documentation describe the GELU
// epilogues only as "apply GELU point-wise transform to the results (x:=GELU(x))", with no
// formula and no accuracy. keel's gelu is GPT-2's tanh form, 0.5 x (1 + tanh(sqrt(2/pi) (x +
// 0.044715 x^3))); the exact form, x Phi(x) with the normal CDF, differs from it by up to 4.7e-4
// (at x = -2.70). The epilogue is the tanh form: PyTorch found its cuBLASLt GELU path to be the
// tanh approximation and switched its other GPU paths of the same op to match
// (pytorch/pytorch#104061), and llm.c fuses it as GPT-2's GELU (karpathy/llm.c#653). But not
// exactly: on an H100 (cuBLAS of CUDA 13.0) the epilogue's f32 output was 1.75e-5 off linear then
// gelu on the CPU (worst row, relative), over f32's 1e-5 parity tolerance and far under bf16's
// and f16's rounding (4e-3, 5e-4): a fast tanh. So the epilogue serves bf16 and f16, and f32,
// the dtype that promises CPU parity, is linear (bias in its epilogue) then keel's gelu kernel
// (tanhf). tests/ops/test_linear_gelu_cuda.cpp holds both dtypes' paths to the CPU; the
// emulated cuBLASLt computes the tanh form in f32 (core/cuda/emu/cublas.cpp: gelu_tanh).
//
// Rounding, against the unfused path: the epilogue takes the GELU of the f32 accumulator plus
// bias and rounds once to the output dtype, where linear then gelu rounds the pre-activation to
// the dtype first; the backward reads the rounded pre-activation either way (aux is stored in
// x's dtype). In f32 the two agree to the accumulation order; in bf16/f16 the fused one is the
// more accurate.
#include "ops/cuda/linear_gelu.h"

#include "core/factory.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/gelu.h"
#include "ops/cuda/linear_lt.h"
#include "ops/cuda/matmul.h"

namespace keel::cuda {

// x (..., K), weight (N, K), bias (N) or undefined -> (..., N)
Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor* pre) {
  dev::require_device(x, "linear_gelu");
  // f32 is keel's exact dtype (CPU parity under 1e-5): there the GELU is keel's own kernel.
  if (x.dtype() != DType::f32) {
    Shape shape = x.shape();
    shape.back() = weight.size(0);
    Tensor y = empty(shape, {x.dtype(), x.device()});
    Tensor p = pre ? empty(shape, {x.dtype(), x.device()}) : Tensor();
    if (linear_gelu_lt(x, weight, bias, y, pre ? &p : nullptr)) {
      if (pre) *pre = p;
      return y;
    }
  }
  // The unfused path. (Where cuBLASLt declined, y and p went back to the caching allocator unused.)
  const Tensor p = linear(x, weight, bias);  // (..., N) contiguous
  const Tensor y = gelu_forward(p.as_strided({p.numel()}, {1}, p.offset()));
  if (pre) *pre = p;
  return y.as_strided(p.shape(), contiguous_strides(p.shape()), y.offset());
}

// grad (..., N), weight (N, K), pre (..., K) -> (..., K)
Tensor linear_grad_x_dgelu(const Tensor& grad, const Tensor& weight, const Tensor& pre) {
  dev::require_device(grad, "linear_gelu backward");
  // f32 is keel's exact dtype: there the derivative is keel's own kernel, as in the forward.
  if (grad.dtype() != DType::f32) {
    Shape shape = grad.shape();
    shape.back() = weight.size(1);
    Tensor d = empty(shape, {grad.dtype(), grad.device()});
    if (linear_grad_x_dgelu_lt(grad, weight, pre, d)) return d;
  }
  const Tensor dh = linear_grad_x(grad, weight);  // (..., K) contiguous
  const Tensor d = gelu_backward(dh.as_strided({dh.numel()}, {1}, dh.offset()),
                                 pre.as_strided({pre.numel()}, {1}, pre.offset()));
  return d.as_strided(dh.shape(), contiguous_strides(dh.shape()), d.offset());
}

}  // namespace keel::cuda
