// Front ends of matmul and linear: argument checks, dispatch, autograd nodes.
#include "ops/matmul.h"

#include <algorithm>

#include "core/autograd.h"
#include "ops/common.h"
#include "ops/cpu/matmul.h"
#include "ops/cuda/matmul.h"
#include "ops/op_costs.h"

namespace keel {

namespace {

// Each operand's gradient needs only the other operand, so each is saved only when the
// other one needs a gradient (a frozen weight does not keep activations alive).
struct MatmulBackward : Node {
  Tensor a, b;  // detached; a saved iff b needs grad, b iff a needs grad
  Shape a_shape, b_shape;
  const char* name() const override { return "MatmulBackward"; }
  // grad (..., M, N) -> da (a_shape), db (b_shape)
  std::vector<Tensor> backward(const Tensor& grad) override {
    Tensor da, db;
    const bool on_cuda = grad.device().is_cuda();
    if (needs_input_grad(0)) da = on_cuda ? cuda::matmul_grad_a(grad, b, a_shape) : cpu::matmul_grad_a(grad, b, a_shape);
    if (needs_input_grad(1)) db = on_cuda ? cuda::matmul_grad_b(grad, a, b_shape) : cpu::matmul_grad_b(grad, a, b_shape);
    return {da, db};
  }
  void release() override { a = b = {}; }
  profiler::Cost cost(const Tensor& grad) const override {
    return op_costs::matmul_backward(grad.shape(), a_shape, b_shape, grad.dtype(), needs_input_grad(0),
                                     needs_input_grad(1));
  }
};

struct LinearBackward : Node {
  Tensor x, weight;  // detached; x saved iff weight needs grad, weight iff x needs grad
  const char* name() const override { return "LinearBackward"; }
  // grad (..., N) -> dx (..., K), dweight (N, K), dbias (N)
  std::vector<Tensor> backward(const Tensor& grad) override {
    Tensor dx, dw, db;
    const bool on_cuda = grad.device().is_cuda();
    if (needs_input_grad(0)) dx = on_cuda ? cuda::linear_grad_x(grad, weight) : cpu::linear_grad_x(grad, weight);
    if (needs_input_grad(1)) dw = on_cuda ? cuda::linear_grad_weight(grad, x) : cpu::linear_grad_weight(grad, x);
    if (needs_input_grad(2)) db = on_cuda ? cuda::linear_grad_bias(grad) : cpu::linear_grad_bias(grad);
    return {dx, dw, db};
  }
  void release() override { x = weight = {}; }
  profiler::Cost cost(const Tensor& grad) const override {
    const int64_t K = weight.defined() ? weight.size(1) : x.size(-1);
    return op_costs::linear_backward(grad, K, needs_input_grad(0), needs_input_grad(1), needs_input_grad(2));
  }
};

bool wants_grad(const Tensor& t) { return t.defined() && t.requires_grad(); }

}  // namespace

// a (..., M, K), b (..., K, N) -> (..., M, N)
Tensor matmul(const Tensor& a, const Tensor& b) {
  const char* op = "matmul";
  detail::check_same_device(op, {{"a", a}, {"b", b}});
  detail::check_floating(op, {{"a", a}, {"b", b}});
  detail::check_same_dtype(op, {{"a", a}, {"b", b}});
  detail::check_min_dim(op, {"a", a}, 2);
  detail::check_min_dim(op, {"b", b}, 2);
  if (a.size(-1) != b.size(-2))
    throw ShapeError(op, "inner dimensions differ: " + detail::describe("a", a) + ", " + detail::describe("b", b),
                     "a's last dimension must equal b's second-to-last");
  matmul_batch_shape(a, b, op);  // throws when the batch dims do not broadcast
  profiler::Scope prof(op);
  if (prof) prof.cost(op_costs::matmul(a, b));
  Tensor out = a.device().is_cuda() ? cuda::matmul(a, b) : cpu::matmul(a, b);
  if (needs_grad({a, b})) {
    auto node = std::make_shared<MatmulBackward>();
    node->a_shape = a.shape();
    node->b_shape = b.shape();
    if (wants_grad(b)) node->a = a.detach();
    if (wants_grad(a)) node->b = b.detach();
    connect(out, node, {a, b});
  }
  return out;
}

// x (..., K), weight (N, K), bias (N) or undefined -> (..., N)
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const char* op = "linear";
  detail::check_linear(op, x, weight, bias);
  profiler::Scope prof(op);
  if (prof) prof.cost(op_costs::linear(x, weight, bias));
  Tensor out = x.device().is_cuda() ? cuda::linear(x, weight, bias) : cpu::linear(x, weight, bias);
  if (needs_grad({x, weight, bias})) {
    auto node = std::make_shared<LinearBackward>();
    if (wants_grad(weight)) node->x = x.detach();
    if (wants_grad(x)) node->weight = weight.detach();
    connect(out, node, {x, weight, bias});
  }
  return out;
}

}  // namespace keel
