// decode_attention_cached(): one layer's decode step in one op. The new token's key and value
// land in their slots of the local ring or the global cache, and the output rows (B, 1, H, D)
// equal attention()'s over the whole text, for MHSA and LS-attention, B = 1 and 2, D = 32 and 64,
// at positions inside a ring's first lap, past it, and past one CUDA split of keys (256 keys);
// they are the very numbers decode_attention gives on each head group (the path it replaced); and
// bad input.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "core/autograd.h"
#include "core/factory.h"
#include "decode_cache.h"
#include "ops/attention.h"
#include "ops/decode_attention.h"
#include "ops/shape.h"

using namespace keel;
using keel::decodetest::cache_before;

namespace {

// Largest |got - want| / max(|want|, 1); infinity when got holds a non-finite value.
double max_err(const Tensor& got, const Tensor& want) {
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  REQUIRE(g.size() == w.size());
  double worst = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (!std::isfinite(g[i])) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, std::abs(g[i] - w[i]) / std::max(std::abs(w[i]), 1.0));
  }
  return worst;
}

// The same values, NaN where the other has NaN (unwritten slots); both undefined counts as same.
bool same(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined()) return a.defined() == b.defined();
  if (a.shape() != b.shape()) return false;
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i)
    if (!(x[i] == y[i] || (std::isnan(x[i]) && std::isnan(y[i])))) return false;
  return true;
}

Tensor token(const Tensor& x, int64_t p) { return narrow(x, 2, p, 1).contiguous(); }  // (B, H, 1, D)

}  // namespace

TEST_CASE("decode_attention_cached gives attention()'s rows and writes the new key and value into its slots") {
  NoGradGuard no_grad;
  const int64_t H = 6, T = 701, S = 760;  // S: a global cache with room to grow, its later slots NaN
  const AttentionSpec specs[] = {AttentionSpec::mhsa(H), AttentionSpec::ls(H, 5, 50)};
  for (DType dt : {DType::f64, DType::f32}) {
    const double tol = dt == DType::f64 ? 1e-12 : 1e-5;
    for (int64_t B : {1, 2})
      for (int64_t D : {32, 64}) {
        Generator gen(static_cast<uint64_t>(10 * B + D));
        const Tensor q = randn({B, H, T, D}, gen, {dt}), k = randn({B, H, T, D}, gen, {dt}),
                     v = randn({B, H, T, D}, gen, {dt});
        for (const AttentionSpec& spec : specs) {
          const Tensor full = attention(q, k, v, spec).out;  // (B, H, T, D)
          for (int64_t p : {30, 100, 700}) {  // in the ring's first lap; past it; past 256 keys
            CAPTURE(dtype_name(dt));
            CAPTURE(B);
            CAPTURE(D);
            CAPTURE(spec.local_heads());
            CAPTURE(p);
            const DecodeCache c = cache_before(k, v, spec, p, S);
            const Tensor out = decode_attention_cached(token(q, p), token(k, p), token(v, p), c, spec, p);
            CHECK(out.shape() == Shape{B, 1, H, D});
            CHECK(max_err(out, transpose(narrow(full, 2, p, 1), 1, 2)) < tol);
            // Written in place: the cache now is that of the text one token longer.
            const DecodeCache after = cache_before(k, v, spec, p + 1, S);
            CHECK(same(c.k_local, after.k_local));
            CHECK(same(c.v_local, after.v_local));
            CHECK(same(c.k_global, after.k_global));
            CHECK(same(c.v_global, after.v_global));
          }
        }
      }
  }
}

TEST_CASE("decode_attention_cached gives decode_attention's numbers on each head group, bit for bit") {
  NoGradGuard no_grad;
  const int64_t B = 2, H = 6, T = 301, D = 32, S = 400;
  Generator gen(4);
  const Tensor q = randn({B, H, T, D}, gen), k = randn({B, H, T, D}, gen), v = randn({B, H, T, D}, gen);
  for (const AttentionSpec& spec : {AttentionSpec::mhsa(H), AttentionSpec::ls(H, 5, 50), AttentionSpec::ls(H, 3, 7)})
    for (int64_t p : {5, 120, 300}) {
      CAPTURE(spec.local_heads());
      CAPTURE(p);
      // The replaced path: the caller writes the token's slots, then one decode_attention per group.
      const DecodeCache written = cache_before(k, v, spec, p + 1, S);
      const int64_t Hl = spec.local_heads(), Hg = H - Hl;
      std::vector<Tensor> groups;
      const Tensor qp = token(q, p);
      if (Hl > 0)
        groups.push_back(
            decode_attention(narrow(qp, 1, 0, Hl), written.k_local, written.v_local, spec.head_range(0, Hl), p));
      if (Hg > 0)
        groups.push_back(
            decode_attention(narrow(qp, 1, Hl, Hg), written.k_global, written.v_global, spec.head_range(Hl, Hg), p));
      const Tensor before = transpose(concat(groups, 1), 1, 2).contiguous();  // (B, 1, H, D)
      const Tensor now = decode_attention_cached(qp, token(k, p), token(v, p), cache_before(k, v, spec, p, S), spec, p);
      CHECK(now.to_vector<float>() == before.to_vector<float>());
    }
}

