// mlp on the CPU: exactly linear(linear_gelu(...)), forward and all five gradients, bit for bit
// (the reference the GPU's fused backward is held to; CPU training must not move by a bit); the
// backward against finite differences in f64; bad inputs named as mlp's.
#include <doctest/doctest.h>

#include <array>
#include <functional>
#include <string>
#include <vector>

#include "checks.h"
#include "core/autograd.h"
#include "core/factory.h"
#include "gradcheck.h"
#include "ops/linear_gelu.h"
#include "ops/matmul.h"
#include "ops/mlp.h"
#include "ops/shape.h"

using namespace keel;
using keel::testing::bits;
using keel::testing::gradcheck;
using keel::testing::leaf;
using keel::testing::message_has;

namespace {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// inputs {x, fc_w, fc_b, proj_w, proj_b} (biases may be undefined), which of them require a
// gradient, r (..., D) -> {f(inputs), the gradients of sum(f * r)} from fresh leaves.
std::vector<Tensor> run(const Fn& f, const std::vector<Tensor>& in, const std::array<bool, 5>& which, const Tensor& r) {
  std::vector<Tensor> leaves;
  bool any = false;
  for (size_t i = 0; i < in.size(); ++i) {
    Tensor t = in[i].defined() ? in[i].detach().contiguous() : Tensor();
    if (t.defined() && which[i]) t.set_requires_grad(true), any = true;
    leaves.push_back(t);
  }
  std::vector<Tensor> out = {f(leaves)};
  if (any) out[0].backward(r);
  for (size_t i = 0; i < leaves.size(); ++i)
    out.push_back(leaves[i].defined() && which[i] ? leaves[i].grad() : Tensor());
  return out;
}

Tensor one_op(const std::vector<Tensor>& t) { return mlp(t[0], t[1], t[2], t[3], t[4]); }
Tensor two_ops(const std::vector<Tensor>& t) { return linear(linear_gelu(t[0], t[1], t[2]), t[3], t[4]); }

}  // namespace

TEST_CASE("mlp is linear(linear_gelu(...)) bit for bit, forward and every gradient, on the CPU") {
  struct Case {
    Shape x;
    int64_t H, D;
    bool bias;
  };
  // Odd sizes, 1-D and 3-D x, D != C, and a GPT-2 MLP's shape (C 64 -> 4C 256 -> C).
  const Case cases[] = {{{5, 7}, 9, 7, true}, {{7}, 3, 4, true}, {{3, 5, 7}, 13, 6, false}, {{2, 32, 64}, 256, 64, true}};
  // All, c_fc's only, c_proj's only, x alone, the biases alone.
  const std::array<bool, 5> whichs[] = {{true, true, true, true, true},   {true, true, true, false, false},
                                        {false, false, false, true, true}, {true, false, false, false, false},
                                        {false, false, true, false, true}};
  for (DType dt : {DType::f32, DType::f64})
    for (const Case& c : cases)
      for (const auto& which : whichs) {
        CAPTURE(std::string(dtype_name(dt)));
        CAPTURE(shape_str(c.x));
        CAPTURE(c.H);
        CAPTURE(c.bias);
        CAPTURE(std::vector<bool>(which.begin(), which.end()));
        Generator gen(23);
        const int64_t C = c.x.back();
        const std::vector<Tensor> in = {randn(c.x, gen, {dt}), randn({c.H, C}, gen, {dt}, 0.0, 0.3),
                                        c.bias ? randn({c.H}, gen, {dt}) : Tensor(),
                                        randn({c.D, c.H}, gen, {dt}, 0.0, 0.3),
                                        c.bias ? randn({c.D}, gen, {dt}) : Tensor()};
        Shape ys = c.x;
        ys.back() = c.D;
        const Tensor r = randn(ys, gen, {dt});
        const std::vector<Tensor> got = run(one_op, in, which, r), want = run(two_ops, in, which, r);
        for (size_t i = 0; i < got.size(); ++i) {
          CAPTURE(i);
          REQUIRE(got[i].defined() == want[i].defined());
          if (!got[i].defined()) continue;
          CHECK(got[i].shape() == want[i].shape());
          CHECK(bits(got[i]) == bits(want[i]));
        }
      }
}

TEST_CASE("mlp backward matches finite differences in f64") {
  Generator gen(7);
  CHECK(gradcheck(one_op, {leaf({2, 3, 4}, gen), leaf({6, 4}, gen, 0.5), leaf({6}, gen), leaf({5, 6}, gen, 0.5),
                           leaf({5}, gen)}));
}

TEST_CASE("mlp without a gradient records nothing") {
  Generator gen(8);
  Tensor x = randn({4, 5}, gen), w1 = randn({8, 5}, gen), b1 = randn({8}, gen), w2 = randn({5, 8}, gen);
  w2.set_requires_grad(true);
  {
    NoGradGuard no_grad;
    Tensor y = mlp(x, w1, b1, w2, Tensor());
    CHECK(y.grad_fn() == nullptr);
  }
  Tensor y = mlp(x, w1, b1, w2, Tensor());
  REQUIRE(y.grad_fn() != nullptr);
  CHECK(std::string(y.grad_fn()->name()) == "MLPBackward");
}

TEST_CASE("mlp rejects bad inputs with errors naming the op and the operand") {
  const Tensor x = zeros({2, 3}), w1 = zeros({4, 3}), b1 = zeros({4}), w2 = zeros({3, 4}), b2 = zeros({3});
  CHECK(message_has([&] { mlp(x, zeros({4, 5}), b1, w2, b2); }, "mlp"));
  CHECK_THROWS_AS(mlp(x, zeros({4, 5}), b1, w2, b2), ShapeError);
  CHECK_THROWS_AS(mlp(x, w1, zeros({5}), w2, b2), ShapeError);
  CHECK_THROWS_AS(mlp(x, w1, b1, zeros({3, 5}), b2), ShapeError);  // reads 5 hidden units of 4
  CHECK(message_has([&] { mlp(x, w1, b1, zeros({3, 5}), b2); }, "proj_weight"));
  CHECK_THROWS_AS(mlp(x, w1, b1, zeros({3, 4, 1}), b2), ShapeError);
  CHECK_THROWS_AS(mlp(x, w1, b1, w2, zeros({4})), ShapeError);
  CHECK_THROWS_AS(mlp(x, w1, b1, zeros({3, 4}, {DType::f64}), b2), DTypeError);
  CHECK_THROWS_AS(mlp(x, w1, b1, Tensor(), b2), ValueError);
}
