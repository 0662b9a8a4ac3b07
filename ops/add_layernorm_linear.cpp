// Front end of add_layernorm_linear: the composition, or on CUDA for a decode step's few rows
// without a gradient, the fused kernel.
#include "ops/add_layernorm_linear.h"

#include "core/autograd.h"
#include "ops/add_layernorm.h"
#include "ops/common.h"
#include "ops/cuda/add_layernorm_linear.h"
#include "ops/layernorm.h"
#include "ops/linear_gelu.h"
#include "ops/matmul.h"
#include "ops/op_costs.h"

namespace keel {

// x, y (..., C), ln_weight, ln_bias (C), weight (N, C), bias (N) -> h (..., C), out (..., N)
AddLayerNormLinear add_layernorm_linear(const Tensor& x, const Tensor& y, const Tensor& ln_weight,
                                        const Tensor& ln_bias, double eps, const Tensor& weight, const Tensor& bias,
                                        bool gelu) {
  const char* op = "add_layernorm_linear";
  detail::check_layernorm(op, x, ln_weight, ln_bias, eps);
  detail::check_linear(op, x, weight, bias);
  if (y.defined()) {
    detail::check_floating_operands(op, {{"x", x}, {"y", y}});
    if (x.shape() != y.shape())
      throw ShapeError(op, "x and y must have one shape: " + detail::describe("x", x) + ", " + detail::describe("y", y));
  }
  const int64_t C = x.size(-1), M = C > 0 ? x.numel() / C : 0;
  const bool fused = x.device().is_cuda() && !needs_grad({x, y, ln_weight, ln_bias, weight, bias}) &&
                     weight.size(0) > 0 && cuda::add_layernorm_linear_fits(M, C, x.dtype());
  if (!fused) {
    const AddLayerNorm n = y.defined() ? add_layernorm(x, y, ln_weight, ln_bias, eps)
                                       : AddLayerNorm{x, layernorm(x, ln_weight, ln_bias, eps)};
    return {n.h, gelu ? linear_gelu(n.out, weight, bias) : linear(n.out, weight, bias)};
  }
  profiler::Scope prof(op);
  if (prof) prof.cost(op_costs::add_layernorm_linear(x, y.defined(), ln_bias.defined(), weight, bias, gelu));
  auto flat = [](const Tensor& t) { return t.defined() ? detail::rows_of(t) : t; };
  auto plain = [](const Tensor& t) { return t.defined() ? t.detach().contiguous() : t; };
  Tensor h2;
  const Tensor out2 = cuda::add_layernorm_linear(flat(x), flat(y), plain(ln_weight), plain(ln_bias), eps,
                                                 plain(weight), plain(bias), gelu, h2);
  Shape out_shape = x.shape();
  out_shape.back() = weight.size(0);
  return {y.defined() ? h2.as_strided(x.shape(), contiguous_strides(x.shape()), 0) : x,
          out2.as_strided(out_shape, contiguous_strides(out_shape), 0)};
}

}  // namespace keel
