// Module registry: HF parameter names, counts, tying, to(), state / load_state, train / eval.
#include <doctest/doctest.h>

#include <cmath>

#include "core/factory.h"
#include "nn/nn.h"
#include "test_util.h"

using namespace keel;
using namespace keel::nn;

namespace {

std::vector<std::string> hf_names(const GPT2Config& c) {
  std::vector<std::string> n = {"transformer.wte.weight", "transformer.wpe.weight"};
  auto add = [&](const std::string& base, bool with_bias) {
    n.push_back(base + ".weight");
    if (with_bias) n.push_back(base + ".bias");
  };
  for (int64_t l = 0; l < c.n_layer; ++l) {
    std::string p = "transformer.h." + std::to_string(l) + ".";
    add(p + "ln_1", c.bias);
    add(p + "attn.c_attn", c.bias);
    add(p + "attn.c_proj", c.bias);
    if (c.attention == AttentionKind::qk_norm) {
      add(p + "attn.q_norm", c.bias);
      add(p + "attn.k_norm", c.bias);
    }
    add(p + "ln_2", c.bias);
    add(p + "mlp.c_fc", c.bias);
    add(p + "mlp.c_proj", c.bias);
  }
  add("transformer.ln_f", c.bias);
  if (!c.tie_embeddings) n.push_back("lm_head.weight");
  return n;
}

int64_t expected_count(const GPT2Config& c) {
  const int64_t C = c.n_embd, V = c.vocab_size, D = c.head_dim(), b = c.bias ? 1 : 0;
  int64_t layer = (1 + b) * C              // ln_1
                  + 3 * C * C + b * 3 * C  // c_attn
                  + C * C + b * C          // attn.c_proj
                  + (1 + b) * C            // ln_2
                  + 4 * C * C + b * 4 * C  // c_fc
                  + 4 * C * C + b * C;     // mlp.c_proj
  if (c.attention == AttentionKind::qk_norm) layer += 2 * (1 + b) * D;
  return V * C + c.block_size * C + c.n_layer * layer + (1 + b) * C + (c.tie_embeddings ? 0 : V * C);
}

std::vector<std::string> names_of(const NamedTensors& ps) {
  std::vector<std::string> n;
  for (auto& [name, t] : ps) n.push_back(name);
  return n;
}

}  // namespace

TEST_CASE("GPT2 parameter names follow Hugging Face exactly, tied weights listed once") {
  for (bool tied : {true, false})
    for (bool bias : {true, false})
      for (AttentionKind kind : {AttentionKind::mhsa, AttentionKind::qk_norm}) {
        GPT2Config c = GPT2Config::preset("tiny");
        c.tie_embeddings = tied, c.bias = bias, c.attention = kind;
        GPT2 m(c);
        CAPTURE(c.summary());
        CHECK(names_of(m.named_parameters()) == hf_names(c));
        CHECK(m.num_parameters() == expected_count(c));
        if (tied) CHECK(m.lm_head->weight.impl() == m.wte.weight.impl());
        for (auto& [name, p] : m.named_parameters()) {
          CHECK(p.requires_grad());
          CHECK(p.is_leaf());
        }
      }
}

TEST_CASE("GPT-2 124M has HF's parameter count") {
  // 124,439,808: the number transformers reports for "gpt2" (wte counted once).
  CHECK(expected_count(GPT2Config::preset("gpt2-124m")) == 124439808);
}

