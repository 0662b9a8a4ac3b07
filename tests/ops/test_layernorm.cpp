// layernorm: forward against a naive per-row reference, backward against finite differences.
#include <doctest/doctest.h>

#include <cmath>

#include "gradcheck.h"
#include "ops/layernorm.h"

using namespace keel;
using keel::testing::gradcheck;
using keel::testing::leaf;

namespace {
// x (N, C) as values, weight (C), bias (C) or empty -> (N, C), in double.
std::vector<double> naive_layernorm(const Tensor& x, const Tensor& w, const Tensor& b, double eps) {
  std::vector<double> xv = x.to_vector<double>(), wv = w.to_vector<double>();
  std::vector<double> bv = b.defined() ? b.to_vector<double>() : std::vector<double>(wv.size(), 0.0);
  int64_t C = x.size(-1), N = x.numel() / C;
  std::vector<double> y(xv.size());
  for (int64_t r = 0; r < N; ++r) {
    double m = 0, v = 0;
    for (int64_t c = 0; c < C; ++c) m += xv[r * C + c] / C;
    for (int64_t c = 0; c < C; ++c) v += (xv[r * C + c] - m) * (xv[r * C + c] - m) / C;
    for (int64_t c = 0; c < C; ++c) y[r * C + c] = (xv[r * C + c] - m) / std::sqrt(v + eps) * wv[c] + bv[c];
  }
  return y;
}
}  // namespace

TEST_CASE("layernorm forward matches a naive reference") {
  Generator gen(1);
  for (Shape s : {Shape{3, 5}, Shape{2, 3, 7}, Shape{4, 1}, Shape{6}}) {
    CAPTURE(shape_str(s));
    int64_t C = s.back();
    Tensor x = randn(s, gen, {DType::f64}, 0.5, 2.0);
    Tensor w = randn({C}, gen, {DType::f64}), b = randn({C}, gen, {DType::f64});
    for (bool with_bias : {true, false}) {
      Tensor bias = with_bias ? b : Tensor();
      std::vector<double> ref = naive_layernorm(x, w, bias, 1e-5);
      Tensor y = layernorm(x, w, bias);
      CHECK(y.shape() == s);
      std::vector<double> got = y.to_vector<double>();
      for (size_t i = 0; i < ref.size(); ++i) CHECK(got[i] == doctest::Approx(ref[i]).epsilon(1e-12));
    }
  }
  // A hand-computed row: x = [1, 2, 3], mean 2, var 2/3, weight 1, bias 0, eps 0.
  std::vector<double> y = layernorm(from_vector<double>({1, 2, 3}, {1, 3}, {DType::f64}),
                                    ones({3}, {DType::f64}), Tensor(), 0.0)
                              .to_vector<double>();
  CHECK(y[0] == doctest::Approx(-std::sqrt(1.5)));
  CHECK(y[1] == doctest::Approx(0.0));
  CHECK(y[2] == doctest::Approx(std::sqrt(1.5)));
}

TEST_CASE("layernorm f32 agrees with f64, large mean included") {
  Generator gen(2);
  // 64 x 768 passes the threading threshold; a mean of 100 tests the two-pass variance.
  Tensor x = randn({64, 768}, gen, {DType::f64}, 100.0, 1.0);
  Tensor w = randn({768}, gen, {DType::f64}), b = randn({768}, gen, {DType::f64});
  std::vector<double> ref = layernorm(x, w, b).to_vector<double>();
  std::vector<double> got = layernorm(x.to(DType::f32), w.to(DType::f32), b.to(DType::f32)).to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, std::abs(got[i] - ref[i]));
  CHECK(worst < 1e-4);  // f32 x near 100 carries ~4e-6 absolute error, amplified by rstd ~1 and |w| ~3
}

