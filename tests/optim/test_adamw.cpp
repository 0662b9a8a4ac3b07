// AdamW against a hand-written f64 reference: decay on matrices only, bias correction with
// per-parameter step counts, f32 master weights for bf16/f16 parameters, state round trips.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "core/copy.h"
#include "core/factory.h"
#include "ops/arith.h"
#include "ops/reduce.h"
#include "checks.h"
#include "optim/adamw.h"
#include "optim/cpu/adamw.h"
#include "optim/grad_math.h"

using namespace keel;
using namespace keel::optim;

namespace {

// PyTorch's AdamW, written out in f64, for one parameter.
struct RefParam {
  std::vector<double> w, m, v;
  int64_t t = 0;
  bool decay = false;
  void step(const std::vector<double>& g, double lr, const AdamWOptions& o) {
    ++t;
    for (size_t i = 0; i < w.size(); ++i) {
      if (decay) w[i] *= 1 - lr * o.weight_decay;
      m[i] = o.beta1 * m[i] + (1 - o.beta1) * g[i];
      v[i] = o.beta2 * v[i] + (1 - o.beta2) * g[i] * g[i];
      double mhat = m[i] / (1 - std::pow(o.beta1, double(t)));
      double vhat = v[i] / (1 - std::pow(o.beta2, double(t)));
      w[i] -= lr * mhat / (std::sqrt(vhat) + o.eps);
    }
  }
};

RefParam ref_of(const Tensor& p) {
  RefParam r;
  r.w = p.to_vector<double>();
  r.m.assign(r.w.size(), 0.0);
  r.v.assign(r.w.size(), 0.0);
  r.decay = p.dim() >= 2;
  return r;
}

// Gradients that bf16 holds exactly (multiples of 1/64 in a small range), so the reference sees
// the same values the optimizer does whatever the gradient dtype.
std::vector<double> grad_values(int64_t n, int seed) {
  std::vector<double> g(n);
  for (int64_t i = 0; i < n; ++i) g[i] = double(((i * 7 + seed * 13) % 23) - 11) / 64.0;
  return g;
}

double max_rel_err(const std::vector<double>& a, const std::vector<double>& b) {
  double e = 0;
  for (size_t i = 0; i < a.size(); ++i) e = std::max(e, std::abs(a[i] - b[i]) / std::max(1e-3, std::abs(b[i])));
  return e;
}

Tensor tensor_of(const std::vector<double>& v, const Shape& s, DType t) { return from_vector<double>(v, s, {t}); }

std::map<std::string, Tensor> as_map(const NamedTensors& n) { return {n.begin(), n.end()}; }

}  // namespace

TEST_CASE("AdamW matches the f64 reference over several steps, decay hits matrices only") {
  Generator gen(3);
  for (DType dt : {DType::f64, DType::f32}) {
    CAPTURE(std::string(dtype_name(dt)));
    Tensor w = randn({3, 4}, gen, {dt}), b = randn({4}, gen, {dt}), e = randn({5, 2}, gen, {dt});
    AdamWOptions o;
    o.weight_decay = 0.1;
    AdamW opt({{"w", w}, {"b", b}, {"emb", e}}, o);
    CHECK(opt.decayed_names() == std::vector<std::string>{"w", "emb"});
    CHECK(opt.undecayed_names() == std::vector<std::string>{"b"});
    CHECK(opt.is_decayed("w"));
    CHECK_FALSE(opt.is_decayed("b"));

    std::vector<RefParam> ref{ref_of(w), ref_of(b), ref_of(e)};
    std::vector<Tensor> ps{w, b, e};
    const double lrs[] = {1e-3, 5e-2, 2e-2, 1e-2};
    for (int s = 0; s < 4; ++s) {
      for (size_t k = 0; k < ps.size(); ++k) {
        auto g = grad_values(ps[k].numel(), s * 3 + int(k));
        ps[k].set_grad(tensor_of(g, ps[k].shape(), dt));
        ref[k].step(g, lrs[s], o);
      }
      opt.step(lrs[s]);
    }
    double tol = dt == DType::f64 ? 1e-13 : 2e-6;
    for (size_t k = 0; k < ps.size(); ++k) CHECK(max_rel_err(ps[k].to_vector<double>(), ref[k].w) < tol);
    CHECK(opt.step_count() == 4);
  }
}

