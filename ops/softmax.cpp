// Front ends of softmax and log_softmax: argument checks, dispatch, autograd node.
#include "ops/softmax.h"

#include "core/autograd.h"
#include "ops/common.h"
#ifdef KEEL_WITH_CUDA
#include "ops/cuda/ops.h"
#endif

namespace keel {

namespace {

struct SoftmaxBackward : Node {
  Tensor y;  // the output, detached (saving it as is would make a cycle output -> node -> output)
  int64_t dim = 0;
  bool log = false;
  const char* name() const override { return log ? "LogSoftmaxBackward" : "SoftmaxBackward"; }
  // grad (shape of y) -> dx (same)
  std::vector<Tensor> backward(const Tensor& grad) override {
#ifdef KEEL_WITH_CUDA
    if (y.device().is_cuda()) return {cuda::softmax_backward(y, grad.detach().contiguous(), dim, log)};
#endif
    return {cpu::softmax_backward(y, grad.detach().contiguous(), dim, log)};
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
#ifdef KEEL_WITH_CUDA
  Tensor y = x.device().is_cuda() ? cuda::softmax_forward(x.detach().contiguous(), d, log)
                                  : cpu::softmax_forward(x.detach().contiguous(), d, log);
#else
  if (x.device().is_cuda()) detail::no_cuda_kernel(op);  // a build without the CUDA kernels
  Tensor y = cpu::softmax_forward(x.detach().contiguous(), d, log);
#endif
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
