// Front end of mlp: argument checks, dispatch, autograd node.
#include "ops/mlp.h"

#include "core/autograd.h"
#include "ops/common.h"
#include "ops/cpu/linear_gelu.h"
#include "ops/cpu/matmul.h"
#include "ops/cuda/linear_gelu.h"
#include "ops/cuda/matmul.h"
#include "ops/op_costs.h"

namespace keel {

namespace {

// Inputs in connect()'s order.
enum Input { kX, kFcWeight, kFcBias, kProjWeight, kProjBias };

// c_proj's three gradients, then the gradient of the GELU's input (one fused product on a GPU),
// then c_fc's three: what linear's and linear_gelu's nodes compute, on the same tensors.
struct MLPBackward : Node {
  Tensor x, fc_weight;  // detached; x iff fc_weight needs grad, fc_weight iff x needs grad
  Tensor pre, h;        // (..., Ch): the GELU's input (iff c_fc's gradients are wanted) and output
  Tensor proj_weight;   // iff c_fc's gradients are wanted
  int64_t C = 0, Ch = 0;  // x's width, the hidden width
  const char* name() const override { return "MLPBackward"; }
  bool fc_grads() const { return needs_input_grad(kX) || needs_input_grad(kFcWeight) || needs_input_grad(kFcBias); }
  // grad (..., Co) -> dx (..., C), dfc_weight (Ch, C), dfc_bias (Ch), dproj_weight (Co, Ch), dproj_bias (Co)
  std::vector<Tensor> backward(const Tensor& grad) override {
    const bool on_cuda = grad.device().is_cuda();
    std::vector<Tensor> d(5);
    if (needs_input_grad(kProjWeight))
      d[kProjWeight] = on_cuda ? cuda::linear_grad_weight(grad, h) : cpu::linear_grad_weight(grad, h);
    if (needs_input_grad(kProjBias)) d[kProjBias] = on_cuda ? cuda::linear_grad_bias(grad) : cpu::linear_grad_bias(grad);
    if (!fc_grads()) return d;
    const Tensor dpre = on_cuda ? cuda::linear_grad_x_dgelu(grad, proj_weight, pre)
                                : cpu::linear_grad_x_dgelu(grad, proj_weight, pre);  // (..., Ch)
    if (needs_input_grad(kX)) d[kX] = on_cuda ? cuda::linear_grad_x(dpre, fc_weight) : cpu::linear_grad_x(dpre, fc_weight);
    if (needs_input_grad(kFcWeight))
      d[kFcWeight] = on_cuda ? cuda::linear_grad_weight(dpre, x) : cpu::linear_grad_weight(dpre, x);
    if (needs_input_grad(kFcBias)) d[kFcBias] = on_cuda ? cuda::linear_grad_bias(dpre) : cpu::linear_grad_bias(dpre);
    return d;
  }
  void release() override { x = fc_weight = pre = h = proj_weight = {}; }
  profiler::Cost cost(const Tensor& grad) const override {
    return op_costs::mlp_backward(grad, Ch, C, needs_input_grad(kX), needs_input_grad(kFcWeight),
                                  needs_input_grad(kFcBias), needs_input_grad(kProjWeight), needs_input_grad(kProjBias));
  }
};

bool wants_grad(const Tensor& t) { return t.defined() && t.requires_grad(); }

}  // namespace

// x (..., C), fc_weight (Ch, C), fc_bias (Ch), proj_weight (Co, Ch), proj_bias (Co) -> (..., Co)
Tensor mlp(const Tensor& x, const Tensor& fc_weight, const Tensor& fc_bias, const Tensor& proj_weight,
           const Tensor& proj_bias) {
  const char* op = "mlp";
  detail::check_linear(op, x, fc_weight, fc_bias);
  detail::check_floating_operands(op, {{"x", x}, {"proj_weight", proj_weight}}, {{"proj_bias", proj_bias}});
  detail::check_dim(op, {"proj_weight", proj_weight}, 2);
  const int64_t Ch = fc_weight.size(0);
  if (proj_weight.size(1) != Ch)
    throw ShapeError(op,
                     "proj_weight " + shape_str(proj_weight.shape()) + " must be (Co, " + std::to_string(Ch) +
                         "): it reads the hidden layer of fc_weight " + shape_str(fc_weight.shape()),
                     "pass c_proj's weight (Co, Ch) with Ch = c_fc's out-features");
  if (proj_bias.defined() && (proj_bias.dim() != 1 || proj_bias.size(0) != proj_weight.size(0)))
    throw ShapeError(op, "proj_bias " + shape_str(proj_bias.shape()) + " must be (" +
                             std::to_string(proj_weight.size(0)) + "), proj_weight's out-features");
  const bool grad = needs_grad({x, fc_weight, fc_bias, proj_weight, proj_bias});
  const bool fc_grad = grad && (wants_grad(x) || wants_grad(fc_weight) || wants_grad(fc_bias));
  profiler::Scope prof(op);
  if (prof) prof.cost(op_costs::mlp(x, fc_weight, fc_bias, proj_weight, proj_bias, fc_grad));
  const bool on_cuda = x.device().is_cuda();
  Tensor pre;
  const Tensor h = on_cuda ? cuda::linear_gelu(x, fc_weight, fc_bias, fc_grad ? &pre : nullptr)
                           : cpu::linear_gelu(x, fc_weight, fc_bias, fc_grad ? &pre : nullptr);
  Tensor y = on_cuda ? cuda::linear(h, proj_weight, proj_bias) : cpu::linear(h, proj_weight, proj_bias);
  if (grad) {
    auto node = std::make_shared<MLPBackward>();
    if (wants_grad(fc_weight)) node->x = x.detach();
    if (wants_grad(x)) node->fc_weight = fc_weight.detach();
    if (fc_grad) node->pre = pre.detach(), node->proj_weight = proj_weight.detach();
    if (wants_grad(proj_weight)) node->h = h.detach();
    node->C = fc_weight.size(1), node->Ch = Ch;
    connect(y, node, {x, fc_weight, fc_bias, proj_weight, proj_bias});
  }
  return y;
}

}  // namespace keel
