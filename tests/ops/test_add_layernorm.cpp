// add_layernorm on the CPU: exactly x + y then layernorm, h, out and every gradient bit for bit
// (the CPU is the reference the fused GPU kernel is held to, and CPU training must not move by a
// bit), whichever of its two outputs the loss uses; the backward against finite differences in
// f64; the autograd of two outputs; bad inputs named as add_layernorm's.
#include <doctest/doctest.h>

#include <array>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/factory.h"
#include "checks.h"
#include "gradcheck.h"
#include "ops/add_layernorm.h"
#include "ops/arith.h"
#include "ops/layernorm.h"
#include "ops/reduce.h"

using namespace keel;
using keel::testing::bits;
using keel::testing::gradcheck;
using keel::testing::leaf;
using keel::testing::message_has;

namespace {


// got, want (any): both undefined, or the same shape, dtype and bits.
void check_same_bits(const Tensor& got, const Tensor& want) {
  REQUIRE(got.defined() == want.defined());
  if (!got.defined()) return;
  CHECK(got.shape() == want.shape());
  CHECK(got.dtype() == want.dtype());
  CHECK(bits(got) == bits(want));
}

// Which outputs the loss reads: h alone, out alone, or both as a block does (h + f(out)).
enum class Use { h, out, both };

struct Run {
  Tensor h, out, dx, dy, dw, db;
};

// x0, y0 (..., C), w0 (C), b0 (C) or undefined, rh, ro (..., C) -> h, out and the gradients of
// sum(h * rh + out * ro) (the terms `use` keeps), from fresh leaves; fused: add_layernorm, else
// x + y then layernorm. which: the inputs (x, y, weight, bias) that require a gradient.
Run run(bool fused, const Tensor& x0, const Tensor& y0, const Tensor& w0, const Tensor& b0, std::array<bool, 4> which,
        Use use, const Tensor& rh, const Tensor& ro) {
  Tensor x = x0.detach().contiguous(), y = y0.detach().contiguous(), w = w0.detach().contiguous();
  Tensor b = b0.defined() ? b0.detach().contiguous() : b0;
  if (which[0]) x.set_requires_grad(true);
  if (which[1]) y.set_requires_grad(true);
  if (which[2]) w.set_requires_grad(true);
  if (which[3] && b.defined()) b.set_requires_grad(true);
  Run r;
  if (fused) {
    AddLayerNorm a = add_layernorm(x, y, w, b, 1e-5);
    r.h = a.h, r.out = a.out;
  } else {
    r.h = x + y;
    r.out = layernorm(r.h, w, b, 1e-5);
  }
  Tensor loss = use == Use::h ? r.h * rh : use == Use::out ? r.out * ro : r.h * rh + r.out * ro;
  if (loss.requires_grad()) loss.backward(ones(loss.shape(), {loss.dtype()}));
  if (which[0]) r.dx = x.grad();
  if (which[1]) r.dy = y.grad();
  if (which[2]) r.dw = w.grad();
  if (which[3] && b.defined()) r.db = b.grad();
  return r;
}

}  // namespace

TEST_CASE("add_layernorm is x + y then layernorm bit for bit, forward and backward, on the CPU") {
  struct Case {
    Shape x;
    bool bias;
  };
  // Odd C, 1-D to 3-D, a tiny GPT-2's (B, T, C), and enough rows to thread.
  const Case cases[] = {{{5, 7}, true}, {{7}, true}, {{3, 5, 13}, false}, {{2, 32, 64}, true}, {{300, 133}, true}};
  const std::array<bool, 4> whichs[] = {
      {true, true, true, true}, {true, false, false, false}, {false, true, true, false}, {false, false, true, true}};
  for (DType dt : {DType::f32, DType::f64})
    for (const Case& c : cases)
      for (const auto& which : whichs)
        for (Use use : {Use::h, Use::out, Use::both}) {
          CAPTURE(std::string(dtype_name(dt)));
          CAPTURE(shape_str(c.x));
          CAPTURE(c.bias);
          CAPTURE(which[0]);
          CAPTURE(which[1]);
          CAPTURE(which[2]);
          CAPTURE(which[3]);
          CAPTURE(int(use));
          Generator gen(23);
          const int64_t C = c.x.back();
          Tensor x = randn(c.x, gen, {dt}, 1.0, 2.0), y = randn(c.x, gen, {dt});
          Tensor w = randn({C}, gen, {dt}, 1.0, 0.3), b = c.bias ? randn({C}, gen, {dt}) : Tensor();
          Tensor rh = randn(c.x, gen, {dt}), ro = randn(c.x, gen, {dt});
          const Run fused = run(true, x, y, w, b, which, use, rh, ro), ref = run(false, x, y, w, b, which, use, rh, ro);
          check_same_bits(fused.h, ref.h);
          check_same_bits(fused.out, ref.out);
          check_same_bits(fused.dx, ref.dx);
          check_same_bits(fused.dy, ref.dy);
          if (use == Use::h) {
            // weight and bias do not reach a loss of h alone: no gradient unfused, a zero one fused.
            for (const Tensor& g : {fused.dw, fused.db})
              if (g.defined()) CHECK(sum(g * g).item() == 0.0);
          } else {
            check_same_bits(fused.dw, ref.dw);
            check_same_bits(fused.db, ref.db);
          }
        }
}

