// What the fused classifier's tests share (test_cross_entropy.cpp on the CPU,
// test_cross_entropy_cuda.cpp on the GPU): cross_entropy with expected_grad must give the very bits
// it gives without, whether the promised gradient comes or not.
#pragma once

#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <vector>

#include "core/factory.h"
#include "core/random.h"
#include "ops/arith.h"
#include "ops/cross_entropy.h"

namespace keel::cross_entropy_test {

// On `dev` in dtype `dt`: 37 rows of 1024 columns of which 1001 are classes (a padded
// vocabulary), two rows ignored. For each gradient g the loss gets and each promise p (none, g,
// or a wrong one): the loss and the logits' gradient equal the unpromised ones bit for bit. Then
// the promise is seen to be used: logits overwritten between forward and backward change the
// gradient only when the promise was wrong (the backward then recomputes from the logits). z: the
// z-loss coefficient of every call (the fused pass writes its gradient too).
inline void check_fused(Device dev, DType dt, double z = 0) {
  CAPTURE(std::string(dtype_name(dt)));
  CAPTURE(z);
  Generator gen(5);
  const Tensor base = randn({37, 1024}, gen, {DType::f32}, 0.0, 2.0).to(dt).to(dev);
  std::vector<int64_t> t(37);
  for (size_t i = 0; i < t.size(); ++i) t[i] = int64_t((i * 53 + 7) % 1001);
  t[3] = t[20] = kIgnoreIndex;
  const Tensor targets = from_vector(t, {37}).to(dev);

  // loss gradient g, promise p, and whether to overwrite the logits after the forward -> loss, dlogits
  auto run = [&](double g, std::optional<double> p, bool overwrite) {
    Tensor logits = base.clone().set_requires_grad(true);
    Tensor loss = cross_entropy(logits, targets, kIgnoreIndex, 1001, p, z);
    if (overwrite) {
      Tensor raw = logits.detach();
      fill_(raw, 0.0);
    }
    mul(loss, g).backward();
    return std::pair{loss.to(Device::cpu()).to_vector<double>(), logits.grad().to(Device::cpu()).to_vector<double>()};
  };
  for (double g : {1.0, 0.25, 3.0}) {
    CAPTURE(g);
    const auto plain = run(g, std::nullopt, false);
    for (double p : {g, 0.5}) {
      CAPTURE(p);
      const auto fused = run(g, p, false);
      CHECK(fused.first == plain.first);
      CHECK(fused.second == plain.second);
    }
    // Kept promise: the gradient is the forward's, from the logits as they were.
    CHECK(run(g, g, true).second == plain.second);
    // Broken promise: recomputed from the overwritten logits.
    CHECK(run(g, 0.5, true).second == run(g, std::nullopt, true).second);
    CHECK(run(g, 0.5, true).second != plain.second);
  }
  // No gradient wanted: the promise changes nothing and nothing is written.
  CHECK(cross_entropy(base, targets, kIgnoreIndex, 1001, 1.0, z).item() ==
        cross_entropy(base, targets, kIgnoreIndex, 1001, std::nullopt, z).item());
}

}  // namespace keel::cross_entropy_test
