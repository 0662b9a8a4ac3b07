// Elementwise arithmetic: broadcasting forward, gradients summed over broadcast dims.
#include <doctest/doctest.h>

#include <cmath>

#include "gradcheck.h"
#include "ops/arith.h"

using namespace keel;
using keel::testing::gradcheck;
using keel::testing::leaf;

TEST_CASE("add/sub/mul/div broadcast over leading dims, size-1 dims and scalars") {
  Tensor a = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor row = from_vector<float>({10, 20, 30}, {3});
  Tensor col = from_vector<float>({100, 200}, {2, 1});
  CHECK((a + row).to_vector<float>() == std::vector<float>{11, 22, 33, 14, 25, 36});
  CHECK((a - col).to_vector<float>() == std::vector<float>{-99, -98, -97, -196, -195, -194});
  CHECK((a * row).shape() == Shape{2, 3});
  CHECK((a * row).to_vector<float>() == std::vector<float>{10, 40, 90, 40, 100, 180});
  CHECK((row / a).to_vector<float>()[5] == doctest::Approx(5.0f));
  CHECK((a * 2.0).to_vector<float>() == std::vector<float>{2, 4, 6, 8, 10, 12});
  CHECK((a - 1.0).to_vector<float>()[0] == 0.0f);
  CHECK((-a).to_vector<float>()[1] == -2.0f);
  CHECK((col + row).shape() == Shape{2, 3});  // both stretched
  Tensor s = scalar(5.0);
  CHECK((a + s).to_vector<float>()[0] == 6.0f);  // a 0-d tensor broadcasts everywhere
}

TEST_CASE("elementwise ops read non-contiguous inputs") {
  Tensor a = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor t = a.as_strided({3, 2}, {1, 3}, 0);
  Tensor r = t + from_vector<float>({1, 1}, {2});
  CHECK(r.to_vector<float>() == std::vector<float>{2, 5, 3, 6, 4, 7});
}

TEST_CASE("unary math against std") {
  std::vector<float> v{-1.5f, -0.1f, 0.3f, 2.0f};
  Tensor x = from_vector(v, {4});
  auto e = exp(x).to_vector<float>(), t = tanh(x).to_vector<float>(), r = relu(x).to_vector<float>();
  auto sq = square(x).to_vector<float>();
  for (int i = 0; i < 4; ++i) {
    CHECK(e[i] == doctest::Approx(std::exp(v[i])));
    CHECK(t[i] == doctest::Approx(std::tanh(v[i])));
    CHECK(r[i] == (v[i] > 0 ? v[i] : 0.0f));
    CHECK(sq[i] == doctest::Approx(v[i] * v[i]));
  }
  CHECK(log(from_vector<float>({1.0f, std::exp(2.0f)}, {2})).to_vector<float>()[1] == doctest::Approx(2.0f));
}

TEST_CASE("arith gradients match finite differences, broadcasting included") {
  // Tolerances: f64 central differences with eps 1e-6 are good to ~1e-9 here.
  Generator gen(7);
  Tensor a = leaf({2, 3, 4}, gen), b = leaf({3, 1}, gen), c = leaf({4}, gen);
  CHECK(gradcheck([](const std::vector<Tensor>& x) { return add(x[0], x[1]); }, {a, b}));
  CHECK(gradcheck([](const std::vector<Tensor>& x) { return sub(x[0], x[1]); }, {a, c}));
  CHECK(gradcheck([](const std::vector<Tensor>& x) { return mul(x[0], x[1]); }, {a, b}));
  Tensor pos = randn({3, 1}, gen, {DType::f64}, 3.0, 0.5);  // keep the divisor away from 0
  pos.set_requires_grad(true);
  CHECK(gradcheck([](const std::vector<Tensor>& x) { return div(x[0], x[1]); }, {a, pos}));
}

TEST_CASE("unary gradients match finite differences") {
  Generator gen(8);
  Tensor x = leaf({3, 5}, gen);
  Tensor p = randn({3, 5}, gen, {DType::f64}, 2.0, 0.3);
  p.set_requires_grad(true);
  CHECK(gradcheck([](const std::vector<Tensor>& v) { return exp(v[0]); }, {x}));
  CHECK(gradcheck([](const std::vector<Tensor>& v) { return tanh(v[0]); }, {x}));
  CHECK(gradcheck([](const std::vector<Tensor>& v) { return relu(v[0]); }, {x}));
  CHECK(gradcheck([](const std::vector<Tensor>& v) { return square(v[0]); }, {x}));
  CHECK(gradcheck([](const std::vector<Tensor>& v) { return log(v[0]); }, {p}));
  CHECK(gradcheck([](const std::vector<Tensor>& v) { return neg(mul(add(v[0], 3.0), 0.5)); }, {x}));
}

TEST_CASE("arith rejects bad input with typed errors naming the op") {
  Tensor a = zeros({2, 3}), b = zeros({4});
  try {
    (void)add(a, b);
    FAIL("no error");
  } catch (const ShapeError& e) {
    CHECK(std::string(e.what()).find("add") != std::string::npos);
    CHECK(std::string(e.what()).find("[2, 3]") != std::string::npos);
  }
  CHECK_THROWS_AS(mul(a, zeros({2, 3}, {DType::f64})), DTypeError);
  CHECK_THROWS_AS(add(zeros({2}, {DType::i64}), zeros({2}, {DType::i64})), DTypeError);
  CHECK_THROWS_AS(sub(zeros({0}), empty({0}, {DType::f32, Device::cuda(0)})), DeviceError);
  CHECK_THROWS_AS(div(a, Tensor()), ValueError);
}
