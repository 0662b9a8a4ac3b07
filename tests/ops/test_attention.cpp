// attention(): forward against a naive masked-softmax reference, the max-logit and row-range statistics,
// backward against finite differences, f32 against f64, and bad input.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>

#include "gradcheck.h"
#include "ops/attention.h"

using namespace keel;
using keel::testing::gradcheck;
using keel::testing::leaf;

namespace {

// Written independently of the kernel: the full T x T logits, an explicit mask, a full softmax.
bool allowed(int64_t i, int64_t j, int64_t w) { return j <= i && (w == 0 || j > i - w); }

struct Reference {
  std::vector<double> out;        // (B, H, T, D)
  std::vector<double> max_logit;  // (H)
  std::vector<double> max_range;  // (H) max over rows of (max - min allowed logit)
};

Reference naive_attention(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<int64_t>& window,
                          double scale, double softcap = 0) {
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3);
  const std::vector<double> Q = q.to_vector<double>(), K = k.to_vector<double>(), V = v.to_vector<double>();
  auto at = [&](int64_t b, int64_t h, int64_t t, int64_t d) { return ((b * H + h) * T + t) * D + d; };
  Reference r{std::vector<double>(B * H * T * D, 0.0), std::vector<double>(H, 0.0), std::vector<double>(H, 0.0)};
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i) {
        std::vector<double> s(T);
        double m = -std::numeric_limits<double>::infinity(), lo = std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < T; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += Q[at(b, h, i, d)] * K[at(b, h, j, d)];
          double logit = softcap > 0 ? softcap * std::tanh(scale * dot / softcap) : scale * dot;
          s[j] = allowed(i, j, window[h]) ? logit : -std::numeric_limits<double>::infinity();
          if (allowed(i, j, window[h])) {
            r.max_logit[h] = std::max(r.max_logit[h], std::abs(s[j]));
            lo = std::min(lo, s[j]);
          }
          m = std::max(m, s[j]);
        }
        r.max_range[h] = std::max(r.max_range[h], m - lo);
        double l = 0;
        for (int64_t j = 0; j < T; ++j) l += std::exp(s[j] - m);
        for (int64_t j = 0; j < T; ++j)
          for (int64_t d = 0; d < D; ++d) r.out[at(b, h, i, d)] += std::exp(s[j] - m) / l * V[at(b, h, j, d)];
      }
  return r;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

double rel_err(const std::vector<double>& a, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - ref[i]) * (a[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / den);
}

std::vector<double> as_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// Random q, k, v of one shape and the check of attention() against the naive reference in f64.
void check_against_naive(int64_t B, int64_t T, int64_t D, const AttentionSpec& spec, uint64_t seed) {
  const int64_t H = static_cast<int64_t>(spec.window.size());
  Generator gen(seed);
  Tensor q = randn({B, H, T, D}, gen, {DType::f64}), k = randn({B, H, T, D}, gen, {DType::f64}),
         v = randn({B, H, T, D}, gen, {DType::f64});
  AttentionResult r = attention(q, k, v, spec);
  const double scale = spec.scale == 0 ? 1 / std::sqrt(static_cast<double>(D)) : spec.scale;
  Reference ref = naive_attention(q, k, v, spec.window, scale);
  CHECK(r.out.shape() == Shape{B, H, T, D});
  CHECK(r.out.dtype() == DType::f64);
  CHECK(max_abs_diff(r.out.to_vector<double>(), ref.out) < 1e-12);
  CHECK(r.max_logit.shape() == Shape{H});
  CHECK(r.max_logit.dtype() == DType::f32);
  CHECK(max_abs_diff(as_double(r.max_logit.to_vector<float>()), ref.max_logit) <
        1e-6 * (1 + *std::max_element(ref.max_logit.begin(), ref.max_logit.end())));
  CHECK(r.max_range.shape() == Shape{H});
  CHECK(r.max_range.dtype() == DType::f32);
  CHECK(max_abs_diff(as_double(r.max_range.to_vector<float>()), ref.max_range) <
        1e-6 * (1 + *std::max_element(ref.max_range.begin(), ref.max_range.end())));
}

template <typename E>
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  FAIL("expected an exception");
  return {};
}

}  // namespace

