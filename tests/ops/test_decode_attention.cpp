// decode_attention(): every query row equals the row attention() computes over the whole
// sequence, for full caches and rings, every window (larger than the text included), soft-capping,
// several queries at once; and bad input.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "core/autograd.h"
#include "core/factory.h"
#include "ops/attention.h"
#include "ops/decode_attention.h"
#include "ops/shape.h"

using namespace keel;

namespace {

// x (B, H, T, D) -> a cache (B, H, S, D) holding positions [end - S, end) ∩ [0, end) in slots
// j % S; every other slot NaN, so a kernel that reads a slot it should not fails.
Tensor cache_of(const Tensor& x, int64_t end, int64_t S) {
  const int64_t B = x.size(0), H = x.size(1), T = x.size(2), D = x.size(3);
  const std::vector<double> X = x.to_vector<double>();
  std::vector<double> c(B * H * S * D, std::numeric_limits<double>::quiet_NaN());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t j = std::max<int64_t>(0, end - S); j < end; ++j)
        for (int64_t d = 0; d < D; ++d) c[((b * H + h) * S + j % S) * D + d] = X[((b * H + h) * T + j) * D + d];
  return from_vector(c, {B, H, S, D}, {x.dtype()});
}

// Largest |a - b| / max(|b|, 1) over the rows [p, p + t) of full (B, H, T, D) against got (B, H, t, D).
double row_err(const Tensor& full, const Tensor& got, int64_t p) {
  const std::vector<double> want = narrow(full, 2, p, got.size(2)).contiguous().to_vector<double>();
  const std::vector<double> have = got.to_vector<double>();
  REQUIRE(want.size() == have.size());
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(have[i])) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, std::abs(have[i] - want[i]) / std::max(std::abs(want[i]), 1.0));
  }
  return worst;
}

struct Case {
  std::vector<int64_t> window;
  int64_t S;  // cache slots; 0 = the whole sequence
  double softcap;
};

}  // namespace

TEST_CASE("decode_attention gives attention's rows, from a full cache or a ring, one query or several") {
  NoGradGuard no_grad;
  const int64_t B = 2, H = 4, T = 13, D = 8;
  // Windows larger than the text (20 > 13) behave as full causal; a ring holds the widest window.
  const std::vector<Case> cases = {
      {{0, 1, 3, 20}, 0, 0},  {{0, 0, 0, 0}, 0, 2.0}, {{1, 3, 5, 5}, 5, 0},
      {{2, 2, 2, 2}, 2, 1.5}, {{20, 20, 20, 20}, 0, 0},
  };
  for (DType dt : {DType::f64, DType::f32}) {
    const double tol = dt == DType::f64 ? 1e-12 : 1e-5;
    Generator gen(7);
    Tensor q = randn({B, H, T, D}, gen, {dt}), k = randn({B, H, T, D}, gen, {dt}), v = randn({B, H, T, D}, gen, {dt});
    for (const Case& c : cases) {
      AttentionSpec spec{0, c.window, c.softcap};
      const Tensor full = attention(q, k, v, spec).out;  // (B, H, T, D)
      const int64_t S = c.S == 0 ? T : c.S;
      for (int64_t p = 0; p < T; ++p) {
        CAPTURE(p);
        CAPTURE(S);
        CAPTURE(c.softcap);
        Tensor out = decode_attention(narrow(q, 2, p, 1), cache_of(k, p + 1, S), cache_of(v, p + 1, S), spec, p);
        CHECK(out.shape() == Shape{B, H, 1, D});
        CHECK(row_err(full, out, p) < tol);
      }
      if (c.S == 0)  // several queries at once, when the cache holds them all
        for (int64_t p : {0, 4, 9}) {
          const int64_t t = 4;
          Tensor out = decode_attention(narrow(q, 2, p, t), cache_of(k, p + t, T), cache_of(v, p + t, T), spec, p);
          CHECK(row_err(full, out, p) < tol);
        }
    }
  }
}

TEST_CASE("decode_attention: a global cache may be longer than the text") {
  NoGradGuard no_grad;
  Generator gen(3);
  Tensor q = randn({1, 2, 6, 4}, gen), k = randn({1, 2, 6, 4}, gen), v = randn({1, 2, 6, 4}, gen);
  const AttentionSpec spec = AttentionSpec::mhsa(2);
  const Tensor full = attention(q, k, v, spec).out;
  // 64 slots, positions 0..5 written, the rest NaN: never read.
  Tensor out = decode_attention(narrow(q, 2, 5, 1), cache_of(k, 6, 64), cache_of(v, 6, 64), spec, 5);
  CHECK(row_err(full, out, 5) < 1e-5);
}

TEST_CASE("decode_attention: bad input") {
  Tensor q = zeros({1, 2, 1, 4}), k = zeros({1, 2, 3, 4}), v = zeros({1, 2, 3, 4});
  NoGradGuard no_grad;
  // Position 5 of a full head needs 6 slots; a window of 3 needs 3.
  CHECK_THROWS_AS(decode_attention(q, k, v, AttentionSpec::mhsa(2), 5), ShapeError);
  CHECK_NOTHROW(decode_attention(q, k, v, AttentionSpec::ls(2, 2, 3), 5));
  CHECK_THROWS_AS(decode_attention(q, k, v, AttentionSpec::ls(2, 2, 4), 5), ShapeError);
  CHECK_THROWS_AS(decode_attention(q, k, v, AttentionSpec::mhsa(3), 0), ShapeError);
  CHECK_THROWS_AS(decode_attention(q, k, v, AttentionSpec::mhsa(2), -1), ValueError);
  CHECK_THROWS_AS(decode_attention(zeros({2, 1, 4}), k, v, AttentionSpec::mhsa(2), 0), ShapeError);
  CHECK_THROWS_AS(decode_attention(q, zeros({1, 2, 3, 5}), zeros({1, 2, 3, 5}), AttentionSpec::mhsa(2), 0), ShapeError);
  CHECK_THROWS_AS(decode_attention(q, k, zeros({1, 2, 3, 4}, {DType::f64}), AttentionSpec::mhsa(2), 0), DTypeError);
  AttentionSpec negative{0, {0, -1}, 0};
  CHECK_THROWS_AS(decode_attention(q, k, v, negative, 0), ValueError);
}

TEST_CASE("decode_attention refuses inputs that require a gradient: it has no backward") {
  Tensor q = zeros({1, 1, 1, 4}).set_requires_grad(true), k = zeros({1, 1, 2, 4}), v = zeros({1, 1, 2, 4});
  CHECK_THROWS_AS(decode_attention(q, k, v, AttentionSpec::mhsa(1), 0), AutogradError);
}