TEST_CASE("AdamW one step from zero state moves every element by lr (bias correction)") {
  // With m = v = 0, the first step is w -= lr * g / (|g| + eps): sign(g) * lr, whatever beta.
  Tensor b = from_vector<double>({1.0, -2.0, 3.0}, {3});
  AdamW opt({{"b", b}}, {.lr = 0.01, .beta1 = 0.9, .beta2 = 0.95, .eps = 0.0, .weight_decay = 0.5});
  b.set_grad(from_vector<double>({0.5, -4.0, 1e-3}, {3}));
  opt.step();
  auto v = b.to_vector<double>();
  CHECK(v[0] == doctest::Approx(0.99).epsilon(1e-14));
  CHECK(v[1] == doctest::Approx(-1.99).epsilon(1e-14));
  CHECK(v[2] == doctest::Approx(2.99).epsilon(1e-14));  // a vector: no decay despite wd 0.5
}

TEST_CASE("AdamW skips parameters without a gradient, their bias correction starts when they get one") {
  Tensor a = from_vector<double>({1.0, 2.0}, {2}), c = from_vector<double>({3.0, 4.0}, {2});
  AdamWOptions o{.lr = 0.1, .weight_decay = 0.0};
  AdamW opt({{"a", a}, {"c", c}}, o);
  RefParam ra = ref_of(a), rc = ref_of(c);
  a.set_grad(from_vector<double>({0.25, -0.5}, {2}));
  ra.step({0.25, -0.5}, 0.1, o);
  opt.step();
  CHECK(c.to_vector<double>() == std::vector<double>{3.0, 4.0});
  c.set_grad(from_vector<double>({1.0, 2.0}, {2}));
  a.zero_grad();
  rc.step({1.0, 2.0}, 0.1, o);
  opt.step();
  CHECK(max_rel_err(a.to_vector<double>(), ra.w) < 1e-15);  // unchanged by the second step
  CHECK(max_rel_err(c.to_vector<double>(), rc.w) < 1e-14);  // its first step: t = 1
  auto st = as_map(opt.state());
  CHECK(st["a.step"].item() == 1);
  CHECK(st["c.step"].item() == 1);
  CHECK(st["step"].item() == 2);
  opt.zero_grad();
  CHECK_FALSE(a.grad().defined());
  CHECK_FALSE(c.grad().defined());
}

TEST_CASE("bf16 and f16 parameters: f32 master follows the reference, the parameter is the rounded master") {
  for (DType dt : {DType::bf16, DType::f16}) {
    CAPTURE(std::string(dtype_name(dt)));
    Generator gen(5);
    Tensor w = randn({4, 8}, gen, {dt});
    AdamWOptions o{.lr = 1e-2};
    AdamW opt({{"w", w}}, o);
    RefParam ref = ref_of(w);  // starts from the bf16 values, which the master copies exactly
    for (int s = 0; s < 5; ++s) {
      auto g = grad_values(w.numel(), s);
      w.set_grad(tensor_of(g, w.shape(), dt));  // low-precision gradient, as mixed precision makes
      ref.step(g, o.lr, o);
      opt.step();
    }
    auto st = as_map(opt.state());
    REQUIRE(st.count("w.master"));
    CHECK(st["w.master"].dtype() == DType::f32);
    CHECK(st["w.m"].dtype() == DType::f32);
    auto master = st["w.master"].to_vector<double>();
    CHECK(max_rel_err(master, ref.w) < 1e-5);
    // The parameter holds exactly master rounded to its dtype.
    Tensor rounded = st["w.master"].to(dt);
    CHECK(w.to_vector<double>() == rounded.to_vector<double>());
    // And the master is more than the parameter: it has moved by steps bf16 cannot hold.
    if (dt == DType::bf16) CHECK(w.to_vector<double>() != master);
  }
}

