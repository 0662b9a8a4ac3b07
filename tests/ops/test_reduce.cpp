// Reductions: sum, mean, max, argmax.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "gradcheck.h"
#include "max_nan_rows.h"
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

TEST_CASE("max and argmax follow PyTorch on NaN: the first NaN wins, else the first maximum") {
  using namespace keel::testing;
  struct Layout {
    int64_t outer, n, inner;
  };
  // Reduced over dim 1: contiguous rows (inner 1), columns (inner > 1), a few long slices.
  const Layout layouts[] = {{kNanRowKinds, 8, 1}, {1, 50, kNanRowKinds}, {3, 20, 5}, {2, 1000, kNanRowKinds}};
  for (DType dt : {DType::f32, DType::f64})
    for (const Layout& l : layouts)
      for (bool keep : {false, true}) {
        CAPTURE(std::string(dtype_name(dt)));
        CAPTURE(l.outer);
        CAPTURE(l.n);
        CAPTURE(l.inner);
        Tensor x = nan_rows_tensor(l.outer, l.n, l.inner, 40).to(dt);
        const MaxRef ref = max_reference(x);
        check_max_equals(max(x, 1, keep), argmax(x, 1, keep), ref);
        // The same slices through a strided view: x^T (inner, n, outer) reduced over dim 1
        // gives (inner, outer), the reference transposed.
        Tensor xt = transpose(x, 0, 2);
        check_max_equals(transpose(max(xt, 1), 0, 1).contiguous(), transpose(argmax(xt, 1), 0, 1).contiguous(), ref);
      }
  // The gradient goes where argmax points: the first NaN.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor x = from_vector<double>({1, nan, 3, nan}, {4}, {DType::f64, Device::cpu(), true});
  Tensor m = max(x, 0);
  CHECK(std::isnan(m.item()));
  m.backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 1, 0, 0});
}

TEST_CASE("reductions reject bad input") {
  CHECK_THROWS_AS(sum(zeros({2, 3}), 2), IndexError);
  CHECK_THROWS_AS(max(zeros({2, 0}), 1), ShapeError);
  CHECK_THROWS_AS(sum(zeros({2}, {DType::i32})), DTypeError);
}
