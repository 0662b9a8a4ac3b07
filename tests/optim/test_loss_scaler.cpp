// Dynamic loss scaling: unscale, backoff on overflow, growth after a run of good steps.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "core/factory.h"
#include "ops/arith.h"
#include "ops/cross_entropy.h"
#include "optim/loss_scaler.h"

using namespace keel;
using namespace keel::optim;

namespace {
Tensor param_with_grad(const std::vector<double>& g, DType dt) {
  Shape s{int64_t(g.size())};
  Tensor p = zeros(s, {dt});
  p.set_grad(from_vector<double>(g, s, {dt}));
  return p;
}
}  // namespace

TEST_CASE("LossScaler unscales f16 gradients and reports finiteness") {
  LossScaler sc(DType::f16);
  REQUIRE(sc.enabled());
  CHECK(sc.scale() == 65536.0);
  Tensor a = param_with_grad({65536.0 * 0.5, -65536.0 * 0.25}, DType::f32);
  Tensor h = param_with_grad({32768.0, 1024.0}, DType::f16), none = zeros({2});
  CHECK(sc.unscale_({a, h, none}));
  CHECK(a.grad().to_vector<float>() == std::vector<float>{0.5f, -0.25f});
  CHECK(h.grad().to_vector<float>() == std::vector<float>{0.5f, 1.0f / 64});
  Tensor bad = param_with_grad({1.0, std::numeric_limits<double>::infinity()}, DType::f16);
  CHECK_FALSE(sc.unscale_({a, bad}));
  Tensor nan = param_with_grad({std::nan(""), 1.0}, DType::f32);
  CHECK_FALSE(sc.unscale_({nan}));
}

TEST_CASE("LossScaler backs off on inf, counts skips, grows after growth_interval good steps") {
  LossScaler sc(DType::f16, {.init_scale = 1024.0, .growth_interval = 3, .min_scale = 256.0});
  sc.update(true);
  CHECK(sc.scale() == 512.0);
  CHECK(sc.skipped_steps() == 1);
  sc.update(false);
  sc.update(false);
  CHECK(sc.scale() == 512.0);
  CHECK(sc.growth_tracker() == 2);
  sc.update(true);  // an overflow resets the run of good steps
  CHECK(sc.scale() == 256.0);
  CHECK(sc.growth_tracker() == 0);
  sc.update(true);  // floored at min_scale
  CHECK(sc.scale() == 256.0);
  CHECK(sc.skipped_steps() == 3);
  for (int i = 0; i < 3; ++i) sc.update(false);
  CHECK(sc.scale() == 512.0);
  CHECK(sc.growth_tracker() == 0);

  // state round trip
  LossScaler other(DType::f16);
  other.load_state(sc.state());
  CHECK(other.scale() == 512.0);
  CHECK(other.skipped_steps() == 3);
  sc.update(false);
  other.update(false);
  CHECK(other.growth_tracker() == sc.growth_tracker());
}

TEST_CASE("LossScaler is a no-op for bf16 and f32") {
  for (DType dt : {DType::bf16, DType::f32}) {
    LossScaler sc(dt);
    CHECK_FALSE(sc.enabled());
    CHECK(sc.scale() == 1.0);
    Tensor a = param_with_grad({2.0, std::numeric_limits<double>::infinity()}, dt);
    CHECK(sc.unscale_({a}));
    CHECK(a.grad().to_vector<double>()[0] == 2.0);
    sc.update(true);
    CHECK(sc.scale() == 1.0);
    CHECK(sc.skipped_steps() == 0);
  }
}

