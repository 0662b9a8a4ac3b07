// Each module's forward against a reference written with plain loops over std::vector<double>
// (independent of the ops), on tiny f64 inputs; attention variants; max_logit and max_range.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "core/factory.h"
#include "nn/gpt2.h"
#include "test_util.h"

using namespace keel;
using namespace keel::nn;

namespace {

using Vec = std::vector<double>;

Vec vec(const Tensor& t) { return t.to_vector<double>(); }

double max_diff(const Vec& a, const Vec& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

// x (N, K), w (M, K), b (M) or empty -> (N, M)
Vec ref_linear(const Vec& x, const Vec& w, const Vec& b, int64_t N, int64_t K, int64_t M) {
  Vec y(N * M, 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m) {
      double s = b.empty() ? 0.0 : b[m];
      for (int64_t k = 0; k < K; ++k) s += x[n * K + k] * w[m * K + k];
      y[n * M + m] = s;
    }
  return y;
}

// x (N, C) -> (N, C)
Vec ref_layernorm(const Vec& x, const Vec& w, const Vec& b, int64_t N, int64_t C, double eps = 1e-5) {
  Vec y(x.size());
  for (int64_t n = 0; n < N; ++n) {
    double mean = 0, var = 0;
    for (int64_t c = 0; c < C; ++c) mean += x[n * C + c] / C;
    for (int64_t c = 0; c < C; ++c) var += (x[n * C + c] - mean) * (x[n * C + c] - mean) / C;
    for (int64_t c = 0; c < C; ++c)
      y[n * C + c] = (x[n * C + c] - mean) / std::sqrt(var + eps) * w[c] + (b.empty() ? 0.0 : b[c]);
  }
  return y;
}

double ref_gelu(double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }

Vec opt_vec(const Tensor& t) { return t.defined() ? vec(t) : Vec{}; }

struct RefAttention {
  Vec out;        // (B, T, C)
  Vec max_logit;  // (H)
  Vec max_range;  // (H)
};

// The Attention module from its own weights, with loops: x (B, T, C) -> (B, T, C).
RefAttention ref_attention(const Attention& a, const GPT2Config& c, const Vec& x, int64_t B, int64_t T) {
  const int64_t C = c.n_embd, H = c.n_head, D = c.head_dim();
  Vec qkv = ref_linear(x, vec(a.c_attn.weight), opt_vec(a.c_attn.bias), B * T, C, 3 * C);
  // element (b, t, part, h, d) of qkv, with qk_norm applied per (b, t, h) vector
  auto get = [&](int64_t b, int64_t t, int64_t part, int64_t h) {
    Vec v(qkv.begin() + (b * T + t) * 3 * C + part * C + h * D, qkv.begin() + (b * T + t) * 3 * C + part * C + (h + 1) * D);
    if (c.attention == AttentionKind::qk_norm && part < 2) {
      const LayerNorm& ln = part == 0 ? *a.q_norm : *a.k_norm;
      v = ref_layernorm(v, vec(ln.weight), opt_vec(ln.bias), 1, D);
    }
    return v;
  };
  std::vector<int64_t> window = c.attention_spec().window;
  RefAttention r{Vec(B * T * C, 0.0), Vec(H, 0.0), Vec(H, 0.0)};
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i) {
        Vec q = get(b, i, 0, h), logits(T, -std::numeric_limits<double>::infinity());
        double m = -std::numeric_limits<double>::infinity(), lo = std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j <= i; ++j) {
          if (window[h] > 0 && j <= i - window[h]) continue;
          Vec k = get(b, j, 1, h);
          double s = 0;
          for (int64_t d = 0; d < D; ++d) s += q[d] * k[d] / std::sqrt(static_cast<double>(D));
          if (c.attention == AttentionKind::softcap) s = c.softcap * std::tanh(s / c.softcap);
          logits[j] = s;
          m = std::max(m, s);
          lo = std::min(lo, s);
          r.max_logit[h] = std::max(r.max_logit[h], std::abs(s));
        }
        r.max_range[h] = std::max(r.max_range[h], m - lo);
        double z = 0;
        for (int64_t j = 0; j < T; ++j) z += std::exp(logits[j] - m);
        for (int64_t j = 0; j < T; ++j) {
          Vec v = get(b, j, 2, h);
          for (int64_t d = 0; d < D; ++d) r.out[(b * T + i) * C + h * D + d] += std::exp(logits[j] - m) / z * v[d];
        }
      }
  r.out = ref_linear(r.out, vec(a.c_proj.weight), opt_vec(a.c_proj.bias), B * T, C, C);
  return r;
}

