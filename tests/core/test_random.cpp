// Philox: known-answer test, reproducibility from a seed, distribution sanity.
#include <doctest/doctest.h>

#include <cmath>

#include "core/factory.h"
#include "core/random.h"

using namespace keel;

TEST_CASE("philox4x32-10 matches the Random123 known-answer vectors") {
  // From Random123's kat_vectors: philox4x32 10 rounds, counter 0, key 0.
  auto r = philox4x32(0, 0);
  CHECK(r[0] == 0x6627e8d5u);
  CHECK(r[1] == 0xe169c58du);
  CHECK(r[2] == 0xbc57ac4cu);
  CHECK(r[3] == 0x9b00dbd8u);
}

TEST_CASE("the same seed gives the same numbers, the offset advances") {
  Generator a(123), b(123), c(124);
  Tensor x = randn({64}, a), y = randn({64}, b), z = randn({64}, c);
  CHECK(x.to_vector<float>() == y.to_vector<float>());
  CHECK(x.to_vector<float>() != z.to_vector<float>());
  CHECK(a.offset() == 16);
  Tensor x2 = randn({64}, a);
  CHECK(x2.to_vector<float>() != x.to_vector<float>());
  Generator restored(0);
  restored.set_state(123, 16);
  CHECK(randn({64}, restored).to_vector<float>() == x2.to_vector<float>());
}

TEST_CASE("normal and uniform have the right moments") {
  Generator g(1);
  auto n = randn({100000}, g, {DType::f64}, 1.0, 2.0).to_vector<double>();
  double m = 0, v = 0;
  for (double x : n) m += x;
  m /= n.size();
  for (double x : n) v += (x - m) * (x - m);
  v /= n.size();
  CHECK(m == doctest::Approx(1.0).epsilon(0.02));
  CHECK(std::sqrt(v) == doctest::Approx(2.0).epsilon(0.02));
  auto u = rand({100000}, g, {DType::f32}, -1.0, 3.0).to_vector<float>();
  double mu = 0;
  for (float x : u) {
    CHECK((x >= -1.0f && x <= 3.0f));
    mu += x;
  }
  CHECK(mu / u.size() == doctest::Approx(1.0).epsilon(0.02));
}
