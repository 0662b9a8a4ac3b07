// Reductions: sum, mean, max, argmax.
#include <doctest/doctest.h>

#include "gradcheck.h"
#include "ops/reduce.h"
#include "ops/shape.h"

using namespace keel;
using keel::testing::gradcheck;
using keel::testing::leaf;

TEST_CASE("sum/mean/max over a dim and over everything") {
  Tensor a = from_vector<float>({1, 5, 3, 4, 2, 6}, {2, 3});
  CHECK(sum(a).item() == 21.0);
  CHECK(mean(a).item() == 3.5);
  CHECK(sum(a, 0).to_vector<float>() == std::vector<float>{5, 7, 9});
  CHECK(sum(a, -1).to_vector<float>() == std::vector<float>{9, 12});
  CHECK(sum(a, 1, true).shape() == Shape{2, 1});
  CHECK(mean(a, 1).to_vector<float>() == std::vector<float>{3, 4});
  CHECK(max(a, 1).to_vector<float>() == std::vector<float>{5, 6});
  CHECK(max(a, 0).to_vector<float>() == std::vector<float>{4, 5, 6});
  CHECK(argmax(a, 1).to_vector<int64_t>() == std::vector<int64_t>{1, 2});
  CHECK(sum(transpose(a, 0, 1), 1).to_vector<float>() == std::vector<float>{5, 7, 9});  // strided input
}

TEST_CASE("reduction gradients match finite differences") {
  Generator gen(11);
  Tensor x = leaf({3, 4, 5}, gen);
  for (int64_t d = 0; d < 3; ++d) {
    CHECK(gradcheck([d](const std::vector<Tensor>& v) { return sum(v[0], d); }, {x}));
    CHECK(gradcheck([d](const std::vector<Tensor>& v) { return mean(v[0], d, true); }, {x}));
    CHECK(gradcheck([d](const std::vector<Tensor>& v) { return max(v[0], d); }, {x}));
  }
  CHECK(gradcheck([](const std::vector<Tensor>& v) { return sum(v[0]); }, {x}));
  CHECK(gradcheck([](const std::vector<Tensor>& v) { return mean(v[0]); }, {x}));
}

TEST_CASE("max sends the gradient to the first maximum only") {
  Tensor x = from_vector<double>({1, 3, 3, 2}, {4}, {DType::f64, Device::cpu(), true});
  max(x, 0).backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 1, 0, 0});
}

TEST_CASE("reductions reject bad input") {
  CHECK_THROWS_AS(sum(zeros({2, 3}), 2), IndexError);
  CHECK_THROWS_AS(max(zeros({2, 0}), 1), ShapeError);
  CHECK_THROWS_AS(sum(zeros({2}, {DType::i32})), DTypeError);
}
