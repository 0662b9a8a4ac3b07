// Front end of cross_entropy: argument checks, dispatch, autograd node.
#include "ops/cross_entropy.h"

#include <cmath>
#include <string>

#include "core/autograd.h"
#include "ops/common.h"
#include "ops/cpu/cross_entropy.h"
#include "ops/cuda/cross_entropy.h"
#include "ops/op_costs.h"

namespace keel {

namespace {

struct CrossEntropyBackward : Node {
  Tensor logits, targets, lse;  // logits (N, V) (widened to f32 on the CPU), targets (N), lse (N) (f32 on CUDA)
  Tensor count;                 // [] i64 on the logits' device: the rows that count
  Tensor ready;                 // (N, V): the forward's gradient for a loss gradient of `expected`, or none
  float expected = 1.0f;
  double z_loss = 0;
  Shape logits_shape;
  DType logits_dtype = DType::f32;  // the dtype dlogits must have
  int64_t classes = 0, ignore_index = kIgnoreIndex;
  const char* name() const override { return "CrossEntropyBackward"; }
  // grad [] -> dlogits (..., V); targets get none
  std::vector<Tensor> backward(const Tensor& grad) override {
    // The loss gradient stays on the device: no host round trip in the backward pass.
    auto kernel = logits.device().is_cuda() ? cuda::cross_entropy_backward : cpu::cross_entropy_backward;
    Tensor d = kernel(logits, targets, lse, classes, ignore_index, count, grad, ready, expected, z_loss);
    if (d.dtype() != logits_dtype) d = d.to(logits_dtype);
    return {d.as_strided(logits_shape, contiguous_strides(logits_shape), 0), Tensor()};
  }
  void release() override { logits = targets = lse = count = ready = {}; }
  profiler::Cost cost(const Tensor&) const override {
    return op_costs::cross_entropy_backward(logits, targets, lse.dtype(), logits_dtype, ready.defined());
  }
};

}  // namespace

// logits (..., Vp), targets (...) -> [], over the first `classes` columns (0: all); log_z (2) when asked
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index, int64_t classes,
                     std::optional<double> expected_grad, double z_loss, Tensor* log_z) {
  const char* op = "cross_entropy";
  detail::check_same_device(op, {{"logits", logits}, {"targets", targets}});
  detail::check_floating(op, {{"logits", logits}});
  detail::check_integer(op, {{"targets", targets}});
  detail::check_min_dim(op, {"logits", logits}, 1);
  Shape rows(logits.shape().begin(), logits.shape().end() - 1);
  if (targets.shape() != rows)
    throw ShapeError(op, "targets must have logits' shape without the last dim: " +
                             detail::describe("logits", logits) + ", " + detail::describe("targets", targets),
                     "logits (..., V) go with targets (...)");
  const int64_t Vp = logits.size(-1), N = numel_of(rows);
  if (classes < 0 || classes > Vp)
    throw ValueError(op, "classes = " + std::to_string(classes) + " is not in [0, " + std::to_string(Vp) + "]",
                     "pass the number of real classes (at most the logits' last dim), or 0 for all");
  const int64_t V = classes > 0 ? classes : Vp;
  // No class to score: logsumexp over nothing is -inf, so no loss means anything (PyTorch raises
  // too). Refused here for both devices, so the kernels may assume V >= 1.
  if (V == 0)
    throw ShapeError(op, "logits have an empty class dimension: " + detail::describe("logits", logits),
                     "logits (..., V) need V >= 1 classes");
  if (expected_grad && !std::isfinite(*expected_grad))
    throw ValueError(op, "expected_grad = " + std::to_string(*expected_grad) + " is not finite",
                     "pass the gradient the loss will get in backward (1 for loss.backward()), or none");
  if (!std::isfinite(z_loss) || z_loss < 0)
    throw ValueError(op, "z_loss = " + std::to_string(z_loss) + " is not a finite number >= 0",
                     "pass the z-loss coefficient (1e-4 in arXiv 2309.14322), or 0 for none");
  const bool fuse = expected_grad && needs_grad({logits});
  profiler::Scope prof(op);
  if (prof)
    prof.cost(op_costs::cross_entropy(logits, targets, logits.device().is_cuda() ? DType::f32 : logits.dtype(), fuse));
  // The CPU kernels compute in f32/f64: bf16/f16 logits are widened (the CUDA kernels read
  // them as they are and compute in f32).
  const bool half = logits.dtype() == DType::bf16 || logits.dtype() == DType::f16;
  Tensor lc = half && !logits.device().is_cuda() ? logits.detach().to(DType::f32) : logits.detach().contiguous();
  Tensor l2 = lc.as_strided({N, Vp}, {Vp, 1}, lc.offset());
  Tensor tc = targets.detach().contiguous();
  Tensor t1 = tc.as_strided({N}, {1}, tc.offset());
  Tensor lse, count, ready;
  const float expected = fuse ? static_cast<float>(*expected_grad) : 1.0f;
  auto kernel = logits.device().is_cuda() ? cuda::cross_entropy_forward : cpu::cross_entropy_forward;
  Tensor loss = kernel(l2, t1, V, ignore_index, lse, count, fuse ? &ready : nullptr, expected, z_loss, log_z);
  if (needs_grad({logits})) {
    auto node = std::make_shared<CrossEntropyBackward>();
    node->logits = l2;
    node->targets = t1;
    node->lse = lse;
    node->logits_shape = logits.shape();
    node->logits_dtype = logits.dtype();
    node->classes = V;
    node->ignore_index = ignore_index;
    node->count = count;
    node->ready = ready;
    node->expected = expected;
    node->z_loss = z_loss;
    connect(loss, node, {logits, targets});
  }
  return loss;
}

}  // namespace keel