TEST_CASE("attention spec helpers: MHSA is all global, LS puts its local heads first") {
  CHECK(AttentionSpec::mhsa(3).window == std::vector<int64_t>{0, 0, 0});
  CHECK(AttentionSpec::mhsa(3).scale == 0);
  CHECK(AttentionSpec::ls(6, 5, 50).window == std::vector<int64_t>{50, 50, 50, 50, 50, 0});
  CHECK(AttentionSpec::ls(2, 0, 4).window == std::vector<int64_t>{0, 0});
  CHECK_THROWS_AS(AttentionSpec::ls(2, 3, 4), ValueError);
  CHECK_THROWS_AS(AttentionSpec::ls(2, 1, 0), ValueError);
}

TEST_CASE("attention forward matches the naive reference") {
  SUBCASE("MHSA") { check_against_naive(2, 6, 4, AttentionSpec::mhsa(3), 1); }
  SUBCASE("LS pattern, odd sizes") { check_against_naive(2, 7, 5, {0, {2, 2, 3, 0}}, 2); }
  SUBCASE("LS pattern, longer sequence") { check_against_naive(1, 40, 8, AttentionSpec::ls(4, 3, 5), 3); }
  SUBCASE("several row blocks, windows wider and narrower than a block") {
    check_against_naive(1, 80, 4, {0, {0, 37, 5, 1}}, 13);
  }
  SUBCASE("T = 1") { check_against_naive(2, 1, 3, {0, {0, 1, 4}}, 4); }
  SUBCASE("custom scale") { check_against_naive(2, 5, 3, {0.37, {0, 2}}, 5); }
  SUBCASE("negative scale") { check_against_naive(1, 5, 3, {-1.5, {0, 3}}, 6); }
}

TEST_CASE("attention scale 0 means 1/sqrt(D)") {
  Generator gen(7);
  Tensor q = randn({1, 2, 5, 4}, gen, {DType::f64}), k = randn({1, 2, 5, 4}, gen, {DType::f64}),
         v = randn({1, 2, 5, 4}, gen, {DType::f64});
  AttentionResult a = attention(q, k, v, {0.0, {0, 2}});
  AttentionResult b = attention(q, k, v, {0.5, {0, 2}});
  CHECK(a.out.to_vector<double>() == b.out.to_vector<double>());
  CHECK(a.max_logit.to_vector<float>() == b.max_logit.to_vector<float>());
  CHECK(a.max_range.to_vector<float>() == b.max_range.to_vector<float>());
}

TEST_CASE("attention with window 1 returns v exactly, and a window >= T is full causal") {
  Generator gen(8);
  Tensor q = randn({2, 3, 6, 4}, gen), k = randn({2, 3, 6, 4}, gen), v = randn({2, 3, 6, 4}, gen);
  CHECK(attention(q, k, v, {0, {1, 1, 1}}).out.to_vector<float>() == v.to_vector<float>());
  std::vector<double> full = attention(q.to(DType::f64), k.to(DType::f64), v.to(DType::f64), AttentionSpec::mhsa(3))
                                 .out.to_vector<double>();
  std::vector<double> wide =
      attention(q.to(DType::f64), k.to(DType::f64), v.to(DType::f64), {0, {6, 7, 1000}}).out.to_vector<double>();
  CHECK(max_abs_diff(full, wide) < 1e-14);
}

TEST_CASE("attention max_logit counts allowed pairs only, over every batch") {
  // B = 2, H = 2, T = 5, D = 1, scale 1, so each logit is q_i * k_j. The largest |logit| of each
  // head sits at a masked pair: outside head 0's window (2, 1) = -50, in head 1's future (i, 4) = 100.
  std::vector<double> q = {1, 0.001, 1, 1, 1, /*head 1*/ 1, 1, 1, 1, 0.01};
  std::vector<double> k = {1, -50, 1, 2, 3, /*head 1*/ 1, 2, 3, 4, 100};
  std::vector<double> q2 = q;
  for (int i = 5; i < 10; ++i) q2[i] *= 2;  // batch 1 doubles head 1's logits
  q.insert(q.end(), q2.begin(), q2.end());
  k.insert(k.end(), k.begin(), k.end());
  Tensor qt = from_vector(q, {2, 2, 5, 1}, {DType::f64}), kt = from_vector(k, {2, 2, 5, 1}, {DType::f64});
  Tensor vt = zeros({2, 2, 5, 1}, {DType::f64});
  AttentionSpec spec{1.0, {1, 0}};
  AttentionResult r = attention(qt, kt, vt, spec);
  // Head 0 (window 1) sees only the diagonal: max |q_i k_i| = 3. Head 1: 4 * 2 from batch 1.
  CHECK(r.max_logit.to_vector<float>() == std::vector<float>{3, 8});
  CHECK(as_double(r.max_logit.to_vector<float>()) == naive_attention(qt, kt, vt, spec.window, 1.0).max_logit);
  // Head 0 sees one key per row: range 0. Head 1, batch 1 (logits doubled), row 3 sees 2, 4, 6, 8.
  CHECK(r.max_range.to_vector<float>() == std::vector<float>{0, 6});
  CHECK(as_double(r.max_range.to_vector<float>()) == naive_attention(qt, kt, vt, spec.window, 1.0).max_range);
}

