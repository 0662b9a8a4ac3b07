// Front end of add_layernorm: argument checks, dispatch, and the autograd of its two outputs.
//
// keel's autograd gives a node one gradient: that of the one output it made (attention's other
// outputs, its statistics, take none). add_layernorm has two differentiable outputs, so it makes
// two nodes. out's node, AddLayerNormBackward, does the op's whole backward and has the edges
// to x, y, weight and bias. h's node, AddLayerNormResidual, has one edge, to out's node: it runs
// first (the engine runs a node only once every node that feeds it has), hands the gradient of
// h over, and sends nothing along the edge. out's node then computes
//   dh_total = dh + layernorm's dx,   dx = dy = dh_total,
// with dh added inside layernorm's dx kernel as dx is written (ops/cuda/layernorm.h's dx_add).
//
// What the backward fuses: the sum of h's two gradients, which unfused was the engine's
// accumulation (a copy and an add kernel, reading and writing the (N, C) gradient twice more).
// What it does not: dweight and dbias are still layernorm's two column-sum kernels, and dx and
// dy are one tensor handed to both inputs (as the add's backward hands its gradient on).
#include "ops/add_layernorm.h"

#include <utility>

#include "core/autograd.h"
#include "ops/common.h"
#include "ops/cpu/add_layernorm.h"
#include "ops/cpu/layernorm.h"
#include "ops/cuda/add_layernorm.h"
#include "ops/cuda/layernorm.h"
#include "ops/op_costs.h"

namespace keel {

namespace {

using detail::rows_of;

struct AddLayerNormBackward : Node {
  Tensor h, weight, mean, rstd;  // h (N, C); weight (C) only when x or y needs grad; mean, rstd (N)
  Shape shape;                   // x's
  Tensor dh;                     // (..., C): h's gradient from its other uses, set by AddLayerNormResidual
  const char* name() const override { return "AddLayerNormBackward"; }
  bool need_dx() const { return needs_input_grad(0) || needs_input_grad(1); }
  // grad (..., C) = d(out), undefined when only h leads to the loss -> dx, dy (..., C), dweight, dbias (C)
  std::vector<Tensor> backward(const Tensor& grad) override {
    Tensor residual = std::exchange(dh, Tensor());
    if (residual.defined() && residual.dtype() != h.dtype()) residual = residual.to(h.dtype());
    Tensor dx, dw, db;
    if (grad.defined()) {
      auto kernel = h.device().is_cuda() ? cuda::layernorm_backward : cpu::layernorm_backward;
      kernel(rows_of(grad), h, weight, mean, rstd, need_dx(), needs_input_grad(2), needs_input_grad(3), dx, dw, db,
             residual.defined() ? rows_of(residual) : Tensor());
      if (dx.defined()) dx = dx.as_strided(shape, contiguous_strides(shape), dx.offset());
    } else {
      // out took no part in the loss: d(x + y) = dh. The engine runs this node all the same (h's
      // node feeds it), and every node it feeds must be handed a gradient: weight's and bias'
      // are zero (x + y then layernorm would have left them untouched instead).
      dx = residual;
      const Options opts{h.dtype(), h.device()};
      if (needs_input_grad(2)) dw = zeros({h.size(1)}, opts);
      if (needs_input_grad(3)) db = zeros({h.size(1)}, opts);
    }
    return {needs_input_grad(0) ? dx : Tensor(), needs_input_grad(1) ? dx : Tensor(), dw, db};
  }
  void release() override { h = weight = mean = rstd = dh = {}; }
  profiler::Cost cost(const Tensor& grad) const override {
    if (!grad.defined()) return {};
    return op_costs::add_layernorm_backward(h, mean.dtype(), need_dx(), needs_input_grad(2), needs_input_grad(3),
                                            dh.defined());
  }
};

// h's grad_fn. Its one edge leads to out's node (next[0]); the gradient goes across by hand.
struct AddLayerNormResidual : Node {
  const char* name() const override { return "AddLayerNormResidual"; }
  // dh (..., C) -> nothing along the edge: out's node adds dh into dx itself
  std::vector<Tensor> backward(const Tensor& dh) override {
    static_cast<AddLayerNormBackward*>(next[0].get())->dh = dh;
    return {};
  }
};

bool wants_grad(const Tensor& t) { return t.defined() && t.requires_grad(); }

}  // namespace

// x, y (..., C), weight (C), bias (C) or undefined -> h, out (..., C)
AddLayerNorm add_layernorm(const Tensor& x, const Tensor& y, const Tensor& weight, const Tensor& bias, double eps) {
  const char* op = "add_layernorm";
  detail::check_layernorm(op, x, weight, bias, eps);
  detail::check_floating_operands(op, {{"x", x}, {"y", y}});
  if (x.shape() != y.shape())
    throw ShapeError(op, "x and y must have one shape: " + detail::describe("x", x) + ", " + detail::describe("y", y),
                     "add_layernorm does not broadcast; use x + y then layernorm");
  const bool cuda_dev = x.device().is_cuda();
  profiler::Scope prof(op);
  if (prof) prof.cost(op_costs::add_layernorm(x, bias.defined(), cuda_dev ? DType::f32 : x.dtype()));
  Tensor x2 = rows_of(x), y2 = rows_of(y), w = weight.detach().contiguous();
  Tensor b = bias.defined() ? bias.detach().contiguous() : Tensor();
  Tensor h2, mean, rstd;
  Tensor out2 = cuda_dev ? cuda::add_layernorm_forward(x2, y2, w, b, eps, h2, mean, rstd)  // mean, rstd in f32
                         : cpu::add_layernorm_forward(x2, y2, w, b, eps, h2, mean, rstd);
  const Shape strides = contiguous_strides(x.shape());
  AddLayerNorm r{h2.as_strided(x.shape(), strides, 0), out2.as_strided(x.shape(), strides, 0)};
  if (needs_grad({x, y, weight, bias})) {
    auto node = std::make_shared<AddLayerNormBackward>();
    node->h = h2;
    if (wants_grad(x) || wants_grad(y)) node->weight = w;
    node->mean = mean;
    node->rstd = rstd;
    node->shape = x.shape();
    connect(r.out, node, {x, y, weight, bias});
    // h depends on x and y only: with neither needing a gradient it needs none either.
    if (wants_grad(x) || wants_grad(y)) connect(r.h, std::make_shared<AddLayerNormResidual>(), {r.out});
  }
  return r;
}

}  // namespace keel
