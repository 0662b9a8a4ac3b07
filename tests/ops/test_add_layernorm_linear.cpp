// add_layernorm_linear on the CPU: exactly add_layernorm (or layernorm) then linear (or
// linear_gelu), bit for bit, with the gradients of those ops; bad inputs named as its own.
#include <doctest/doctest.h>

#include <string>

#include "checks.h"
#include "core/autograd.h"
#include "core/factory.h"
#include "ops/add_layernorm.h"
#include "ops/add_layernorm_linear.h"
#include "ops/layernorm.h"
#include "ops/linear_gelu.h"
#include "ops/matmul.h"
#include "ops/reduce.h"

using namespace keel;
using keel::testing::bits;
using keel::testing::message_has;

TEST_CASE("add_layernorm_linear is add_layernorm then linear on the CPU, bit for bit") {
  Generator gen(31);
  const Tensor x = randn({3, 5, 8}, gen), y = randn({3, 5, 8}, gen), lw = randn({8}, gen), lb = randn({8}, gen);
  const Tensor w = randn({6, 8}, gen, {}, 0.0, 0.3), b = randn({6}, gen);
  for (bool gelu : {false, true}) {
    CAPTURE(gelu);
    const AddLayerNormLinear got = add_layernorm_linear(x, y, lw, lb, 1e-5, w, b, gelu);
    const AddLayerNorm n = add_layernorm(x, y, lw, lb, 1e-5);
    CHECK(bits(got.h) == bits(n.h));
    CHECK(bits(got.out) == bits(gelu ? linear_gelu(n.out, w, b) : linear(n.out, w, b)));
    // Without y: layernorm alone, and h is x.
    const AddLayerNormLinear plain = add_layernorm_linear(x, Tensor(), lw, Tensor(), 1e-5, w, Tensor(), gelu);
    CHECK(bits(plain.h) == bits(x));
    const Tensor ln = layernorm(x, lw, Tensor(), 1e-5);
    CHECK(bits(plain.out) == bits(gelu ? linear_gelu(ln, w) : linear(ln, w)));
  }
  // A gradient flows as through the composition.
  Tensor wl = w.detach().clone().set_requires_grad(true);
  sum(add_layernorm_linear(x, y, lw, lb, 1e-5, wl, b).out).backward();
  CHECK(wl.grad().defined());
}

TEST_CASE("add_layernorm_linear rejects bad inputs with errors naming the op") {
  const Tensor x = zeros({2, 4}), lw = ones({4}), w = zeros({3, 4});
  CHECK(message_has([&] { add_layernorm_linear(x, zeros({2, 5}), lw, Tensor(), 1e-5, w, Tensor()); },
                    "add_layernorm_linear"));
  CHECK_THROWS_AS(add_layernorm_linear(x, zeros({2, 5}), lw, Tensor(), 1e-5, w, Tensor()), ShapeError);
  CHECK_THROWS_AS(add_layernorm_linear(x, Tensor(), zeros({5}), Tensor(), 1e-5, w, Tensor()), ShapeError);
  CHECK_THROWS_AS(add_layernorm_linear(x, Tensor(), lw, Tensor(), 1e-5, zeros({3, 5}), Tensor()), ShapeError);
  CHECK_THROWS_AS(add_layernorm_linear(x, Tensor(), lw, Tensor(), 1e-5, w, zeros({4})), ShapeError);
  CHECK_THROWS_AS(add_layernorm_linear(x, Tensor(), lw, Tensor(), -1.0, w, Tensor()), ValueError);
}
