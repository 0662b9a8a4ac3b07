// Front end of linear_gelu: argument checks, dispatch, autograd node.
#include "ops/linear_gelu.h"

#include "core/autograd.h"
#include "ops/common.h"
#include "ops/cpu/gelu.h"
#include "ops/cpu/linear_gelu.h"
#include "ops/cpu/matmul.h"
#include "ops/cuda/gelu.h"
#include "ops/cuda/linear_gelu.h"
#include "ops/cuda/matmul.h"
#include "ops/op_costs.h"

namespace keel {

namespace {

// The backward of gelu then the backward of linear, as the unfused ops would run them: the
// same kernels on the same tensors, so on the CPU the gradients are bit-identical to
// gelu(linear(...))'s. x is saved iff weight needs grad, weight iff x needs grad (as linear).
struct LinearGeluBackward : Node {
  Tensor x, weight;  // detached
  Tensor pre;        // (P) the pre-activation x @ weight^T + bias, flattened
  const char* name() const override { return "LinearGeluBackward"; }
  // grad (..., N) -> dx (..., K), dweight (N, K), dbias (N)
  std::vector<Tensor> backward(const Tensor& grad) override {
    const bool on_cuda = grad.device().is_cuda();
    Tensor g = grad.detach().contiguous();
    g = g.as_strided({g.numel()}, {1}, g.offset());
    Tensor dpre = on_cuda ? cuda::gelu_backward(g, pre) : cpu::gelu_backward(g, pre);
    dpre = dpre.as_strided(grad.shape(), contiguous_strides(grad.shape()), dpre.offset());
    Tensor dx, dw, db;
    if (needs_input_grad(0)) dx = on_cuda ? cuda::linear_grad_x(dpre, weight) : cpu::linear_grad_x(dpre, weight);
    if (needs_input_grad(1)) dw = on_cuda ? cuda::linear_grad_weight(dpre, x) : cpu::linear_grad_weight(dpre, x);
    if (needs_input_grad(2)) db = on_cuda ? cuda::linear_grad_bias(dpre) : cpu::linear_grad_bias(dpre);
    return {dx, dw, db};
  }
  void release() override { x = weight = pre = {}; }
  profiler::Cost cost(const Tensor& grad) const override {
    const int64_t K = weight.defined() ? weight.size(1) : x.size(-1);
    return op_costs::linear_gelu_backward(grad, K, needs_input_grad(0), needs_input_grad(1), needs_input_grad(2));
  }
};

bool wants_grad(const Tensor& t) { return t.defined() && t.requires_grad(); }

}  // namespace

// x (..., K), weight (N, K), bias (N) or undefined -> (..., N)
Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const char* op = "linear_gelu";
  detail::check_linear(op, x, weight, bias);
  const bool grad = needs_grad({x, weight, bias});
  profiler::Scope prof(op);
  if (prof) prof.cost(op_costs::linear_gelu(x, weight, bias, grad));
  Tensor pre;
  Tensor out = x.device().is_cuda() ? cuda::linear_gelu(x, weight, bias, grad ? &pre : nullptr)
                                    : cpu::linear_gelu(x, weight, bias, grad ? &pre : nullptr);
  if (grad) {
    auto node = std::make_shared<LinearGeluBackward>();
    if (wants_grad(weight)) node->x = x.detach();
    if (wants_grad(x)) node->weight = weight.detach();
    node->pre = pre.detach().as_strided({pre.numel()}, {1}, pre.offset());
    connect(out, node, {x, weight, bias});
  }
  return out;
}

}  // namespace keel