TEST_CASE("attention max_range ignores a shift of a whole row, max_logit does not") {
  // D = 2 with k_j = (x_j, 1): logit q_i . k_j = q_i0 x_j + q_i1, so q_i1 shifts row i's logits by
  // a constant. The attention and the range do not move; max |logit| does.
  std::vector<double> k = {0, 1, 1, 1, 2, 1, 3, 1}, q = {1, 0, 1, 0, 1, 0, 1, 0};
  Tensor kt = from_vector(k, {1, 1, 4, 2}, {DType::f64}), vt = from_vector(k, {1, 1, 4, 2}, {DType::f64});
  AttentionSpec spec{1.0, {0}};
  AttentionResult a = attention(from_vector(q, {1, 1, 4, 2}, {DType::f64}), kt, vt, spec);
  for (size_t i = 1; i < q.size(); i += 2) q[i] = 40;
  AttentionResult b = attention(from_vector(q, {1, 1, 4, 2}, {DType::f64}), kt, vt, spec);
  CHECK(max_abs_diff(a.out.to_vector<double>(), b.out.to_vector<double>()) < 1e-12);
  CHECK(a.max_range.to_vector<float>() == std::vector<float>{3});
  CHECK(b.max_range.to_vector<float>() == std::vector<float>{3});
  CHECK(a.max_logit.to_vector<float>() == std::vector<float>{3});
  CHECK(b.max_logit.to_vector<float>() == std::vector<float>{43});
}

TEST_CASE("attention statistics propagate NaN to their head only, from any batch and any row") {
  Generator gen(14);
  for (DType dt : {DType::f32, DType::f64})
    for (int64_t b_nan : {0, 1}) {
      const int64_t B = 2, H = 3, T = 40, D = 4;
      std::vector<double> q = randn({B, H, T, D}, gen, {DType::f64}).to_vector<double>();
      // Head 1 (window 5), query 37: the NaN sits in the last row block (rows 32..39).
      q[((b_nan * H + 1) * T + 37) * D + 2] = std::nan("");
      const Tensor qt = from_vector(q, {B, H, T, D}, {dt});
      const Tensor k = randn({B, H, T, D}, gen, {dt}), v = randn({B, H, T, D}, gen, {dt});
      AttentionResult r = attention(qt, k, v, {0, {0, 5, 3}});
      const std::vector<float> m = r.max_logit.to_vector<float>(), range = r.max_range.to_vector<float>();
      CAPTURE(b_nan);
      CHECK(std::isnan(m[1]));
      CHECK(std::isnan(range[1]));
      for (int h : {0, 2}) {
        CHECK(std::isfinite(m[h]));
        CHECK(std::isfinite(range[h]));
        CHECK(range[h] > 0);
      }
    }
}

TEST_CASE("attention reads strided views: (B, T, H, D) transposed to (B, H, T, D)") {
  Generator gen(9);
  const int64_t B = 2, T = 5, H = 3, D = 4;
  auto heads = [&](const Tensor& x) { return x.as_strided({B, H, T, D}, {T * H * D, D, H * D, 1}, 0); };
  Tensor q = heads(randn({B, T, H, D}, gen, {DType::f64})), k = heads(randn({B, T, H, D}, gen, {DType::f64})),
         v = heads(randn({B, T, H, D}, gen, {DType::f64}));
  REQUIRE_FALSE(q.is_contiguous());
  AttentionSpec spec{0, {2, 0, 3}};
  Reference ref = naive_attention(q, k, v, spec.window, 0.5);
  CHECK(max_abs_diff(attention(q, k, v, spec).out.to_vector<double>(), ref.out) < 1e-12);
}

