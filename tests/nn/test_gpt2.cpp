// The GPT2 model: forward against its parts, loss against a hand-computed cross-entropy,
// gradients against finite differences in f64, bad input, dropout, and a tiny model that trains.
#include <doctest/doctest.h>

#include <cmath>

#include "core/factory.h"
#include "gradcheck.h"
#include "nn/gpt2.h"
#include "test_util.h"

using namespace keel;
using namespace keel::nn;

namespace {

Tensor random_ids(int64_t B, int64_t T, int64_t V, uint64_t seed) {
  Generator gen(seed);
  std::vector<double> u = rand({B, T}, gen, {DType::f64}).to_vector<double>();
  std::vector<int64_t> ids(u.size());
  for (size_t i = 0; i < u.size(); ++i) ids[i] = std::min<int64_t>(V - 1, static_cast<int64_t>(u[i] * V));
  return from_vector<int64_t>(ids, {B, T});
}

}  // namespace

TEST_CASE("GPT2 forward: logits from the parts, loss from the logits, max_logit and max_range (L, H)") {
  for (bool tied : {true, false}) {
    GPT2Config c = nn::testing::micro_config();
    c.tie_embeddings = tied;
    GPT2 m(c, 11);
    m.to(DType::f64);
    const int64_t B = 2, T = 5, V = c.vocab_size, C = c.n_embd;
    Tensor ids = random_ids(B, T, V, 1), targets = random_ids(B, T, V, 2);
    GPT2Output out = m.forward(ids, targets);
    CHECK(out.logits.shape() == Shape{B, T, V});
    CHECK(out.max_logit.shape() == Shape{c.n_layer, c.n_head});
    CHECK(out.max_logit.dtype() == DType::f32);
    CHECK(out.max_logit.device().is_cpu());
    CHECK(out.max_range.shape() == Shape{c.n_layer, c.n_head});
    CHECK(out.max_range.dtype() == DType::f32);
    CHECK(out.max_range.device().is_cpu());

    // x = wte[ids] + wpe[t], blocks, ln_f, lm_head
    std::vector<double> wte = m.wte.weight.to_vector<double>(), wpe = m.wpe.weight.to_vector<double>();
    std::vector<int64_t> idv = ids.to_vector<int64_t>();
    std::vector<double> x(B * T * C);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t k = 0; k < C; ++k) x[(b * T + t) * C + k] = wte[idv[b * T + t] * C + k] + wpe[t * C + k];
    Tensor h = from_vector<double>(x, {B, T, C});
    std::vector<float> ml, mr;
    for (auto& blk : m.h) {
      Tensor mlt, mrt;
      h = blk->forward(h, &mlt, &mrt);
      for (float v : mlt.to_vector<float>()) ml.push_back(v);
      for (float v : mrt.to_vector<float>()) mr.push_back(v);
    }
    CHECK(out.max_logit.to_vector<float>() == ml);
    CHECK(out.max_range.to_vector<float>() == mr);
    CHECK(ml != mr);  // two statistics, not one copied
    std::vector<double> hn = m.ln_f.forward(h).to_vector<double>();
    std::vector<double> head = (tied ? m.wte.weight : m.lm_head->weight).to_vector<double>();
    std::vector<double> logits = out.logits.to_vector<double>();
    std::vector<int64_t> tg = targets.to_vector<int64_t>();
    double loss = 0, worst = 0;
    for (int64_t n = 0; n < B * T; ++n) {
      double mx = -1e300, z = 0;
      for (int64_t v = 0; v < V; ++v) {
        double s = 0;
        for (int64_t k = 0; k < C; ++k) s += hn[n * C + k] * head[v * C + k];
        worst = std::max(worst, std::abs(s - logits[n * V + v]));
        mx = std::max(mx, s);
      }
      for (int64_t v = 0; v < V; ++v) z += std::exp(logits[n * V + v] - mx);
      loss += (mx + std::log(z) - logits[n * V + tg[n]]) / (B * T);
    }
    CHECK(worst < 1e-12);
    CHECK(out.loss.item() == doctest::Approx(loss).epsilon(1e-12));
    CHECK_FALSE(m.forward(ids).loss.defined());
  }
}

