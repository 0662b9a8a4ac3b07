// core/philox.h first, then the other headers that use KEEL_HD (core/host_device.h): a file
// compiles whatever order it includes them in. Its sibling test_include_order_philox_between.cpp
// puts philox.h after a KEEL_HD header and before another, the order a private, #undef'd
// KEEL_HD in philox.h broke. Header-only, so test_core needs no ops or optim library.
#include "core/philox.h"
#include "ops/attention_band.h"
#include "optim/adamw_math.h"

#include <doctest/doctest.h>

TEST_CASE("philox.h, then attention_band.h and adamw_math.h: all three usable") {
  const float u = keel::philox::uniform(1, 0, 0);
  CHECK(u > 0.0f);
  CHECK(u <= 1.0f);
  CHECK(keel::band_start<int64_t>(10, 4) == 7);
  float w = 1.0f, m = 0.0f, v = 0.0f;
  keel::optim::adamw_update(0.5f, w, m, v, keel::optim::AdamWCoeffs<float>(keel::optim::AdamWScalars{}));
  CHECK(w == 1.0f);  // step_size 0 and decay 1: the weight stays, the moments move
  CHECK(m > 0.0f);
}