TEST_CASE("decode_attention_cached: bad input") {
  NoGradGuard no_grad;
  const Tensor q = zeros({1, 2, 1, 4}), k = zeros({1, 2, 1, 4}), v = zeros({1, 2, 1, 4});
  // Head 0 local in a ring of 3 slots, head 1 global in 8.
  auto cache = [] {
    return DecodeCache{zeros({1, 1, 3, 4}), zeros({1, 1, 3, 4}), zeros({1, 1, 8, 4}), zeros({1, 1, 8, 4})};
  };
  const AttentionSpec ls = AttentionSpec::ls(2, 1, 3);
  CHECK_NOTHROW(decode_attention_cached(q, k, v, cache(), ls, 7));
  CHECK_THROWS_AS(decode_attention_cached(q, k, v, cache(), ls, 8), ShapeError);  // 9 keys in 8 global slots
  CHECK_THROWS_AS(decode_attention_cached(q, k, v, cache(), AttentionSpec::ls(2, 1, 4), 7), ShapeError);  // ring < w
  CHECK_THROWS_AS(decode_attention_cached(q, k, v, cache(), AttentionSpec::mhsa(3), 0), ShapeError);
  CHECK_THROWS_AS(decode_attention_cached(q, k, v, cache(), ls, -1), ValueError);
  const Tensor two = zeros({1, 2, 2, 4});  // t = 2: one token at a time
  CHECK_THROWS_AS(decode_attention_cached(two, two, two, cache(), ls, 7), ShapeError);
  CHECK_THROWS_AS(decode_attention_cached(q, zeros({1, 2, 1, 5}), v, cache(), ls, 7), ShapeError);
  DecodeCache c = cache();
  c.k_global = zeros({1, 2, 8, 4}), c.v_global = zeros({1, 2, 8, 4});  // 3 heads for q's 2
  CHECK_THROWS_AS(decode_attention_cached(q, k, v, c, ls, 7), ShapeError);
  c = cache();
  c.v_global = zeros({1, 1, 9, 4});  // k and v disagree
  CHECK_THROWS_AS(decode_attention_cached(q, k, v, c, ls, 7), ShapeError);
  c = cache();
  c.k_global = narrow(zeros({1, 1, 8, 8}), 3, 0, 4);  // (1, 1, 8, 4) but not contiguous: cannot be written
  CHECK_THROWS_AS(decode_attention_cached(q, k, v, c, ls, 7), ShapeError);
  c = cache();
  c.v_local = Tensor();
  CHECK_THROWS(decode_attention_cached(q, k, v, c, ls, 7));
  c = cache();
  c.k_global = zeros({1, 1, 8, 4}, {DType::f64});
  CHECK_THROWS_AS(decode_attention_cached(q, k, v, c, ls, 7), DTypeError);
  // All heads global, no ring: MHSA's cache.
  CHECK_NOTHROW(decode_attention_cached(q, k, v, DecodeCache{{}, {}, zeros({1, 2, 8, 4}), zeros({1, 2, 8, 4})},
                                        AttentionSpec::mhsa(2), 7));
}

TEST_CASE("decode_attention_cached refuses inputs that require a gradient: it has no backward") {
  const Tensor q = zeros({1, 1, 1, 4}).set_requires_grad(true), k = zeros({1, 1, 1, 4}), v = zeros({1, 1, 1, 4});
  const DecodeCache c{{}, {}, zeros({1, 1, 2, 4}), zeros({1, 1, 2, 4})};
  CHECK_THROWS_AS(decode_attention_cached(q, k, v, c, AttentionSpec::mhsa(1), 1), AutogradError);
}