TEST_CASE("LossScaler::loss_grad is the gradient scale_loss(loss, factor).backward() gives the loss") {
  // What the trainer promises cross_entropy (its fused gradient is used when this holds).
  for (DType dt : {DType::f16, DType::bf16, DType::f32})
    for (double factor : {1.0, 0.25, 1.0 / 3.0}) {
      CAPTURE(factor);
      LossScaler sc(dt);
      Tensor loss = full({}, 2.5, {DType::f32}).set_requires_grad(true);
      sc.scale_loss(loss, factor).backward();
      REQUIRE(sc.loss_grad(factor).has_value());
      CHECK(static_cast<float>(*sc.loss_grad(factor)) == static_cast<float>(loss.grad().item()));
      CHECK(*sc.loss_grad(factor) == sc.scale() * factor);
    }
}

TEST_CASE("LossScaler rejects bad options and bad state") {
  CHECK_THROWS_AS(LossScaler(DType::f16, {.init_scale = 0}), ConfigError);
  CHECK_THROWS_AS(LossScaler(DType::f16, {.growth_factor = 1.0}), ConfigError);
  CHECK_THROWS_AS(LossScaler(DType::f16, {.backoff_factor = 1.5}), ConfigError);
  CHECK_THROWS_AS(LossScaler(DType::f16, {.growth_interval = 0}), ConfigError);
  CHECK_THROWS_AS(LossScaler(DType::f16, {.init_scale = 0.5}), ConfigError);  // below min_scale 1
  LossScaler sc(DType::f16);
  NamedTensors st = sc.state();
  NamedTensors missing(st.begin() + 1, st.end());
  CHECK_THROWS_AS(sc.load_state(missing), ConfigError);
  NamedTensors wrong = st;
  wrong[0].second = zeros({2}, {DType::f64});
  CHECK_THROWS_AS(sc.load_state(wrong), ShapeError);
  wrong[0].second = from_vector<double>({-4.0}, {});
  CHECK_THROWS_AS(sc.load_state(wrong), ValueError);
}

TEST_CASE("f16 loss scaling happens in f32: the first step of an f16 model is not skipped") {
  // A loss of ~3.6 times 2^16 is ~2.4e5, far above f16's 65504: formed in f16 it is inf and
  // every gradient NaN, so each run's first step was skipped by construction.
  LossScaler sc(DType::f16);
  Tensor x16 = from_vector<float>({9.5f}, {}).to(DType::f16);
  Tensor scaled16 = sc.scale_loss(x16);
  CHECK(scaled16.dtype() == DType::f32);
  CHECK(scaled16.item() == 9.5 * 65536.0);
  CHECK(sc.scale_loss(from_vector<float>({2.0f}, {}), 0.125).item() == 2.0 * 65536.0 * 0.125);  // 1/accum
  CHECK_THROWS_AS(sc.scale_loss(zeros({2})), ShapeError);

  // The whole chain on the CPU: f16 logits -> cross_entropy (an f32 loss) -> scaled by 2^16 ->
  // backward -> f16 logit gradients that are finite, unscale to the true gradient, and the
  // step is taken (update(false) keeps the scale).
  Generator gen(3);
  Tensor logits = randn({8, 50}, gen, {DType::f32}, 0.0, 1.0).to(DType::f16).set_requires_grad(true);
  Tensor targets = from_vector<int64_t>({1, 7, 3, 49, 0, 22, 5, 8}, {8});
  Tensor loss = cross_entropy(logits, targets);
  REQUIRE(loss.dtype() == DType::f32);
  sc.scale_loss(loss, 0.5).backward();  // as the trainer does with grad-accum 2
  REQUIRE(logits.grad().dtype() == DType::f16);
  const bool finite = sc.unscale_(std::vector<Tensor>{logits});
  CHECK(finite);
  // Against the unscaled f32 gradient of the same rounded logits: f16 rounding of g * 2^15.
  Tensor ref = logits.detach().to(DType::f32).set_requires_grad(true);
  mul(cross_entropy(ref, targets), 0.5).backward();
  std::vector<float> got = logits.grad().to_vector<float>(), want = ref.grad().to_vector<float>();
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-3).scale(1e-4));
  sc.update(!finite);
  CHECK(sc.skipped_steps() == 0);
  CHECK(sc.scale() == 65536.0);
}