GPT2Config f64_config(AttentionKind kind) {
  GPT2Config c = testing::micro_config();
  c.attention = kind;
  c.softcap = 0.7;  // small enough that the large init weights get capped
  return c;
}

}  // namespace

TEST_CASE("Linear, Embedding and LayerNorm against loops") {
  Generator gen(3);
  Linear lin(5, 3, true, gen, 1.0);
  fill_(lin.bias, 0.25);
  Tensor x = randn({2, 4, 5}, gen);
  CHECK(lin.forward(x).shape() == Shape{2, 4, 3});
  CHECK(max_diff(vec(lin.forward(x)), ref_linear(vec(x), vec(lin.weight), vec(lin.bias), 8, 5, 3)) < 1e-5);
  Linear nobias(5, 3, false, gen, 0.02);
  CHECK_FALSE(nobias.bias.defined());
  CHECK(nobias.named_parameters().size() == 1);

  Embedding emb(7, 3, gen, 1.0);
  Tensor ids = from_vector<int64_t>({6, 0, 6, 2}, {2, 2});
  Vec w = vec(emb.weight), y = vec(emb.forward(ids));
  CHECK(emb.forward(ids).shape() == Shape{2, 2, 3});
  const int64_t rows[] = {6, 0, 6, 2};
  for (int i = 0; i < 4; ++i)
    for (int d = 0; d < 3; ++d) CHECK(y[i * 3 + d] == w[rows[i] * 3 + d]);

  for (bool bias : {true, false}) {
    LayerNorm ln(5, bias, 1e-5);
    normal_(ln.weight, gen);
    if (bias) normal_(ln.bias, gen);
    CHECK(max_diff(vec(ln.forward(x)), ref_layernorm(vec(x), vec(ln.weight), opt_vec(ln.bias), 8, 5)) < 1e-5);
  }
}

TEST_CASE("MLP is c_proj(gelu_tanh(c_fc(x)))") {
  GPT2Config c = testing::micro_config();
  Generator gen(4);
  MLP mlp(c, gen, nullptr);
  mlp.to(DType::f64);
  Tensor x = randn({2, 3, c.n_embd}, gen, {DType::f64});
  const int64_t C = c.n_embd;
  Vec h = ref_linear(vec(x), vec(mlp.c_fc.weight), vec(mlp.c_fc.bias), 6, C, 4 * C);
  for (double& v : h) v = ref_gelu(v);
  Vec y = ref_linear(h, vec(mlp.c_proj.weight), vec(mlp.c_proj.bias), 6, 4 * C, C);
  CHECK(max_diff(vec(mlp.forward(x)), y) < 1e-12);
}