TEST_CASE("AdamW state save/load continues bit-identically") {
  Generator gen(9);
  auto make = [&](Generator& g) {
    return NamedTensors{{"w", randn({3, 5}, g, {DType::bf16})}, {"b", randn({5}, g, {DType::f32})}};
  };
  NamedTensors pa = make(gen);
  AdamW a(pa, {.lr = 3e-2});
  auto give_grads = [](NamedTensors& ps, int s) {
    for (auto& [n, p] : ps) p.set_grad(tensor_of(grad_values(p.numel(), s), p.shape(), p.dtype()));
  };
  for (int s = 0; s < 3; ++s) {
    give_grads(pa, s);
    a.step();
  }
  NamedTensors saved = a.state();
  // A fresh optimizer on a copy of the parameters (as a resumed run would have: model weights
  // from the checkpoint, here deliberately perturbed for the bf16 one, which load_state must
  // restore from the master).
  Generator other(1);
  NamedTensors pb = make(other);
  Tensor bb = pb[1].second.detach();
  copy_(bb, pa[1].second);
  AdamW b(pb, {.lr = 3e-2});
  b.load_state(saved);
  CHECK(pb[0].second.to_vector<double>() == pa[0].second.to_vector<double>());
  CHECK(b.step_count() == 3);
  for (int s = 3; s < 6; ++s) {
    give_grads(pa, s);
    give_grads(pb, s);
    a.step(1e-2);
    b.step(1e-2);
  }
  for (int k = 0; k < 2; ++k) CHECK(pa[k].second.to_vector<double>() == pb[k].second.to_vector<double>());
  auto sa = a.state(), sb = b.state();
  REQUIRE(sa.size() == sb.size());
  for (size_t i = 0; i < sa.size(); ++i) {
    CHECK(sa[i].first == sb[i].first);
    CHECK(sa[i].second.to_vector<double>() == sb[i].second.to_vector<double>());
  }
}

TEST_CASE("AdamW rejects bad hyper-parameters, parameter lists and state with typed errors") {
  Tensor w = zeros({2, 2});
  CHECK_THROWS_AS(AdamW({{"w", w}}, {.lr = -1.0}), ConfigError);
  CHECK_THROWS_AS(AdamW({{"w", w}}, {.beta1 = 1.0}), ConfigError);
  CHECK_THROWS_AS(AdamW({{"w", w}}, {.beta2 = -0.1}), ConfigError);
  CHECK_THROWS_AS(AdamW({{"w", w}}, {.eps = -1e-8}), ConfigError);
  CHECK_THROWS_AS(AdamW({{"w", w}}, {.weight_decay = -0.1}), ConfigError);
  CHECK_THROWS_AS(AdamW(NamedTensors{}), ConfigError);
  CHECK_THROWS_AS(AdamW({{"w", w}, {"w", zeros({2})}}), ConfigError);
  CHECK_THROWS_AS(AdamW({{"w", w}, {"w2", w}}), ConfigError);  // one tensor listed twice
  CHECK_THROWS_AS(AdamW({{"i", zeros({2}, {DType::i64})}}), DTypeError);
  CHECK_THROWS_AS(AdamW({{"t", zeros({2, 3}).as_strided({3, 2}, {1, 3}, 0)}}), ValueError);

  AdamW opt({{"w", w}, {"b", zeros({2})}});
  CHECK_THROWS_AS(opt.set_lr(-1e-3), ValueError);
  CHECK_THROWS_AS(opt.set_lr(NAN), ValueError);
  CHECK_THROWS_AS((void)opt.is_decayed("nope"), ValueError);

  auto good = opt.state();
  auto with = [&](const std::string& key, Tensor t) {
    NamedTensors s = good;
    for (auto& [k, v] : s)
      if (k == key) v = t;
    return s;
  };
  CHECK_THROWS_AS(opt.load_state(with("w.m", zeros({2, 3}))), ShapeError);
  CHECK_THROWS_AS(opt.load_state(with("w.v", zeros({2, 2}, {DType::f64}))), DTypeError);
  CHECK_THROWS_AS(opt.load_state(with("b.step", from_vector<int64_t>({-1}, {}))), ValueError);
  NamedTensors missing(good.begin() + 1, good.end());
  CHECK_THROWS_AS(opt.load_state(missing), ConfigError);
  NamedTensors extra = good;
  extra.emplace_back("other.m", zeros({2}));
  CHECK_THROWS_AS(opt.load_state(extra), ConfigError);
  NamedTensors twice = good;
  twice.push_back(good[0]);
  CHECK_THROWS_AS(opt.load_state(twice), ConfigError);

  w.set_grad(zeros({2, 2}, {DType::f32}));
  CHECK_NOTHROW(opt.step());
}

