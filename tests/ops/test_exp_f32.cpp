// ops/cpu/exp_f32.h: the CPU's f32 exp of the softmax-shaped kernels, against double exp.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "ops/cpu/exp_f32.h"

using keel::cpu::exp_f32;
using keel::cpu::exp_shifted;

namespace {
// |got - exp(x)| in units in the last place of exp(x) as a float.
double ulp_error(float got, float x) {
  const double ref = std::exp(static_cast<double>(x));
  const double ulp = std::ldexp(1.0, std::ilogb(static_cast<float>(ref)) - 23);
  return std::fabs(static_cast<double>(got) - ref) / ulp;
}
}  // namespace

TEST_CASE("exp_f32 is within 1.1 ulp of exp over the normal range, every 97th float from 88 to -87.3") {
  double worst = 0;
  float at = 0;
  for (const float sign : {1.0f, -1.0f}) {
    const float end = sign > 0 ? 88.0f : 87.3f;
    for (uint32_t bits = 0;; bits += 97) {
      float a;
      std::memcpy(&a, &bits, sizeof a);
      if (a > end) break;
      const float x = sign * a, e = ulp_error(exp_f32(x), x);
      if (e > worst) worst = e, at = x;
    }
  }
  CAPTURE(at);
  CHECK(worst < 1.1);
  CHECK(worst > 0.5);  // the measure does see an approximation's error
}

TEST_CASE("exp_f32 at the edges: 1 at 0, 0 from -88 down, NaN for NaN, tiny and not negative between") {
  CHECK(exp_f32(0.0f) == 1.0f);
  CHECK(exp_f32(-0.0f) == 1.0f);
  CHECK(exp_f32(-88.0f) == 0.0f);
  CHECK(exp_f32(-1000.0f) == 0.0f);
  CHECK(exp_f32(-std::numeric_limits<float>::infinity()) == 0.0f);
  CHECK(std::isnan(exp_f32(std::numeric_limits<float>::quiet_NaN())));
  for (float x = -87.4f; x > -88.0f; x -= 0.01f) {
    CAPTURE(x);
    CHECK(exp_f32(x) >= 0.0f);
    CHECK(exp_f32(x) < 1.2e-38f);
  }
  CHECK(exp_f32(88.0f) == doctest::Approx(std::exp(88.0)).epsilon(1e-6));
}

TEST_CASE("exp_shifted gives exp_f32's bits element by element, at every length and offset") {
  // The vector loop and its scalar remainder must agree with the scalar function: a softmax row's
  // sum must not depend on where its elements fall.
  std::vector<float> x(203);
  for (size_t i = 0; i < x.size(); ++i) x[i] = -static_cast<float>(i) * 0.37f + std::sin(static_cast<float>(i));
  for (int64_t start : {0, 1, 3, 7}) {
    for (int64_t n : {0, 1, 5, 8, 9, 17, 64, 195}) {
      std::vector<float> out(static_cast<size_t>(n), -1.0f);
      exp_shifted(x.data() + start, n, 1.5f, out.data());
      for (int64_t i = 0; i < n; ++i) {
        CAPTURE(start);
        CAPTURE(i);
        const float want = exp_f32(x[static_cast<size_t>(start + i)] - 1.5f);
        CHECK(std::memcmp(&out[static_cast<size_t>(i)], &want, sizeof want) == 0);
      }
    }
  }
}
