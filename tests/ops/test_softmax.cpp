// softmax and log_softmax along any dim: forward against a naive reference, backward against
// finite differences.
#include <doctest/doctest.h>

#include <cmath>

#include "core/cuda/runtime.h"
#include "gradcheck.h"
#include "ops/softmax.h"

using namespace keel;
using keel::testing::gradcheck;
using keel::testing::leaf;

namespace {
// x contiguous values of `shape`, softmax along dim -> values, in double (max-subtracted too).
std::vector<double> naive_softmax(const Tensor& x, int64_t dim, bool log) {
  std::vector<double> v = x.to_vector<double>(), y(v.size());
  const Shape& s = x.shape();
  int64_t n = s[dim], inner = 1;
  for (size_t d = dim + 1; d < s.size(); ++d) inner *= s[d];
  int64_t outer = x.numel() / (n * inner);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t j) { return (o * n + j) * inner + i; };
      double m = -INFINITY, z = 0;
      for (int64_t j = 0; j < n; ++j) m = std::max(m, v[at(j)]);
      for (int64_t j = 0; j < n; ++j) z += std::exp(v[at(j)] - m);
      for (int64_t j = 0; j < n; ++j) y[at(j)] = log ? v[at(j)] - m - std::log(z) : std::exp(v[at(j)] - m) / z;
    }
  return y;
}
}  // namespace

TEST_CASE("softmax and log_softmax forward match a naive reference along every dim") {
  Generator gen(1);
  Tensor x = randn({2, 3, 5}, gen, {DType::f64}, 0.0, 3.0);
  for (int64_t dim : {0, 1, 2, -1, -3}) {
    CAPTURE(dim);
    int64_t d = dim < 0 ? dim + 3 : dim;
    for (bool log : {false, true}) {
      std::vector<double> ref = naive_softmax(x, d, log);
      std::vector<double> got = (log ? log_softmax(x, dim) : softmax(x, dim)).to_vector<double>();
      for (size_t i = 0; i < ref.size(); ++i) CHECK(got[i] == doctest::Approx(ref[i]).epsilon(1e-14));
    }
  }
  // Hand-computed: softmax([0, ln 3]) = [1/4, 3/4].
  std::vector<double> p = softmax(from_vector<double>({0.0, std::log(3.0)}, {2}, {DType::f64})).to_vector<double>();
  CHECK(p[0] == doctest::Approx(0.25));
  CHECK(p[1] == doctest::Approx(0.75));
}

TEST_CASE("softmax is stable for large logits and f32 agrees with f64") {
  std::vector<float> big = softmax(from_vector<float>({1000.0f, 1001.0f, -1000.0f}, {3})).to_vector<float>();
  CHECK(big[0] == doctest::Approx(1.0 / (1.0 + std::exp(1.0))));
  CHECK(big[2] == 0.0f);
  std::vector<float> lbig = log_softmax(from_vector<float>({1000.0f, 1000.0f}, {2})).to_vector<float>();
  CHECK(lbig[0] == doctest::Approx(-std::log(2.0)));

  Generator gen(2);
  Tensor x = randn({16, 9, 300}, gen, {DType::f64}, 0.0, 4.0);  // threaded, dims 1 and 2
  for (int64_t dim : {1, 2}) {
    for (bool log : {false, true}) {
      std::vector<double> ref = (log ? log_softmax(x, dim) : softmax(x, dim)).to_vector<double>();
      Tensor xf = x.to(DType::f32);
      std::vector<double> got = (log ? log_softmax(xf, dim) : softmax(xf, dim)).to_vector<double>();
      double worst = 0;
      for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, std::abs(got[i] - ref[i]));
      CHECK(worst < 1e-5);  // logits up to ~20 in f32: a few ulps of 20 in the log domain
    }
  }
}

TEST_CASE("softmax of a non-contiguous view") {
  Generator gen(3);
  Tensor store = randn({4, 3}, gen, {DType::f64});
  Tensor t = store.as_strided({3, 4}, {1, 3}, 0);  // the transpose
  std::vector<double> ref = naive_softmax(t.contiguous(), 1, false);
  std::vector<double> got = softmax(t, 1).to_vector<double>();
  for (size_t i = 0; i < ref.size(); ++i) CHECK(got[i] == doctest::Approx(ref[i]).epsilon(1e-14));
}

TEST_CASE("softmax and log_softmax backward match finite differences") {
  // Tolerances: the gradcheck defaults (atol 1e-7, rtol 1e-5); both functions are smooth.
  Generator gen(4);
  for (Shape s : {Shape{7}, Shape{2, 3, 5}, Shape{4, 1}}) {
    for (int64_t dim = 0; dim < static_cast<int64_t>(s.size()); ++dim) {
      CAPTURE(shape_str(s));
      CAPTURE(dim);
      CHECK(gradcheck([dim](const std::vector<Tensor>& in) { return softmax(in[0], dim); }, {leaf(s, gen, 2.0)}));
      CHECK(gradcheck([dim](const std::vector<Tensor>& in) { return log_softmax(in[0], dim); }, {leaf(s, gen, 2.0)}));
    }
  }
}

TEST_CASE("softmax rejects bad inputs") {
  CHECK_THROWS_AS(softmax(zeros({2, 3}), 2), IndexError);
  CHECK_THROWS_AS(log_softmax(zeros({2, 3}), -3), IndexError);
  CHECK_THROWS_AS(softmax(zeros({2, 3}, {DType::i64})), DTypeError);
  CHECK_THROWS_AS(softmax(zeros({2, 3}, {DType::f16})), DTypeError);
  CHECK_THROWS_AS(softmax(zeros({})), ShapeError);
  // A build without a usable GPU names the missing device (with one, or on the emulated
  // device, an empty input is simply an empty output).
  if (!cuda::is_available()) CHECK_THROWS_AS(softmax(empty({0}, {DType::f32, Device::cuda(0)})), DeviceError);
  try {
    log_softmax(zeros({2, 3}, {DType::i32}));
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("log_softmax") != std::string::npos);
  }
}
