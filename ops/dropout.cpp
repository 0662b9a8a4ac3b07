// Dropout: the mask is a pure function of (seed, offset, element index), drawn from Philox.
#include "ops/dropout.h"

#include "ops/arith.h"
#include "ops/common.h"
#include "ops/op_costs.h"
#include "ops/cpu/dropout.h"
#include "ops/cuda/dropout.h"

namespace keel {

namespace {
struct DropoutBackward : Node {
  Tensor mask;  // 0 or 1/(1-p), same shape as x
  const char* name() const override { return "DropoutBackward"; }
  std::vector<Tensor> backward(const Tensor& g) override { return {mul(g, mask)}; }
  void release() override { mask = {}; }
};
}  // namespace

// x (any) -> same shape.
Tensor dropout(const Tensor& x, double p, Generator& gen, bool training) {
  const char* op = "dropout";
  detail::check_floating(op, {{"x", x}});
  if (!(p >= 0.0 && p < 1.0))
    throw ValueError(op, "probability p = " + std::to_string(p) + " is outside [0, 1)", "use 0 <= p < 1");
  if (!training || p == 0.0) return x;
  profiler::Scope prof(op);
  if (prof) prof.cost(op_costs::elementwise({&x}, x.shape(), x.dtype(), 1));  // mask drawn and applied: x -> mask, out
  const uint64_t key = gen.seed(), base = gen.advance(x.numel());
  Tensor mask = empty(x.shape(), {x.dtype(), x.device()});
  const float pf = static_cast<float>(p);
  const double keep_scale = 1.0 / (1.0 - p);
  if (x.device().is_cuda()) cuda::dropout_mask(mask, key, base, pf, keep_scale);
  else cpu::dropout_mask(mask, key, base, pf, keep_scale);
  Tensor out = mul(x.detach(), mask);  // detached: our own node records the product, not mul's
  if (needs_grad({x})) {
    auto n = std::make_shared<DropoutBackward>();
    n->mask = mask;
    connect(out, n, {x});
  }
  return out;
}

}  // namespace keel