TEST_CASE("layernorm of a non-contiguous input") {
  Generator gen(3);
  Tensor store = randn({5, 4}, gen, {DType::f64});
  Tensor xt = store.as_strided({4, 5}, {1, 4}, 0);  // the transpose: rows of 5 at stride 4
  Tensor w = randn({5}, gen, {DType::f64});
  std::vector<double> ref = naive_layernorm(xt.contiguous(), w, Tensor(), 1e-5);
  std::vector<double> got = layernorm(xt, w, Tensor()).to_vector<double>();
  for (size_t i = 0; i < ref.size(); ++i) CHECK(got[i] == doctest::Approx(ref[i]).epsilon(1e-12));
}

TEST_CASE("layernorm backward matches finite differences") {
  // Tolerances: atol 1e-7, rtol 1e-5 (the defaults). The function is smooth in x, weight and
  // bias; eps = 1e-3 keeps rstd bounded so the numeric derivative is well conditioned.
  Generator gen(4);
  auto with_bias = [](const std::vector<Tensor>& in) { return layernorm(in[0], in[1], in[2], 1e-3); };
  auto no_bias = [](const std::vector<Tensor>& in) { return layernorm(in[0], in[1], Tensor(), 1e-3); };
  for (Shape s : {Shape{3, 5}, Shape{2, 3, 4}, Shape{1, 7}, Shape{5, 1}}) {
    CAPTURE(shape_str(s));
    int64_t C = s.back();
    CHECK(gradcheck(with_bias, {leaf(s, gen), leaf({C}, gen), leaf({C}, gen)}));
    CHECK(gradcheck(no_bias, {leaf(s, gen), leaf({C}, gen)}));
  }
  // Frozen parameters: only x needs a gradient; and only the parameters.
  CHECK(gradcheck(with_bias, {leaf({3, 6}, gen), randn({6}, gen, {DType::f64}), randn({6}, gen, {DType::f64})}));
  CHECK(gradcheck(with_bias, {randn({3, 6}, gen, {DType::f64}), leaf({6}, gen), leaf({6}, gen)}));
  // Many rows: the threaded path with per-thread partial sums of dweight and dbias.
  Tensor x = leaf({300, 128}, gen), w = leaf({128}, gen), b = leaf({128}, gen);
  layernorm(x, w, b).backward(ones({300, 128}, {DType::f64}));
  std::vector<double> db = b.grad().to_vector<double>();
  for (double v : db) CHECK(v == doctest::Approx(300.0));
  // With dy = 1, dweight is the column sum of the normalised x.
  std::vector<double> xhat = naive_layernorm(x, ones({128}, {DType::f64}), Tensor(), 1e-5);
  std::vector<double> dw = w.grad().to_vector<double>();
  for (int64_t c = 0; c < 128; ++c) {
    double s = 0;
    for (int64_t r = 0; r < 300; ++r) s += xhat[r * 128 + c];
    CHECK(dw[c] == doctest::Approx(s).epsilon(1e-10).scale(1.0));
  }
}

TEST_CASE("layernorm rejects bad inputs") {
  Tensor x = zeros({2, 4}), w = zeros({4}), b = zeros({4});
  CHECK_THROWS_AS(layernorm(x, zeros({3}), b), ShapeError);
  CHECK_THROWS_AS(layernorm(x, w, zeros({5})), ShapeError);
  CHECK_THROWS_AS(layernorm(x, w.to(DType::f64), b), DTypeError);
  CHECK_THROWS_AS(layernorm(x.to(DType::i32), w.to(DType::i32), b.to(DType::i32)), DTypeError);
  CHECK_THROWS_AS(layernorm(x.to(DType::bf16), w.to(DType::bf16), b.to(DType::bf16)), DTypeError);
  CHECK_THROWS_AS(layernorm(x, empty({0}, {DType::f32, Device::cuda(0)}), b), DeviceError);
  CHECK_THROWS_AS(layernorm(x, w, b, -1.0), ValueError);
  try {
    layernorm(x, zeros({3}), b);
  } catch (const ShapeError& e) {
    std::string m = e.what();
    CHECK(m.find("layernorm") != std::string::npos);
    CHECK(m.find("[2, 4]") != std::string::npos);
    CHECK(m.find("[3]") != std::string::npos);
  }
}