TEST_CASE("attention on empty inputs gives empty outputs and a zero statistic") {
  AttentionResult r = attention(zeros({0, 2, 3, 4}), zeros({0, 2, 3, 4}), zeros({0, 2, 3, 4}), AttentionSpec::mhsa(2));
  CHECK(r.out.shape() == Shape{0, 2, 3, 4});
  CHECK(r.max_logit.to_vector<float>() == std::vector<float>{0, 0});
  CHECK(r.max_range.to_vector<float>() == std::vector<float>{0, 0});
  CHECK(attention(zeros({1, 2, 0, 4}), zeros({1, 2, 0, 4}), zeros({1, 2, 0, 4}), AttentionSpec::mhsa(2))
            .out.numel() == 0);
}

TEST_CASE("attention backward matches finite differences") {
  Generator gen(10);
  auto check = [&](const AttentionSpec& spec, int64_t B, int64_t T, int64_t D) {
    const int64_t H = static_cast<int64_t>(spec.window.size());
    auto f = [&](const std::vector<Tensor>& in) { return attention(in[0], in[1], in[2], spec).out; };
    CHECK(gradcheck(f, {leaf({B, H, T, D}, gen), leaf({B, H, T, D}, gen), leaf({B, H, T, D}, gen)}));
  };
  SUBCASE("MHSA") { check(AttentionSpec::mhsa(2), 2, 4, 3); }
  SUBCASE("LS pattern") { check({0, {2, 3, 0}}, 1, 5, 3); }
  SUBCASE("window 1") { check({0, {1, 1}}, 1, 4, 2); }
  SUBCASE("several row blocks") { check({0, {0, 3}}, 1, 35, 2); }
  SUBCASE("custom scale, T = 1") { check({0.7, {0, 1}}, 2, 1, 3); }
  SUBCASE("only k requires grad") {
    auto f = [](const std::vector<Tensor>& in) { return attention(in[0], in[1], in[2], {0, {0, 2}}).out; };
    CHECK(gradcheck(f, {randn({1, 2, 4, 3}, gen, {DType::f64}), leaf({1, 2, 4, 3}, gen),
                        randn({1, 2, 4, 3}, gen, {DType::f64})}));
  }
}

TEST_CASE("attention records a graph for out only, and none under NoGradGuard") {
  Generator gen(11);
  Tensor q = leaf({1, 2, 3, 4}, gen), k = leaf({1, 2, 3, 4}, gen), v = leaf({1, 2, 3, 4}, gen);
  AttentionResult r = attention(q, k, v, AttentionSpec::mhsa(2));
  CHECK(r.out.requires_grad());
  CHECK(std::string(r.out.grad_fn()->name()) == "AttentionBackward");
  CHECK_FALSE(r.max_logit.requires_grad());
  CHECK_FALSE(r.max_range.requires_grad());
  NoGradGuard no_grad;
  CHECK_FALSE(attention(q, k, v, AttentionSpec::mhsa(2)).out.requires_grad());
}

TEST_CASE("attention in f32 agrees with f64, forward and backward") {
  // Tolerance: relative error ||x32 - x64|| / ||x64|| under 1e-5 (f32 rounding is ~6e-8 per op;
  // T = 48 keeps accumulated error well below that bound). Same bound the CUDA kernel will meet.
  Generator gen(12);
  const Shape shape{2, 4, 48, 16};
  Tensor q = randn(shape, gen), k = randn(shape, gen), v = randn(shape, gen), g = randn(shape, gen);
  AttentionSpec spec = AttentionSpec::ls(4, 2, 7);
  auto run = [&](DType t) {
    // detach(): fresh leaves, so the f32 run does not mark q, k, v themselves as requiring grad.
    Tensor qd = q.to(t).detach(), kd = k.to(t).detach(), vd = v.to(t).detach();
    for (Tensor* x : {&qd, &kd, &vd}) x->set_requires_grad(true);
    AttentionResult r = attention(qd, kd, vd, spec);
    r.out.backward(g.to(t));
    return std::vector<std::vector<double>>{r.out.to_vector<double>(), qd.grad().to_vector<double>(),
                                            kd.grad().to_vector<double>(), vd.grad().to_vector<double>(),
                                            r.max_logit.to_vector<double>(), r.max_range.to_vector<double>()};
  };
  auto lo = run(DType::f32), hi = run(DType::f64);
  const char* names[] = {"out", "dq", "dk", "dv", "max_logit", "max_range"};
  for (size_t i = 0; i < lo.size(); ++i) CHECK_MESSAGE(rel_err(lo[i], hi[i]) < 1e-5, names[i]);
}

