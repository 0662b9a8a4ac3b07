// Front ends of softmax and log_softmax: argument checks, dispatch, autograd node.
#include "ops/softmax.h"

#include "core/autograd.h"
#include "ops/common.h"
#include "ops/op_costs.h"
#include "ops/cpu/softmax.h"
#include "ops/cuda/softmax.h"

namespace keel {

namespace {

struct SoftmaxBackward : Node {
  Tensor y;  // the output, detached (saving it as is would make a cycle output -> node -> output)
  int64_t dim = 0;
  bool log = false;
  const char* name() const override { return log ? "LogSoftmaxBackward" : "SoftmaxBackward"; }
  // grad (shape of y) -> dx (same)
  std::vector<Tensor> backward(const Tensor& grad) override {
    Tensor g = grad.detach().contiguous();
    return {y.device().is_cuda() ? cuda::softmax_backward(y, g, dim, log) : cpu::softmax_backward(y, g, dim, log)};
  }
  void release() override { y = {}; }
};

// x (..., n, ...) -> same shape
Tensor softmax_impl(const Tensor& x, int64_t dim, bool log) {
  const char* op = log ? "log_softmax" : "softmax";
  detail::check_defined(op, {{"x", x}});
  detail::check_floating(op, {{"x", x}});
  detail::check_min_dim(op, {"x", x}, 1);
  int64_t d = normalize_dim(dim, x.dim(), op);
  profiler::Scope prof(op);
  if (prof) prof.cost(op_costs::softmax(x));
  Tensor xc = x.detach().contiguous();
  Tensor y = x.device().is_cuda() ? cuda::softmax_forward(xc, d, log) : cpu::softmax_forward(xc, d, log);
  if (needs_grad({x})) {
    auto node = std::make_shared<SoftmaxBackward>();
    node->y = y.detach();
    node->dim = d;
    node->log = log;
    connect(y, node, {x});
  }
  return y;
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_impl(x, dim, false); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_impl(x, dim, true); }

}  // namespace keel
