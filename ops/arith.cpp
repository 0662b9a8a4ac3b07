// Elementwise arithmetic: front ends and their backward nodes.
#include "ops/arith.h"

#include <algorithm>

#include "ops/common.h"
#include "ops/op_costs.h"
#include "ops/cpu/arith.h"
#include "ops/cuda/arith.h"
#include "ops/reduce.h"
#include "ops/shape.h"

namespace keel {

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1)
      throw ShapeError(op, "shapes " + shape_str(a) + " and " + shape_str(b) + " do not broadcast",
                       "dimensions must match or be 1, aligned from the right");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Tensor sum_to_shape(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  Tensor r = g;
  // Leading dimensions the input did not have: sum them away.
  while (r.dim() > static_cast<int64_t>(shape.size())) r = sum(r, 0);
  // Dimensions where the input had size 1: sum, keeping the 1.
  for (int64_t d = 0; d < r.dim(); ++d)
    if (shape[d] == 1 && r.size(d) != 1) r = sum(r, d, /*keepdim=*/true);
  return r;
}

namespace {
void check_binary(const char* op, const Tensor& a, const Tensor& b) {
  detail::check_same_device(op, {{"a", a}, {"b", b}});
  detail::check_same_dtype(op, {{"a", a}, {"b", b}});
  detail::check_floating(op, {{"a", a}});
}

// a, b broadcastable -> (broadcast shape)
Tensor binary_forward(BinaryOp op, const char* name, const Tensor& a, const Tensor& b) {
  check_binary(name, a, b);
  Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  profiler::Scope prof(name);
  if (prof) prof.cost(op_costs::elementwise({&a, &b}, shape, a.dtype(), 1));
  Tensor out = empty(shape, {a.dtype(), a.device()});
  if (a.device().is_cuda()) cuda::binary(op, a, b, out);
  else cpu::binary(op, a, b, out);
  return out;
}

struct AddBackward : Node {
  Shape a_shape, b_shape;
  double b_sign;  // +1 for add, -1 for sub
  const char* name() const override { return b_sign > 0 ? "AddBackward" : "SubBackward"; }
  profiler::Cost cost(const Tensor& g) const override {
    // What backward() below runs: an input of g's shape gets g itself (no pass at all); a
    // broadcast one a sum over its broadcast dims (read g, write the input's shape); sub's b first
    // a negation (read and write g).
    profiler::Cost c;
    for (size_t i = 0; i < 2; ++i) {
      if (!needs_input_grad(i)) continue;
      const Shape& shape = i ? b_shape : a_shape;
      if (i == 1 && b_sign < 0) c.bytes += 2 * op_costs::bytes_of(g);
      if (shape != g.shape()) c.bytes += op_costs::bytes_of(g) + op_costs::bytes_of(shape, g.dtype());
    }
    c.shape = shape_str(g.shape());
    return c;
  }
  std::vector<Tensor> backward(const Tensor& g) override {
    Tensor ga, gb;
    if (needs_input_grad(0)) ga = sum_to_shape(g, a_shape);
    if (needs_input_grad(1)) gb = sum_to_shape(b_sign > 0 ? g : neg(g), b_shape);
    return {ga, gb};
  }
};

struct MulBackward : Node {
  Tensor a, b;
  const char* name() const override { return "MulBackward"; }
  std::vector<Tensor> backward(const Tensor& g) override {
    Tensor ga, gb;
    if (needs_input_grad(0)) ga = sum_to_shape(mul(g, b), a.shape());
    if (needs_input_grad(1)) gb = sum_to_shape(mul(g, a), b.shape());
    return {ga, gb};
  }
  void release() override { a = {}, b = {}; }
};

struct DivBackward : Node {
  Tensor a, b;
  const char* name() const override { return "DivBackward"; }
  std::vector<Tensor> backward(const Tensor& g) override {
    Tensor ga, gb;
    Tensor g_over_b = div(g, b);
    if (needs_input_grad(0)) ga = sum_to_shape(g_over_b, a.shape());
    if (needs_input_grad(1)) gb = sum_to_shape(neg(mul(g_over_b, div(a, b))), b.shape());  // -g a / b^2
    return {ga, gb};
  }
  void release() override { a = {}, b = {}; }
};
}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward(BinaryOp::add, "add", a, b);
  if (needs_grad({a, b})) {
    auto n = std::make_shared<AddBackward>();
    n->a_shape = a.shape(), n->b_shape = b.shape(), n->b_sign = 1;
    connect(out, n, {a, b});
  }
  return out;
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward(BinaryOp::sub, "sub", a, b);
  if (needs_grad({a, b})) {
    auto n = std::make_shared<AddBackward>();
    n->a_shape = a.shape(), n->b_shape = b.shape(), n->b_sign = -1;
    connect(out, n, {a, b});
  }
  return out;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward(BinaryOp::mul, "mul", a, b);
  if (needs_grad({a, b})) {
    auto n = std::make_shared<MulBackward>();
    // Each input's gradient needs the other input (and sum_to_shape needs both shapes).
    n->a = a.detach(), n->b = b.detach();
    connect(out, n, {a, b});
  }
  return out;
}

Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward(BinaryOp::div, "div", a, b);
  if (needs_grad({a, b})) {
    auto n = std::make_shared<DivBackward>();
    n->a = a.detach(), n->b = b.detach();
    connect(out, n, {a, b});
  }
  return out;
}

