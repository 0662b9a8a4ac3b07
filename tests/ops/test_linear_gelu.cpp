// linear_gelu on the CPU: exactly gelu(linear(...)), forward and every gradient, bit for bit (the
// CPU is the reference a fused GPU path is held to, and CPU training must not move by a bit);
// the backward against finite differences in f64; bad inputs named as linear_gelu's.
#include <doctest/doctest.h>

#include <array>
#include <functional>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/factory.h"
#include "checks.h"
#include "gradcheck.h"
#include "ops/gelu.h"
#include "ops/linear_gelu.h"
#include "ops/matmul.h"
#include "ops/shape.h"

using namespace keel;
using keel::testing::bits;
using keel::testing::gradcheck;
using keel::testing::leaf;
using keel::testing::message_has;

namespace {


struct Grads {
  Tensor y, dx, dw, db;
};

// x0 (..., K), w0 (N, K), b0 (N) or undefined, r (..., N) -> f(x, w, b) and the gradients of
// sum(f * r), from fresh leaves of the same values; which: the inputs that require a gradient.
Grads run(const std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)>& f, const Tensor& x0,
          const Tensor& w0, const Tensor& b0, std::array<bool, 3> which, const Tensor& r) {
  Tensor x = x0.detach().contiguous(), w = w0.detach().contiguous(), b = b0.defined() ? b0.detach().contiguous() : b0;
  if (which[0]) x.set_requires_grad(true);
  if (which[1]) w.set_requires_grad(true);
  if (which[2] && b.defined()) b.set_requires_grad(true);
  Tensor y = f(x, w, b);
  if (which[0] || which[1] || (which[2] && b.defined())) y.backward(r);
  return {y, which[0] ? x.grad() : Tensor(), which[1] ? w.grad() : Tensor(),
          which[2] && b.defined() ? b.grad() : Tensor()};
}

// got, want (any): both undefined, or the same shape, dtype and bits.
void check_same_bits(const Tensor& got, const Tensor& want) {
  REQUIRE(got.defined() == want.defined());
  if (!got.defined()) return;
  CHECK(got.shape() == want.shape());
  CHECK(got.dtype() == want.dtype());
  CHECK(bits(got) == bits(want));
}

}  // namespace

TEST_CASE("linear_gelu is gelu(linear(...)) bit for bit, forward and backward, on the CPU") {
  struct Case {
    Shape x;
    int64_t N;
    bool bias;
  };
  // Odd sizes, 1-D and 3-D x, a GPT-2 MLP's shape (C 64 -> 4C 256), and enough rows to thread.
  const Case cases[] = {{{5, 7}, 9, true},        {{7}, 3, true},          {{3, 5, 7}, 13, false},
                        {{2, 32, 64}, 256, true}, {{300, 33}, 131, true}, {{1, 1}, 1, true}};
  const std::array<bool, 3> whichs[] = {
      {true, true, true}, {true, false, false}, {false, true, true}, {false, false, true}};
  auto one_op = [](const Tensor& a, const Tensor& w, const Tensor& b) { return linear_gelu(a, w, b); };
  auto two_ops = [](const Tensor& a, const Tensor& w, const Tensor& b) { return gelu(linear(a, w, b)); };
  for (DType dt : {DType::f32, DType::f64})
    for (const Case& c : cases)
      for (const auto& which : whichs) {
        CAPTURE(std::string(dtype_name(dt)));
        CAPTURE(shape_str(c.x));
        CAPTURE(c.N);
        CAPTURE(c.bias);
        CAPTURE(which[0]);
        CAPTURE(which[1]);
        CAPTURE(which[2]);
        Generator gen(17);
        const int64_t K = c.x.back();
        Tensor x = randn(c.x, gen, {dt}), w = randn({c.N, K}, gen, {dt}, 0.0, 0.3);
        Tensor b = c.bias ? randn({c.N}, gen, {dt}) : Tensor();
        Shape ys = c.x;
        ys.back() = c.N;
        Tensor r = randn(ys, gen, {dt});
        const Grads fused = run(one_op, x, w, b, which, r), ref = run(two_ops, x, w, b, which, r);
        check_same_bits(fused.y, ref.y);
        check_same_bits(fused.dx, ref.dx);
        check_same_bits(fused.dw, ref.dw);
        check_same_bits(fused.db, ref.db);
      }
}

TEST_CASE("linear_gelu reads strided x and weight as linear does") {
  Generator gen(3);
  Tensor xt = randn({9, 6}, gen), w = randn({8, 9}, gen), b = randn({8}, gen);
  Tensor x = transpose(xt, 0, 1);  // (6, 9), columns unit-stride
  check_same_bits(linear_gelu(x, w, b), gelu(linear(x, w, b)));
  Tensor wt = transpose(randn({9, 8}, gen), 0, 1);  // weight (8, 9) as a transposed view
  check_same_bits(linear_gelu(x, wt, b), gelu(linear(x, wt, b)));
  Tensor xs = slice(randn({6, 20}, gen), 1, 3, 12);  // (6, 9) with a row stride of 20
  check_same_bits(linear_gelu(xs, w, b), gelu(linear(xs, w, b)));
}

TEST_CASE("linear_gelu backward matches finite differences in f64") {
  Generator gen(5);
  CHECK(gradcheck([](const std::vector<Tensor>& t) { return linear_gelu(t[0], t[1], t[2]); },
                  {leaf({2, 3, 4}, gen), leaf({5, 4}, gen, 0.5), leaf({5}, gen)}));
  CHECK(gradcheck([](const std::vector<Tensor>& t) { return linear_gelu(t[0], t[1]); },
                  {leaf({3, 4}, gen), leaf({6, 4}, gen, 0.5)}));
}

TEST_CASE("linear_gelu without a gradient records nothing and keeps no pre-activation") {
  Generator gen(6);
  Tensor x = randn({4, 5}, gen), w = randn({3, 5}, gen), b = randn({3}, gen);
  w.set_requires_grad(true);
  {
    NoGradGuard no_grad;
    Tensor y = linear_gelu(x, w, b);
    CHECK_FALSE(y.requires_grad());
    CHECK(y.grad_fn() == nullptr);
  }
  Tensor y = linear_gelu(x, w, b);
  REQUIRE(y.grad_fn() != nullptr);
  CHECK(std::string(y.grad_fn()->name()) == "LinearGeluBackward");
}

TEST_CASE("linear_gelu rejects bad inputs with errors naming the op") {
  CHECK_THROWS_AS(linear_gelu(zeros({2, 3}), zeros({4, 5})), ShapeError);
  CHECK(message_has([] { linear_gelu(zeros({2, 3}), zeros({4, 5})); }, "linear_gelu"));
  CHECK_THROWS_AS(linear_gelu(zeros({2, 3}), zeros({4, 3}), zeros({5})), ShapeError);
  CHECK_THROWS_AS(linear_gelu(zeros({2, 3}), zeros({4, 3}, {DType::f64})), DTypeError);
  CHECK_THROWS_AS(linear_gelu(zeros({2, 3}), Tensor()), ValueError);
  CHECK_THROWS_AS(linear_gelu(zeros({2, 3}, {DType::f16}), zeros({4, 3}, {DType::f16})), DTypeError);
}
