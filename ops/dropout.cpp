// Dropout: the mask is a pure function of (seed, offset, element index), drawn from Philox.
#include "ops/dropout.h"

#include "ops/arith.h"
#include "ops/common.h"
#ifdef KEEL_WITH_CUDA
#include "ops/cuda/ops.h"
#endif

namespace keel {

namespace {
struct DropoutBackward : Node {
  Tensor mask;  // 0 or 1/(1-p), same shape as x
  const char* name() const override { return "DropoutBackward"; }
  std::vector<Tensor> backward(const Tensor& g) override { return {mul(g, mask)}; }
  void release() override { mask = {}; }
};

// mask (N) <- 1/(1-p) where philox_uniform(key, base, i) > p, else 0; on mask's device.
void fill_mask(Tensor& mask, uint64_t key, uint64_t base, double p) {
#ifdef KEEL_WITH_CUDA
  if (mask.device().is_cuda()) return cuda::dropout_mask(mask, key, base, static_cast<float>(p), 1.0 / (1.0 - p));
#endif
  detail::dispatch_float("dropout", mask.dtype(), [&]<typename T>() {
    T* m = mask.data<T>();
    const T keep_scale = static_cast<T>(1.0 / (1.0 - p));
    const float pf = static_cast<float>(p);
    for (int64_t i = 0; i < mask.numel(); ++i) m[i] = philox_uniform(key, base, i) > pf ? keep_scale : T(0);
  });
}
}  // namespace

// x (any) -> same shape.
Tensor dropout(const Tensor& x, double p, Generator& gen, bool training) {
  const char* op = "dropout";
  detail::check_floating(op, {{"x", x}});
  if (!(p >= 0.0 && p < 1.0))
    throw ValueError(op, "probability p = " + std::to_string(p) + " is outside [0, 1)", "use 0 <= p < 1");
  if (!training || p == 0.0) return x;
#ifndef KEEL_WITH_CUDA
  if (x.device().is_cuda()) detail::no_cuda_kernel(op);  // a build without the CUDA kernels
#endif
  const uint64_t key = gen.seed(), base = gen.advance(x.numel());
  Tensor mask = empty(x.shape(), {x.dtype(), x.device()});
  fill_mask(mask, key, base, p);
  Tensor out = mul(x.detach(), mask);  // detached: our own node records the product, not mul's
  if (needs_grad({x})) {
    auto n = std::make_shared<DropoutBackward>();
    n->mask = mask;
    connect(out, n, {x});
  }
  return out;
}

}  // namespace keel
