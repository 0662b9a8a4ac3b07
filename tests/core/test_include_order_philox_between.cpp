// core/philox.h between two headers that use KEEL_HD (core/host_device.h): the order that broke
// when philox.h defined its own KEEL_HD and #undef'd it at its end, taking away the macro
// host_device.h's include guard would not bring back for optim/adamw_math.h. See also
// test_include_order_philox_first.cpp.
#include "ops/attention_band.h"
#include "core/philox.h"
#include "optim/adamw_math.h"

#include <doctest/doctest.h>

TEST_CASE("attention_band.h, philox.h, then adamw_math.h: all three usable") {
  CHECK(keel::band_start<int>(2, 0) == 0);
  CHECK(keel::philox::to_unit(0) > 0.0f);
  float w = 2.0f, m = 0.0f, v = 0.0f;
  keel::optim::AdamWScalars s;
  s.decay = 0.5;
  keel::optim::adamw_update(0.0f, w, m, v, keel::optim::AdamWCoeffs<float>(s));
  CHECK(w == 1.0f);  // decay only: a zero gradient moves nothing else
}
