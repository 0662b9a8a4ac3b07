// Global-norm clipping: the norm, the scaling, and what happens with inf/NaN.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "core/factory.h"
#include "optim/clip.h"

using namespace keel;
using namespace keel::optim;

namespace {
Tensor param_with_grad(const std::vector<double>& g, const Shape& s, DType dt = DType::f32) {
  Tensor p = zeros(s, {dt});
  p.set_grad(from_vector<double>(g, s, {dt}));
  return p;
}
}  // namespace

TEST_CASE("clip_grad_norm returns the global norm and scales only above max_norm") {
  Tensor a = param_with_grad({3, 4}, {2}), b = param_with_grad({12, 0, 0, 0}, {2, 2}), none = zeros({3});
  std::vector<Tensor> ps{a, b, none};  // `none` has no gradient: skipped
  CHECK(grad_norm(ps) == doctest::Approx(13.0).epsilon(1e-15));
  double n = clip_grad_norm(ps, 20.0);
  CHECK(n == doctest::Approx(13.0).epsilon(1e-15));
  CHECK(a.grad().to_vector<float>() == std::vector<float>{3, 4});  // below max_norm: untouched

  n = clip_grad_norm(ps, 1.0);
  CHECK(n == doctest::Approx(13.0).epsilon(1e-15));  // the norm before clipping
  float k = float(1.0 / (13.0 + 1e-6));
  CHECK(a.grad().to_vector<float>() == std::vector<float>{3 * k, 4 * k});
  CHECK(b.grad().to_vector<float>()[0] == 12 * k);
  CHECK(grad_norm(ps) == doctest::Approx(1.0).epsilon(1e-6));
}

TEST_CASE("clip_grad_norm on f64 and bf16 gradients, large tensors (chunked f64 sum)") {
  std::vector<double> big(300000, 0.5);  // several 64K chunks
  Tensor p = param_with_grad(big, {300000}, DType::f64);
  CHECK(clip_grad_norm({p}, 1e9) == doctest::Approx(std::sqrt(300000 * 0.25)).epsilon(1e-14));
  Tensor h = param_with_grad({1.5, -2.0}, {2}, DType::bf16);
  CHECK(clip_grad_norm({h}, 0.5) == doctest::Approx(2.5).epsilon(1e-15));
  CHECK(h.grad().to_vector<double>()[1] == doctest::Approx(-0.4).epsilon(1e-2));  // bf16 rounding
}

TEST_CASE("clip_grad_norm reports non-finite gradients and leaves them unscaled") {
  const double inf = std::numeric_limits<double>::infinity();
  Tensor a = param_with_grad({100, 1}, {2}), b = param_with_grad({inf, 0}, {2});
  CHECK(std::isinf(clip_grad_norm({a, b}, 1.0)));
  CHECK(a.grad().to_vector<float>() == std::vector<float>{100, 1});
  Tensor c = param_with_grad({std::nan(""), 0}, {2});
  CHECK(std::isnan(clip_grad_norm({a, c}, 1.0)));
  CHECK(a.grad().to_vector<float>() == std::vector<float>{100, 1});
}

TEST_CASE("clip_grad_norm rejects a non-positive max_norm") {
  Tensor a = param_with_grad({1}, {1});
  CHECK_THROWS_AS((void)clip_grad_norm({a}, 0.0), ValueError);
  CHECK_THROWS_AS((void)clip_grad_norm({a}, -1.0), ValueError);
  CHECK_THROWS_AS((void)clip_grad_norm({a}, std::nan("")), ValueError);
}
