// Front end of gelu: argument checks, dispatch, autograd node.
#include "ops/gelu.h"

#include "core/autograd.h"
#include "ops/common.h"
#include "ops/cpu/gelu.h"
#include "ops/cuda/gelu.h"
#include "ops/op_costs.h"

namespace keel {

namespace {

// t (any) -> (N): a packed, detached copy unless t already is contiguous.
Tensor flat(const Tensor& t) {
  Tensor c = t.detach().contiguous();
  return c.as_strided({c.numel()}, {1}, c.offset());
}

struct GeluBackward : Node {
  Tensor x;  // (N), the input flattened
  Shape shape;
  const char* name() const override { return "GeluBackward"; }
  // grad (shape) -> dx (shape)
  std::vector<Tensor> backward(const Tensor& grad) override {
    Tensor dx = x.device().is_cuda() ? cuda::gelu_backward(flat(grad), x) : cpu::gelu_backward(flat(grad), x);
    return {dx.as_strided(shape, contiguous_strides(shape), 0)};
  }
  void release() override { x = {}; }
  profiler::Cost cost(const Tensor&) const override { return op_costs::gelu_backward(x); }
};

}  // namespace

// x (any) -> same shape
Tensor gelu(const Tensor& x) {
  const char* op = "gelu";
  detail::check_defined(op, {{"x", x}});
  detail::check_floating(op, {{"x", x}});
  profiler::Scope prof(op);
  if (prof) prof.cost(op_costs::gelu(x));
  Tensor xf = flat(x);
  Tensor yf = x.device().is_cuda() ? cuda::gelu_forward(xf) : cpu::gelu_forward(xf);
  Tensor y = yf.as_strided(x.shape(), contiguous_strides(x.shape()), 0);
  if (needs_grad({x})) {
    auto node = std::make_shared<GeluBackward>();
    node->x = xf;
    node->shape = x.shape();
    connect(y, node, {x});
  }
  return y;
}

}  // namespace keel
