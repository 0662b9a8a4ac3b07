// gelu (tanh form): forward against hand-computed values, backward against finite differences.
#include <doctest/doctest.h>

#include <cmath>

#include "core/cuda/runtime.h"
#include "gradcheck.h"
#include "ops/gelu.h"

using namespace keel;
using keel::testing::gradcheck;
using keel::testing::leaf;

TEST_CASE("gelu forward matches the tanh formula") {
  // Reference values from Python: 0.5*x*(1+tanh(sqrt(2/pi)*(x+0.044715*x**3))).
  std::vector<double> x = {0.0, 1.0, -1.0, 2.5, -3.0, 0.5};
  std::vector<double> ref = {0.0, 0.8411919906082768, -0.15880800939172324, 2.484915733910001,
                             -0.0036373920817729943, 0.34571400982514394};
  std::vector<double> y = gelu(from_vector(x, {2, 3}, {DType::f64})).to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i) CHECK(y[i] == doctest::Approx(ref[i]).epsilon(1e-15));
  // f32 against the f64 result: one rounding per step, so a few ulps.
  std::vector<float> yf = gelu(from_vector(x, {6})).to_vector<float>();
  for (size_t i = 0; i < x.size(); ++i) CHECK(yf[i] == doctest::Approx(ref[i]).epsilon(1e-6));
  // Large inputs saturate to x and 0 without NaN.
  std::vector<double> big = gelu(from_vector<double>({40.0, -40.0}, {2}, {DType::f64})).to_vector<double>();
  CHECK(big[0] == 40.0);
  CHECK(big[1] == doctest::Approx(0.0));
}

TEST_CASE("gelu on a larger f32 tensor matches f64 (threaded path)") {
  Generator gen(1);
  Tensor x = randn({64, 1031}, gen, {DType::f64}, 0.0, 3.0);  // past the threading threshold
  std::vector<double> ref = gelu(x).to_vector<double>();
  std::vector<double> got = gelu(x.to(DType::f32)).to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, std::abs(got[i] - ref[i]));
  CHECK(worst < 1e-5);  // |x| up to ~15: f32 rounding of x alone is ~1e-6
}

TEST_CASE("gelu of a non-contiguous view reads it in logical order") {
  Tensor a = from_vector<double>({1.0, 2.5, -1.0, -3.0}, {2, 2}, {DType::f64});
  Tensor t = a.as_strided({2, 2}, {1, 2}, 0);  // the transpose: 1, -1, 2.5, -3
  std::vector<double> y = gelu(t).to_vector<double>();
  CHECK(y[1] == doctest::Approx(-0.15880800939172324));
  CHECK(y[2] == doctest::Approx(2.484915733910001));
  CHECK(gelu(t).shape() == Shape{2, 2});
}

TEST_CASE("gelu backward matches finite differences") {
  // Tolerances: the gradcheck defaults (atol 1e-7, rtol 1e-5); gelu is smooth, so central
  // differences with eps 1e-6 are accurate to ~1e-10.
  Generator gen(2);
  auto f = [](const std::vector<Tensor>& in) { return gelu(in[0]); };
  for (Shape s : {Shape{7}, Shape{2, 3, 5}, Shape{1}}) CHECK(gradcheck(f, {leaf(s, gen, 2.0)}));
}

TEST_CASE("gelu rejects bad inputs") {
  CHECK_THROWS_AS(gelu(zeros({3}, {DType::i64})), DTypeError);
  CHECK_THROWS_AS(gelu(zeros({3}, {DType::bf16})), DTypeError);  // no half compute on the CPU
  CHECK_THROWS_AS(gelu(Tensor()), ValueError);
  try {
    gelu(zeros({3}, {DType::i32}));
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("gelu") != std::string::npos);
  }
  // A build without a usable GPU names the missing device (with one, or on the emulated
  // device, an empty input is simply an empty output).
  if (!cuda::is_available()) CHECK_THROWS_AS(gelu(empty({0}, {DType::f32, Device::cuda(0)})), DeviceError);
}
