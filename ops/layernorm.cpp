// Front end of layernorm: argument checks, dispatch, autograd node.
#include "ops/layernorm.h"

#include "core/autograd.h"
#include "ops/common.h"
#include "ops/cpu/layernorm.h"
#include "ops/cuda/layernorm.h"
#include "ops/op_costs.h"

namespace keel {

namespace {

using detail::rows_of;

struct LayerNormBackward : Node {
  Tensor x, weight, mean, rstd;  // x (N, C); weight (C) only when x needs grad; mean, rstd (N)
  Shape x_shape;
  const char* name() const override { return "LayerNormBackward"; }
  // grad (..., C) -> dx (..., C), dweight (C), dbias (C)
  std::vector<Tensor> backward(const Tensor& grad) override {
    Tensor dx, dw, db;
    auto kernel = x.device().is_cuda() ? cuda::layernorm_backward : cpu::layernorm_backward;
    kernel(rows_of(grad), x, weight, mean, rstd, needs_input_grad(0), needs_input_grad(1), needs_input_grad(2), dx,
           dw, db, Tensor());
    if (dx.defined()) dx = dx.as_strided(x_shape, contiguous_strides(x_shape), 0);
    return {dx, dw, db};
  }
  void release() override { x = weight = mean = rstd = {}; }
  profiler::Cost cost(const Tensor&) const override {
    return op_costs::layernorm_backward(x, mean.dtype(), needs_input_grad(0), needs_input_grad(1), needs_input_grad(2));
  }
};

}  // namespace

// x (..., C), weight (C), bias (C) or undefined -> (..., C)
Tensor layernorm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  const char* op = "layernorm";
  detail::check_layernorm(op, x, weight, bias, eps);
  profiler::Scope prof(op);
  if (prof) prof.cost(op_costs::layernorm(x, bias.defined(), x.device().is_cuda() ? DType::f32 : x.dtype()));
  Tensor x2 = rows_of(x), w = weight.detach().contiguous();
  Tensor b = bias.defined() ? bias.detach().contiguous() : Tensor();
  Tensor mean, rstd;
  Tensor y2 = x.device().is_cuda() ? cuda::layernorm_forward(x2, w, b, eps, mean, rstd)  // mean, rstd in f32
                                   : cpu::layernorm_forward(x2, w, b, eps, mean, rstd);
  Tensor y = y2.as_strided(x.shape(), contiguous_strides(x.shape()), 0);
  if (needs_grad({x, weight, bias})) {
    auto node = std::make_shared<LayerNormBackward>();
    node->x = x2;
    if (x.requires_grad()) node->weight = w;
    node->mean = mean;
    node->rstd = rstd;
    node->x_shape = x.shape();
    connect(y, node, {x, weight, bias});
  }
  return y;
}

}  // namespace keel