TEST_CASE("Attention variants against a loop reference: output, max_logit and max_range") {
  for (AttentionKind kind : {AttentionKind::mhsa, AttentionKind::ls, AttentionKind::qk_norm, AttentionKind::softcap})
    for (bool bias : {true, false}) {
      GPT2Config c = f64_config(kind);
      c.bias = bias;
      CAPTURE(c.summary());
      Generator gen(5);
      Attention attn(c, gen, nullptr);
      attn.to(DType::f64);
      if (attn.q_norm) {  // move the norms away from their identity init so they matter
        for (LayerNorm* ln : {attn.q_norm.get(), attn.k_norm.get()}) {
          normal_(ln->weight, gen, 1.0, 0.5);
          if (ln->bias.defined()) normal_(ln->bias, gen, 0.0, 0.5);
        }
      }
      const int64_t B = 2, T = 6;
      Tensor x = randn({B, T, c.n_embd}, gen, {DType::f64});
      AttentionOutput out = attn.forward(x);
      RefAttention ref = ref_attention(attn, c, vec(x), B, T);
      CHECK(out.out.shape() == Shape{B, T, c.n_embd});
      CHECK(max_diff(vec(out.out), ref.out) < 1e-10);
      CHECK(out.max_logit.shape() == Shape{c.n_head});
      CHECK(max_diff(vec(out.max_logit), ref.max_logit) < 1e-5);  // the statistics are f32
      CHECK(out.max_range.shape() == Shape{c.n_head});
      CHECK(max_diff(vec(out.max_range), ref.max_range) < 1e-5);
      if (kind == AttentionKind::softcap) {
        CHECK(attn.spec().softcap == 0.7);
        for (double m : ref.max_logit) CHECK(m <= 0.7);
      }
    }
}

TEST_CASE("LS-attention: local heads first with the configured window") {
  GPT2Config c = GPT2Config::preset("paper");
  CHECK(c.attention_spec().window == std::vector<int64_t>{50, 50, 50, 50, 50, 0});
  c.attention = AttentionKind::mhsa;
  CHECK(c.attention_spec().window == std::vector<int64_t>(6, 0));
  GPT2Config t = GPT2Config::preset("tiny");
  t.attention = AttentionKind::ls;
  Generator gen(1);
  Attention a(t, gen, nullptr);
  CHECK(a.spec().window == std::vector<int64_t>{8, 8, 0, 0});
  CHECK(a.spec().softcap == 0);
}

TEST_CASE("qk_norm changes the logits: with it, |logit| <= sqrt(D) * (gain bound)") {
  // With unit gains and no shift, LayerNorm'ed q and k have norm sqrt(D), so a logit
  // q.k / sqrt(D) is at most sqrt(D) whatever the weights; plain attention has no such bound.
  GPT2Config c = GPT2Config::preset("tiny");
  c.bias = false;
  c.init_std = 2.0;  // huge weights: plain logits explode
  Generator g1(9), g2(9), gx(10);
  c.attention = AttentionKind::mhsa;
  Attention plain(c, g1, nullptr);
  c.attention = AttentionKind::qk_norm;
  Attention normed(c, g2, nullptr);
  CHECK(normed.c_attn.weight.to_vector<float>() == plain.c_attn.weight.to_vector<float>());
  Tensor x = randn({1, 16, c.n_embd}, gx);
  Vec m_plain = vec(plain.forward(x).max_logit), m_norm = vec(normed.forward(x).max_logit);
  const double bound = std::sqrt(static_cast<double>(c.head_dim()));
  for (int64_t h = 0; h < c.n_head; ++h) {
    CHECK(m_norm[h] <= bound + 1e-4);
    CHECK(m_plain[h] > 10 * bound);
  }
}

TEST_CASE("Block is pre-LayerNorm with two residuals") {
  GPT2Config c = testing::micro_config();
  Generator gen(6);
  Block blk(c, gen, nullptr);
  blk.to(DType::f64);
  Tensor x = randn({2, 5, c.n_embd}, gen, {DType::f64});
  Vec h = vec(x), a = vec(blk.attn.forward(blk.ln_1.forward(x)).out);
  for (size_t i = 0; i < h.size(); ++i) h[i] += a[i];
  Tensor ht = from_vector<double>(h, x.shape());
  Vec m = vec(blk.mlp.forward(blk.ln_2.forward(ht)));
  for (size_t i = 0; i < h.size(); ++i) h[i] += m[i];
  Tensor ml, mr;
  CHECK(max_diff(vec(blk.forward(x, &ml, &mr)), h) < 1e-12);
  CHECK(ml.shape() == Shape{c.n_head});
  CHECK(mr.shape() == Shape{c.n_head});
}