TEST_CASE("initialisation is GPT-2's and reproducible from the seed") {
  GPT2Config c = GPT2Config::preset("tiny");
  c.n_layer = 4;
  GPT2 a(c, 7), b(c, 7), d(c, 8);
  auto va = a.wte.weight.to_vector<float>(), vb = b.wte.weight.to_vector<float>(), vd = d.wte.weight.to_vector<float>();
  CHECK(va == vb);
  CHECK(va != vd);
  auto stddev = [](const Tensor& t) {
    auto v = t.to_vector<double>();
    double s = 0;
    for (double x : v) s += x * x;
    return std::sqrt(s / v.size());
  };
  CHECK(stddev(a.wte.weight) == doctest::Approx(0.02).epsilon(0.05));
  CHECK(stddev(a.h[0]->mlp.c_fc.weight) == doctest::Approx(0.02).epsilon(0.05));
  CHECK(stddev(a.h[0]->mlp.c_proj.weight) == doctest::Approx(0.02 / std::sqrt(8.0)).epsilon(0.05));
  CHECK(stddev(a.h[0]->attn.c_proj.weight) == doctest::Approx(0.02 / std::sqrt(8.0)).epsilon(0.05));
  for (float x : a.h[1]->ln_1.weight.to_vector<float>()) CHECK(x == 1.0f);
  for (float x : a.h[1]->attn.c_attn.bias.to_vector<float>()) CHECK(x == 0.0f);
}

TEST_CASE("to(DType) replaces parameters by leaves and keeps tying") {
  GPT2 m(GPT2Config::preset("tiny"));
  Tensor before = m.wte.weight;
  m.to(DType::f64);
  for (auto& [name, p] : m.named_parameters()) {
    CHECK(p.dtype() == DType::f64);
    CHECK(p.is_leaf());
    CHECK(p.requires_grad());
  }
  CHECK(m.lm_head->weight.impl() == m.wte.weight.impl());
  CHECK(m.named_parameters().size() == names_of(m.named_parameters()).size());
  CHECK(m.wte.weight.to_vector<double>() == before.to_vector<double>());
  Tensor same = m.wte.weight;
  m.to(DType::f64);  // a no-op keeps the very tensors (an optimizer's references stay valid)
  CHECK(m.wte.weight.impl() == same.impl());
  CHECK_THROWS_AS(m.to(DType::i32), DTypeError);
}

TEST_CASE("state / load_state round trip with strict checks") {
  GPT2Config c = GPT2Config::preset("tiny");
  GPT2 a(c, 1), b(c, 2);
  NamedTensors s = a.state();
  Tensor live = b.wte.weight;
  b.load_state(s);
  CHECK(b.wte.weight.impl() == live.impl());  // in place
  for (size_t i = 0; i < s.size(); ++i)
    CHECK(b.named_parameters()[i].second.to_vector<float>() == s[i].second.to_vector<float>());
  CHECK(b.lm_head->weight.to_vector<float>() == a.wte.weight.to_vector<float>());

  NamedTensors missing(s.begin() + 1, s.end());
  CHECK_THROWS_AS(b.load_state(missing), ValueError);
  NamedTensors extra = s;
  extra.emplace_back("transformer.h.9.ln_1.weight", ones({c.n_embd}));
  CHECK_THROWS_AS(b.load_state(extra), ValueError);
  NamedTensors twice = s;
  twice.push_back(s[0]);
  CHECK_THROWS_AS(b.load_state(twice), ValueError);
  NamedTensors wrong = s;
  wrong[1].second = zeros({3, 3});
  CHECK_THROWS_AS(b.load_state(wrong), ShapeError);
  try {
    b.load_state(wrong);
  } catch (const ShapeError& e) {
    CHECK(std::string(e.what()).find("transformer.wpe.weight") != std::string::npos);
  }
}

TEST_CASE("zero_grad drops gradients, train / eval reach every submodule") {
  GPT2 m(GPT2Config::preset("tiny"));
  Tensor ids = zeros({1, 4}, {DType::i64});
  m.forward(ids, ids).loss.backward();
  CHECK(m.wte.weight.grad().defined());
  m.zero_grad();
  for (auto& [name, p] : m.named_parameters()) CHECK_FALSE(p.grad().defined());
  m.eval();
  CHECK_FALSE(m.training());
  CHECK_FALSE(m.h[1]->mlp.training());
  m.train();
  CHECK(m.h[1]->attn.training());
}
