// The warmup + cosine schedule at the steps where its pieces meet.
#include <doctest/doctest.h>

#include <cmath>
#include <numbers>

#include "core/error.h"
#include "optim/schedule.h"

using namespace keel;
using namespace keel::optim;

TEST_CASE("cosine schedule with the paper's settings at known steps") {
  CosineSchedule s;  // lr 6e-4, min 6e-5, warmup 2000, max 50000
  CHECK(s.lr_at(0) == doctest::Approx(6e-4 / 2000).epsilon(1e-12));
  CHECK(s.lr_at(999) == doctest::Approx(3e-4).epsilon(1e-12));
  CHECK(s.lr_at(1999) == doctest::Approx(6e-4).epsilon(1e-12));  // warmup ends at the peak
  CHECK(s.lr_at(2000) == doctest::Approx(6e-4).epsilon(1e-12));  // cosine starts at the peak
  CHECK(s.lr_at(26000) == doctest::Approx((6e-4 + 6e-5) / 2).epsilon(1e-12));  // half way
  double quarter = 6e-5 + 0.5 * (1 + std::cos(std::numbers::pi * 0.25)) * (6e-4 - 6e-5);
  CHECK(s.lr_at(14000) == doctest::Approx(quarter).epsilon(1e-12));
  CHECK(s.lr_at(49999) == doctest::Approx(6e-5).epsilon(1e-6));
  CHECK(s.lr_at(50000) == 6e-5);
  CHECK(s.lr_at(123456) == 6e-5);
  for (int64_t t = 2000; t < 50000; t += 997) CHECK(s.lr_at(t + 1) <= s.lr_at(t));  // never rises after warmup
  for (int64_t t = 0; t < 1999; t += 101) CHECK(s.lr_at(t + 1) > s.lr_at(t));
}

TEST_CASE("cosine schedule edge cases: no warmup, warmup == max_steps") {
  CosineSchedule none{.lr = 1.0, .min_lr = 0.0, .warmup = 0, .max_steps = 10};
  CHECK(none.lr_at(0) == 1.0);
  CHECK(none.lr_at(5) == doctest::Approx(0.5));
  CHECK(none.lr_at(10) == 0.0);
  CosineSchedule flat{.lr = 1.0, .min_lr = 0.1, .warmup = 4, .max_steps = 4};
  CHECK(flat.lr_at(3) == 1.0);
  CHECK(flat.lr_at(4) == 0.1);
}

TEST_CASE("cosine schedule rejects bad settings") {
  CHECK_THROWS_AS((CosineSchedule{.lr = -1.0}.lr_at(0)), ConfigError);
  CHECK_THROWS_AS((CosineSchedule{.lr = 1e-4, .min_lr = 1e-3}.validate()), ConfigError);
  CHECK_THROWS_AS((CosineSchedule{.warmup = -1}.validate()), ConfigError);
  CHECK_THROWS_AS((CosineSchedule{.warmup = 100, .max_steps = 50}.validate()), ConfigError);
  CHECK_THROWS_AS((void)CosineSchedule{}.lr_at(-1), ValueError);
}
