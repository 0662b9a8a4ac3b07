// The CPU kernel of linear_gelu: linear's row blocks, each followed by the GELU on that block
// while it is still in the core's cache (ops/cpu/matmul.h, RowEpilogue). The CPU is the
// reference, so it computes exactly what linear followed by gelu computes, bit for bit: the
// same product and the same elementwise GELU on the same values, one block after another
// instead of the whole product and then the whole GELU.
#include "ops/cpu/linear_gelu.h"

#include "core/factory.h"
#include "ops/cpu/gelu.h"
#include "ops/cpu/matmul.h"

namespace keel::cpu {

// x (..., K), weight (N, K), bias (N) or undefined -> (..., N)
Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor* pre) {
  Shape shape = x.shape();
  shape.back() = weight.size(0);
  const int64_t N = shape.back();
  Tensor p = empty(shape, {x.dtype()});
  Tensor y = pre ? empty(shape, {x.dtype()}) : p;  // without a backward, the GELU overwrites the product
  visit_dtype<CpuFloat>(x.dtype(), "linear_gelu", [&]<typename T>() {
    const T* pp = p.data<T>();
    T* py = y.data<T>();
    linear_into(x, weight, bias, p,
                [&](int64_t r0, int64_t r1) { gelu_forward_span(pp + r0 * N, py + r0 * N, (r1 - r0) * N); });
  });
  if (pre) *pre = p;
  return y;
}

// grad (..., N), weight (N, K), pre (..., K) -> (..., K)
Tensor linear_grad_x_dgelu(const Tensor& grad, const Tensor& weight, const Tensor& pre) {
  Shape shape = grad.shape();
  shape.back() = weight.size(1);
  const int64_t K = shape.back();
  Tensor d = empty(shape, {grad.dtype()});
  visit_dtype<CpuFloat>(grad.dtype(), "linear_gelu", [&]<typename T>() {
    const T* pp = pre.data<T>();
    T* pd = d.data<T>();
    linear_grad_x_into(grad, weight, d, [&](int64_t r0, int64_t r1) {
      gelu_backward_span(pd + r0 * K, pp + r0 * K, pd + r0 * K, (r1 - r0) * K);
    });
  });
  return d;
}

}  // namespace keel::cpu
