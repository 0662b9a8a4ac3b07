// Reductions: front ends and backward nodes.
#include "ops/reduce.h"

#include "ops/arith.h"
#include "ops/common.h"
#include "ops/op_costs.h"
#include "ops/cpu/reduce.h"
#include "ops/cuda/reduce.h"

namespace keel {

namespace {
struct Split3 {
  int64_t outer = 1, n = 1, inner = 1;
};
Split3 split_at(const Shape& s, int64_t d) {
  Split3 r;
  for (int64_t i = 0; i < d; ++i) r.outer *= s[i];
  r.n = s[d];
  for (size_t i = d + 1; i < s.size(); ++i) r.inner *= s[i];
  return r;
}
Shape reduced_shape(const Shape& s, int64_t d, bool keepdim) {
  Shape out = s;
  if (keepdim)
    out[d] = 1;
  else
    out.erase(out.begin() + d);
  return out;
}

// x (outer, n, inner) -> out (outer, inner) [, argmax (outer, inner)]: the kernel of x's device.
void run_reduce(Reduce kind, const Tensor& x, int64_t outer, int64_t n, int64_t inner, Tensor& out,
                Tensor* argmax = nullptr) {
  profiler::Scope prof(kind == Reduce::sum ? "sum" : "max");
  if (prof) prof.cost(op_costs::reduction(x, out.shape()));
  if (x.device().is_cuda()) cuda::reduce_dim(kind, x, outer, n, inner, out, argmax);
  else cpu::reduce_dim(kind, x, outer, n, inner, out, argmax);
}

// g broadcast back to `shape`, materialised (g has `shape` with dim d reduced, kept as 1).
Tensor expand_back(const Tensor& g_keepdim, const Shape& shape) {
  Shape strides(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) strides[i] = g_keepdim.shape()[i] == 1 ? 0 : g_keepdim.strides()[i];
  return g_keepdim.detach().as_strided(shape, strides, g_keepdim.offset()).contiguous();
}

// x (any) -> x packed, detached
Tensor prepare(const char* op, const Tensor& x) {
  detail::check_floating(op, {{"x", x}});
  return x.detach().contiguous();
}

// The gradient of a sum is the output gradient broadcast back over the summed dimensions.
struct SumBackward : Node {
  Shape in_shape;
  Shape kept;  // in_shape with the summed dimensions set to 1
  const char* name() const override { return "SumBackward"; }
  std::vector<Tensor> backward(const Tensor& g) override {
    Tensor gc = g.contiguous();
    return {expand_back(gc.as_strided(kept, contiguous_strides(kept), gc.offset()), in_shape)};
  }
};

struct MaxBackward : Node {
  Shape in_shape;
  int64_t dim;
  Tensor argmax;
  const char* name() const override { return "MaxBackward"; }
  std::vector<Tensor> backward(const Tensor& g) override {
    Split3 s = split_at(in_shape, dim);
    Tensor gx = empty(in_shape, {g.dtype(), g.device()});
    if (g.device().is_cuda()) cuda::scatter_max_grad(g.contiguous(), argmax, s.outer, s.n, s.inner, gx);
    else cpu::scatter_max_grad(g.contiguous(), argmax, s.outer, s.n, s.inner, gx);
    return {gx};
  }
  void release() override { argmax = {}; }
};
}  // namespace

Tensor sum(const Tensor& x, int64_t dim, bool keepdim) {
  Tensor xc = prepare("sum", x);
  int64_t d = normalize_dim(dim, x.dim(), "sum");
  Split3 s = split_at(x.shape(), d);
  Tensor out = empty(reduced_shape(x.shape(), d, keepdim), {x.dtype(), x.device()});
  run_reduce(Reduce::sum, xc, s.outer, s.n, s.inner, out);
  if (needs_grad({x})) {
    auto n = std::make_shared<SumBackward>();
    n->in_shape = x.shape(), n->kept = reduced_shape(x.shape(), d, true);
    connect(out, n, {x});
  }
  return out;
}

Tensor sum(const Tensor& x) {
  Tensor xc = prepare("sum", x);
  Tensor out = empty({}, {x.dtype(), x.device()});
  run_reduce(Reduce::sum, xc, 1, x.numel(), 1, out);
  if (needs_grad({x})) {
    auto n = std::make_shared<SumBackward>();
    n->in_shape = x.shape(), n->kept = Shape(x.dim(), 1);
    connect(out, n, {x});
  }
  return out;
}

Tensor mean(const Tensor& x) { return mul(sum(x), 1.0 / static_cast<double>(x.numel())); }

Tensor mean(const Tensor& x, int64_t dim, bool keepdim) {
  int64_t d = normalize_dim(dim, x.dim(), "mean");
  return mul(sum(x, d, keepdim), 1.0 / static_cast<double>(x.shape()[d]));
}

Tensor max(const Tensor& x, int64_t dim, bool keepdim) {
  Tensor xc = prepare("max", x);
  int64_t d = normalize_dim(dim, x.dim(), "max");
  if (x.shape()[d] == 0) throw ShapeError("max", "cannot take the max over an empty dimension of " + shape_str(x.shape()));
  Split3 s = split_at(x.shape(), d);
  Shape rs = reduced_shape(x.shape(), d, keepdim);
  Tensor out = empty(rs, {x.dtype(), x.device()});
  Tensor idx = empty(rs, {DType::i64, x.device()});
  run_reduce(Reduce::max, xc, s.outer, s.n, s.inner, out, &idx);
  if (needs_grad({x})) {
    auto n = std::make_shared<MaxBackward>();
    n->in_shape = x.shape(), n->dim = d, n->argmax = idx;
    connect(out, n, {x});
  }
  return out;
}

Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  NoGradGuard no_grad;
  Tensor xc = prepare("argmax", x);
  int64_t d = normalize_dim(dim, x.dim(), "argmax");
  if (x.shape()[d] == 0) throw ShapeError("argmax", "cannot take the argmax over an empty dimension of " + shape_str(x.shape()));
  Split3 s = split_at(x.shape(), d);
  Shape rs = reduced_shape(x.shape(), d, keepdim);
  Tensor out = empty(rs, {x.dtype(), x.device()});
  Tensor idx = empty(rs, {DType::i64, x.device()});
  run_reduce(Reduce::max, xc, s.outer, s.n, s.inner, out, &idx);
  return idx;
}

}  // namespace keel