TEST_CASE("add_layernorm backward matches finite differences in f64") {
  Generator gen(5);
  // Both outputs in the result, h entering twice (h * h): every path of the backward.
  CHECK(gradcheck(
      [](const std::vector<Tensor>& t) {
        AddLayerNorm a = add_layernorm(t[0], t[1], t[2], t[3]);
        return a.h * a.h + a.out * t[4];
      },
      {leaf({2, 3, 5}, gen), leaf({2, 3, 5}, gen), leaf({5}, gen), leaf({5}, gen), leaf({2, 3, 5}, gen)}));
  CHECK(gradcheck(
      [](const std::vector<Tensor>& t) {
        AddLayerNorm a = add_layernorm(t[0], t[1], t[2], Tensor());
        return a.out;
      },
      {leaf({4, 6}, gen), leaf({4, 6}, gen), leaf({6}, gen)}));
  CHECK(gradcheck([](const std::vector<Tensor>& t) { return add_layernorm(t[0], t[1], t[2], Tensor()).h; },
                  {leaf({4, 6}, gen), leaf({4, 6}, gen), leaf({6}, gen)}));
}

TEST_CASE("add_layernorm records a node per output, and none without a gradient") {
  Generator gen(6);
  Tensor x = randn({4, 5}, gen), y = randn({4, 5}, gen), w = randn({5}, gen), b = randn({5}, gen);
  w.set_requires_grad(true);
  {
    NoGradGuard no_grad;
    AddLayerNorm a = add_layernorm(x, y, w, b);
    CHECK(a.h.grad_fn() == nullptr);
    CHECK(a.out.grad_fn() == nullptr);
  }
  // Only weight needs a gradient: h = x + y needs none.
  AddLayerNorm a = add_layernorm(x, y, w, b);
  CHECK_FALSE(a.h.requires_grad());
  REQUIRE(a.out.grad_fn() != nullptr);
  CHECK(std::string(a.out.grad_fn()->name()) == "AddLayerNormBackward");
  x.set_requires_grad(true);
  AddLayerNorm g = add_layernorm(x, y, w, b);
  REQUIRE(g.h.grad_fn() != nullptr);
  CHECK(std::string(g.h.grad_fn()->name()) == "AddLayerNormResidual");
  // The graph can be walked back twice with retain_graph, and gives the same gradient.
  Tensor loss = sum(g.h * g.out);
  loss.backward({}, /*retain_graph=*/true);
  const std::vector<unsigned char> first = bits(x.grad());
  x.zero_grad();
  loss.backward();
  CHECK(bits(x.grad()) == first);
}

TEST_CASE("add_layernorm rejects bad inputs with errors naming the op") {
  CHECK_THROWS_AS(add_layernorm(zeros({2, 3}), zeros({3, 3}), ones({3}), Tensor()), ShapeError);
  CHECK(message_has([] { add_layernorm(zeros({2, 3}), zeros({1, 3}), ones({3}), Tensor()); }, "add_layernorm"));
  CHECK_THROWS_AS(add_layernorm(zeros({2, 3}), zeros({2, 3}), ones({4}), Tensor()), ShapeError);
  CHECK_THROWS_AS(add_layernorm(zeros({2, 3}), zeros({2, 3}), ones({3}), ones({2})), ShapeError);
  CHECK_THROWS_AS(add_layernorm(zeros({2, 3}), zeros({2, 3}, {DType::f64}), ones({3}), Tensor()), DTypeError);
  CHECK_THROWS_AS(add_layernorm(zeros({2, 3}), Tensor(), ones({3}), Tensor()), ValueError);
  CHECK_THROWS_AS(add_layernorm(zeros({2, 3}), zeros({2, 3}), ones({3}), Tensor(), -1.0), ValueError);
}