TEST_CASE("attention rejects bad input with typed errors that name the op") {
  Tensor q = zeros({1, 2, 3, 4}), k = zeros({1, 2, 3, 4}), v = zeros({1, 2, 3, 4});
  const AttentionSpec spec = AttentionSpec::mhsa(2);
  std::string m = error_of<ShapeError>([&] { attention(q, zeros({1, 2, 4, 4}), v, spec); });
  CHECK(m.find("attention") != std::string::npos);
  CHECK(m.find("k [1, 2, 4, 4] f32 cpu") != std::string::npos);
  m = error_of<ShapeError>([&] { attention(q, k, v, AttentionSpec::mhsa(3)); });
  CHECK(m.find("attention") != std::string::npos);
  CHECK(m.find("3 windows for 2 heads") != std::string::npos);
  m = error_of<ValueError>([&] { attention(q, k, v, {0, {0, -3}}); });
  CHECK(m.find("attention") != std::string::npos);
  CHECK(m.find("head 1 has negative window -3") != std::string::npos);
  m = error_of<ShapeError>([&] { attention(zeros({2, 3, 4}), zeros({2, 3, 4}), zeros({2, 3, 4}), spec); });
  CHECK(m.find("attention") != std::string::npos);
  CHECK(m.find("(B, H, T, D)") != std::string::npos);
  m = error_of<DTypeError>([&] {
    Tensor i = zeros({1, 2, 3, 4}, {DType::i64});
    attention(i, i, i, spec);
  });
  CHECK(m.find("attention") != std::string::npos);
  m = error_of<DTypeError>([&] { attention(q, k, zeros({1, 2, 3, 4}, {DType::f64}), spec); });
  CHECK(m.find("attention") != std::string::npos);
  m = error_of<DTypeError>([&] {
    Tensor h = zeros({1, 2, 3, 4}, {DType::bf16});
    attention(h, h, h, spec);
  });
  CHECK(m.find("attention") != std::string::npos);
  // Device is checked before shape: this k is both on CUDA and the wrong shape.
  m = error_of<DeviceError>([&] { attention(q, empty({0}, {DType::f32, Device::cuda(0)}), v, spec); });
  CHECK(m.find("attention") != std::string::npos);
  CHECK_THROWS_AS(attention(q, k, v, {std::nan(""), {0, 0}}), ValueError);
  CHECK_THROWS_AS(attention(q, Tensor(), v, spec), ValueError);
}

TEST_CASE("attention with logit soft-capping matches the capped reference, forward and backward") {
  Generator gen(21);
  // Large logits (scale 3) so that the cap at 2 bites hard.
  Tensor q = leaf({2, 3, 9, 4}, gen), k = leaf({2, 3, 9, 4}, gen), v = leaf({2, 3, 9, 4}, gen);
  AttentionSpec spec{3.0, {0, 2, 5}, 2.0};
  AttentionResult r = attention(q, k, v, spec);
  Reference ref = naive_attention(q, k, v, spec.window, 3.0, 2.0);
  CHECK(max_abs_diff(r.out.to_vector<double>(), ref.out) < 1e-12);
  auto m = r.max_logit.to_vector<float>(), range = r.max_range.to_vector<float>();
  for (int h = 0; h < 3; ++h) {
    CHECK(m[h] <= 2.0f);
    CHECK(m[h] == doctest::Approx(ref.max_logit[h]).epsilon(1e-6));
    CHECK(range[h] <= 4.0f);  // two capped logits differ by less than 2c
    CHECK(range[h] == doctest::Approx(ref.max_range[h]).epsilon(1e-6));
  }
  // Tolerances: f64 central differences, eps 1e-6.
  CHECK(gradcheck([&](const std::vector<Tensor>& x) { return attention(x[0], x[1], x[2], spec).out; }, {q, k, v}));
  CHECK_THROWS_AS(attention(q, k, v, AttentionSpec{0, {0, 0, 0}, -1.0}), ValueError);
}