TEST_CASE("bf16/f16 parameters accumulate gradients in f32 after zero_grad (grad-accum = one big batch)") {
  // 8 micro-batches: a gradient of 1, then 7 of 2^-12. A bf16/f16 sum stays at 1 (2^-12 is
  // below half an ulp of 1 in both); the f32 buffer holds 1 + 7 * 2^-12 exactly.
  for (DType dt : {DType::bf16, DType::f16}) {
    CAPTURE(std::string(dtype_name(dt)));
    Tensor w = from_vector<float>({1.0f, -2.0f}, {2}).to(dt).set_requires_grad(true);
    AdamW opt({{"w", w}}, {.lr = 0.0, .weight_decay = 0.0});
    const void* buffer = nullptr;
    for (int round = 0; round < 2; ++round) {  // the buffer is reused, and overwritten by the first backward
      opt.zero_grad();
      CHECK_FALSE(w.grad().defined());  // no gradient until a backward, as for f32 parameters
      for (int micro = 0; micro < 8; ++micro) {
        const double c = micro == 0 ? 1.0 : std::ldexp(1.0, -12);
        // d/dw sum(w * c) = c, which the cast's backward hands to w as a bf16/f16 gradient.
        sum(mul(w.to(DType::f32), c)).backward();
        REQUIRE(w.grad().defined());
        CHECK(w.grad().dtype() == DType::f32);
      }
      if (round == 0) buffer = w.grad().raw_data();
      CHECK(w.grad().raw_data() == buffer);
      const float want = static_cast<float>(1.0 + 7 * std::ldexp(1.0, -12));
      CHECK(w.grad().to_vector<float>() == std::vector<float>{want, want});
      opt.step();  // lr 0: consumes the f32 gradient without moving w
      CHECK(w.to_vector<float>() == std::vector<float>{1.0f, -2.0f});
    }
  }
  // f32 parameters keep the plain semantics: no gradient until a backward.
  Tensor x = from_vector<float>({1.0f}, {1}).set_requires_grad(true);
  AdamW opt({{"x", x}});
  opt.zero_grad();
  CHECK_FALSE(x.grad().defined());
}

TEST_CASE("a bf16 parameter no backward reached after zero_grad steps with a zero gradient (weight decay only)") {
  // The reached parameter's buffer holds last step's gradient; the unreached one's must not leak
  // into this step: it steps as with a zero gradient, where only the decoupled decay moves it.
  Tensor a = from_vector<float>({1.0f, 2.0f, 3.0f, 4.0f}, {2, 2}).to(DType::bf16).set_requires_grad(true);
  Tensor b = from_vector<float>({1.0f, 2.0f, 3.0f, 4.0f}, {2, 2}).to(DType::bf16).set_requires_grad(true);
  AdamW opt({{"a", a}, {"b", b}}, {.lr = 0.5, .weight_decay = 0.5});
  opt.zero_grad();
  sum(mul(add(a.to(DType::f32), b.to(DType::f32)), 3.0)).backward();  // both reached: gradient 3
  opt.step();
  opt.zero_grad();
  sum(mul(a.to(DType::f32), 3.0)).backward();  // b unreached
  CHECK_FALSE(b.grad().defined());
  const std::vector<float> before = b.to(DType::f32).to_vector<float>();
  opt.step();
  REQUIRE(b.grad().defined());
  CHECK(b.grad().to_vector<float>() == std::vector<float>(4, 0.0f));
  // m and v decay, so the Adam term keeps the sign of step 1's gradient; without the zero it
  // would also add a second full step of gradient 3. Decay then multiplies by 1 - lr wd.
  const std::vector<float> after = b.to(DType::f32).to_vector<float>();
  const float b1 = 0.9f, b2 = 0.999f;
  for (size_t i = 0; i < 4; ++i) {
    const double m = (1 - b1) * 3.0 * b1, v = (1 - b2) * 9.0 * b2;
    const double mh = m / (1 - b1 * b1), vh = v / (1 - b2 * b2);
    CAPTURE(i);
    // The master moved in f32 and b is its bf16 rounding: compare within a bf16 ulp.
    const double want = before[i] * (1 - 0.25) - 0.5 * mh / (std::sqrt(vh) + 1e-8);
    CHECK(after[i] == doctest::Approx(want).epsilon(1e-2));
  }
}