TEST_CASE("GPT2 gradients match finite differences in f64, every attention variant") {
  for (AttentionKind kind : {AttentionKind::mhsa, AttentionKind::ls, AttentionKind::qk_norm, AttentionKind::softcap}) {
    GPT2Config c = nn::testing::micro_config();
    c.attention = kind;
    c.softcap = 1.0;
    c.tie_embeddings = kind != AttentionKind::ls;  // both tied and untied get checked
    CAPTURE(c.summary());
    GPT2 m(c, 3);
    m.to(DType::f64);
    Tensor ids = random_ids(2, 6, c.vocab_size, 4), targets = random_ids(2, 6, c.vocab_size, 5);
    std::vector<Tensor> checked = {m.wte.weight, m.wpe.weight, m.h[0]->attn.c_attn.weight, m.h[1]->attn.c_attn.bias,
                                   m.h[0]->ln_1.weight, m.h[1]->mlp.c_proj.bias, m.ln_f.bias};
    if (m.h[0]->attn.q_norm) checked.push_back(m.h[0]->attn.k_norm->weight);
    if (!c.tie_embeddings) checked.push_back(m.lm_head->weight);
    auto f = [&](const std::vector<Tensor>&) { return m.forward(ids, targets).loss; };
    CHECK(keel::testing::gradcheck(f, checked, {.eps = 1e-6, .atol = 1e-8, .rtol = 1e-5}));
  }
}

TEST_CASE("GPT2 rejects bad input with clear errors") {
  GPT2Config c = GPT2Config::preset("tiny");
  GPT2 m(c);
  CHECK_THROWS_AS(m.forward(zeros({1, c.block_size + 1}, {DType::i64})), ShapeError);
  try {
    m.forward(zeros({1, c.block_size + 1}, {DType::i64}));
  } catch (const ShapeError& e) {
    CHECK(std::string(e.what()).find("exceeds the context length") != std::string::npos);
  }
  CHECK_NOTHROW(m.forward(zeros({1, c.block_size}, {DType::i32})));
  CHECK_THROWS_AS(m.forward(zeros({4}, {DType::i64})), ShapeError);
  CHECK_THROWS_AS(m.forward(zeros({1, 4})), DTypeError);
  CHECK_THROWS_AS(m.forward(zeros({1, 4}, {DType::i64}), zeros({1, 3}, {DType::i64})), ShapeError);
  CHECK_THROWS_AS(m.forward(full({1, 2}, c.vocab_size, {DType::i64})), IndexError);
  c.n_head = 5;
  CHECK_THROWS_AS(GPT2{c}, ConfigError);
}

TEST_CASE("dropout is active in train mode, reproducible, and off in eval mode") {
  GPT2Config c = GPT2Config::preset("tiny");
  c.dropout = 0.2;
  GPT2 a(c, 1), b(c, 1);
  Tensor ids = random_ids(2, 8, c.vocab_size, 3);
  std::vector<float> la = a.forward(ids).logits.to_vector<float>();
  CHECK(la == b.forward(ids).logits.to_vector<float>());  // same seed, same masks
  CHECK(la != a.forward(ids).logits.to_vector<float>());  // the next step draws new masks
  a.eval();
  std::vector<float> e1 = a.forward(ids).logits.to_vector<float>();
  CHECK(e1 == a.forward(ids).logits.to_vector<float>());
  c.dropout = 0;
  GPT2 d(c, 1);
  CHECK(e1 == d.forward(ids).logits.to_vector<float>());
}

TEST_CASE("a tiny GPT-2 overfits a fixed batch (Adam written here)") {
  GPT2Config c = GPT2Config::preset("tiny");
  c.vocab_size = 64, c.block_size = 32;
  c.attention = AttentionKind::ls;
  GPT2 m(c, 0);
  Tensor ids = random_ids(4, 17, c.vocab_size, 7);
  Tensor x = ids.as_strided({4, 16}, {17, 1}, 0).contiguous(), y = ids.as_strided({4, 16}, {17, 1}, 1).contiguous();
  NamedTensors params = m.named_parameters();
  std::vector<std::vector<float>> m1(params.size()), m2(params.size());
  for (size_t i = 0; i < params.size(); ++i) m1[i].assign(params[i].second.numel(), 0), m2[i].assign(params[i].second.numel(), 0);
  const double lr = 1e-2, b1 = 0.9, b2 = 0.99, eps = 1e-8;
  double first = 0, last = 0;
  for (int step = 1; step <= 50; ++step) {
    m.zero_grad();
    Tensor loss = m.forward(x, y).loss;
    if (step == 1) first = loss.item();
    last = loss.item();
    loss.backward();
    for (size_t i = 0; i < params.size(); ++i) {
      float* p = params[i].second.data<float>();
      std::vector<float> g = params[i].second.grad().to_vector<float>();
      for (size_t j = 0; j < g.size(); ++j) {
        m1[i][j] = b1 * m1[i][j] + (1 - b1) * g[j];
        m2[i][j] = b2 * m2[i][j] + (1 - b2) * g[j] * g[j];
        double mh = m1[i][j] / (1 - std::pow(b1, step)), vh = m2[i][j] / (1 - std::pow(b2, step));
        p[j] -= static_cast<float>(lr * mh / (std::sqrt(vh) + eps));
      }
    }
  }
  MESSAGE("loss " << first << " -> " << last);
  CHECK(first == doctest::Approx(std::log(64.0)).epsilon(0.05));
  CHECK(last < 0.3 * first);
}