// ---- unary ----

namespace {
// x (any) -> same shape
Tensor unary_forward(UnaryOp op, const char* name, const Tensor& x, double s = 0.0) {
  profiler::Scope prof(name);
  if (prof) prof.cost(op_costs::elementwise({&x}, x.shape(), x.dtype(), 1));
  detail::check_floating(name, {{"x", x}});
  Tensor out = empty(x.shape(), {x.dtype(), x.device()});
  if (x.device().is_cuda()) cuda::unary(op, x, out, s);
  else cpu::unary(op, x, out, s);
  return out;
}

// y = f(x) whose derivative is expressed through the saved x or y.
struct UnaryBackward : Node {
  UnaryOp op;
  double s = 0;
  Tensor saved;  // x for log/relu/square, y for exp/tanh, nothing for neg/add/mul scalar
  const char* name() const override {
    switch (op) {
      case UnaryOp::neg: return "NegBackward";
      case UnaryOp::exp: return "ExpBackward";
      case UnaryOp::log: return "LogBackward";
      case UnaryOp::tanh: return "TanhBackward";
      case UnaryOp::relu: return "ReluBackward";
      case UnaryOp::square: return "SquareBackward";
      case UnaryOp::add_scalar: return "AddScalarBackward";
      case UnaryOp::mul_scalar: return "MulScalarBackward";
    }
    return "UnaryBackward";
  }
  std::vector<Tensor> backward(const Tensor& g) override {
    switch (op) {
      case UnaryOp::neg: return {neg(g)};
      case UnaryOp::exp: return {mul(g, saved)};                         // d e^x = e^x
      case UnaryOp::log: return {div(g, saved)};                         // d log x = 1/x
      case UnaryOp::tanh: return {mul(g, add(neg(square(saved)), 1.0))};  // 1 - tanh^2
      case UnaryOp::relu:
        return {saved.device().is_cuda() ? cuda::relu_backward(g, saved) : cpu::relu_backward(g, saved)};
      case UnaryOp::square: return {mul(g, mul(saved, 2.0))};
      case UnaryOp::add_scalar: return {g};
      case UnaryOp::mul_scalar: return {mul(g, s)};
    }
    return {};
  }
  void release() override { saved = {}; }
};

Tensor unary_op(UnaryOp op, const char* name, const Tensor& x, double s = 0.0) {
  Tensor y = unary_forward(op, name, x, s);
  if (needs_grad({x})) {
    auto n = std::make_shared<UnaryBackward>();
    n->op = op, n->s = s;
    if (op == UnaryOp::exp || op == UnaryOp::tanh) n->saved = y.detach();
    if (op == UnaryOp::log || op == UnaryOp::square) n->saved = x.detach();
    if (op == UnaryOp::relu) n->saved = x.detach().contiguous();
    connect(y, n, {x});
  }
  return y;
}
}  // namespace

Tensor add(const Tensor& x, double s) { return unary_op(UnaryOp::add_scalar, "add", x, s); }
Tensor mul(const Tensor& x, double s) { return unary_op(UnaryOp::mul_scalar, "mul", x, s); }
Tensor neg(const Tensor& x) { return unary_op(UnaryOp::neg, "neg", x); }
Tensor exp(const Tensor& x) { return unary_op(UnaryOp::exp, "exp", x); }
Tensor log(const Tensor& x) { return unary_op(UnaryOp::log, "log", x); }
Tensor tanh(const Tensor& x) { return unary_op(UnaryOp::tanh, "tanh", x); }
Tensor relu(const Tensor& x) { return unary_op(UnaryOp::relu, "relu", x); }
Tensor square(const Tensor& x) { return unary_op(UnaryOp::square, "square", x); }

}  // namespace keel