TEST_CASE("AdamW::step(lr, c) on the CPU is scale_all_(grads, c) then step(lr), bit for bit, every dtype pair") {
  // (param dtype, grad dtype): f32 gradients for half parameters as in training, and the rest.
  const std::pair<DType, DType> pairs[] = {{DType::f32, DType::f32}, {DType::bf16, DType::f32},
                                           {DType::f16, DType::f32}, {DType::bf16, DType::bf16},
                                           {DType::f16, DType::f16}, {DType::f64, DType::f64}};
  for (auto [pd, gd] : pairs) {
    CAPTURE(std::string(dtype_name(pd)) + "/" + dtype_name(gd));
    Tensor x = tensor_of({0.5, -1.25, 2.0, 3.5, -0.75, 1.0}, {2, 3}, pd).set_requires_grad(true);
    Tensor y = x.detach().clone().set_requires_grad(true);
    AdamW a({{"x", x}}, {.lr = 1e-2, .weight_decay = 0.1}), b({{"y", y}}, {.lr = 1e-2, .weight_decay = 0.1});
    for (int step = 1; step <= 3; ++step) {
      // Values whose product with c rounds in f32 (and in bf16/f16 when the gradient is).
      Tensor g = tensor_of({0.1 * step, -0.7, 1.3, 2.9, -0.33, 0.123}, {2, 3}, gd);
      x.set_grad(g.clone());
      y.set_grad(g);
      const double c = 1.0 / (3.0 + step);
      a.step(1e-2, c);
      scale_all_({y.grad()}, c);
      b.step(1e-2);
      CHECK(testing::bits(x) == testing::bits(y));
      CHECK(testing::bits(as_map(a.state()).at("x.m")) == testing::bits(as_map(b.state()).at("y.m")));
      CHECK(testing::bits(as_map(a.state()).at("x.v")) == testing::bits(as_map(b.state()).at("y.v")));
    }
  }
}

TEST_CASE("the CPU step gives an element the same bits wherever it falls: vector loop, remainder, any slice") {
  // The loop is vectorized (8 floats at a time on AVX2) with a scalar remainder, and ZeRO-1
  // shards cut a tensor anywhere: an element's update must not depend on which path takes it.
  const int64_t n = 203;
  Generator gen(5);
  auto slice = [](const Tensor& t, int64_t start, int64_t len) {  // a copy: the step writes in place
    return t.as_strided({len}, {1}, t.offset() + start).clone();
  };
  for (bool with_master : {false, true}) {
    CAPTURE(with_master);
    const Tensor p0 = randn({n}, gen), g = randn({n}, gen), m0 = randn({n}, gen) * 0.1;
    const Tensor r = randn({n}, gen), v0 = r * r * 0.01;  // a second moment: not negative
    AdamWScalars s;
    s.decay = 1 - 1e-3 * 0.1, s.step_size = 1e-3 / (1 - 0.9), s.bc2_sqrt = std::sqrt(1 - 0.95), s.grad_scale = 0.75;
    auto run = [&](int64_t start, int64_t len) {
      Tensor p = slice(p0, start, len), m = slice(m0, start, len), v = slice(v0, start, len);
      Tensor master = with_master ? p.clone() : Tensor();
      optim::cpu::adamw_step(p, slice(g, start, len), m, v, master, s);
      return std::vector<std::vector<unsigned char>>{testing::bits(p), testing::bits(m), testing::bits(v)};
    };
    const auto whole = run(0, n);  // 200 elements in the vector loop, 3 in the remainder
    for (auto [start, len] : {std::pair<int64_t, int64_t>{0, 1}, {29, 1}, {58, 9}, {101, 1}, {194, 9}, {201, 1}}) {
      CAPTURE(start);
      CAPTURE(len);
      const auto part = run(start, len);
      for (size_t t = 0; t < 3; ++t)
        CHECK(std::equal(part[t].begin(), part[t].end(), whole[t].begin() + start * 4));
    }
  }
}
