// Generation through the KV cache gives the same logits as the full forward pass, for every
// attention variant, while local heads keep only their window.
#include <doctest/doctest.h>

#include <cmath>

#include "core/autograd.h"
#include "core/factory.h"
#include "nn/gpt2.h"

using namespace keel;
using namespace keel::nn;

namespace {
GPT2Config small(AttentionKind kind) {
  GPT2Config c = GPT2Config::preset("tiny");
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 32;
  c.block_size = 24;
  c.vocab_size = 50;
  c.attention = kind;
  c.ls_local_heads = 3;
  c.ls_window = 5;
  c.softcap = 2.0;  // small, so the cap changes the logits
  return c;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}
}  // namespace

TEST_CASE("cached generation matches the full forward pass for every attention variant") {
  for (AttentionKind kind : {AttentionKind::mhsa, AttentionKind::ls, AttentionKind::qk_norm, AttentionKind::softcap}) {
    GPT2 model(small(kind), 3);
    model.to(DType::f64);  // f64 so the two orders of summation agree to 1e-12
    NoGradGuard no_grad;
    std::vector<int32_t> tokens;
    for (int i = 0; i < 20; ++i) tokens.push_back((i * 7 + 3) % 50);
    Tensor ids = from_vector(tokens, {2, 10});  // two sequences of 10
    std::vector<double> full = model.forward(ids).logits.to_vector<double>();

    // Prefill 4 tokens of each sequence at once, then one token at a time.
    KVCache c2 = model.make_cache();
    std::vector<int32_t> first;
    for (int b = 0; b < 2; ++b)
      for (int i = 0; i < 4; ++i) first.push_back(tokens[b * 10 + i]);
    std::vector<double> got(full.size());
    auto put = [&](const Tensor& logits, int64_t from) {
      auto v = logits.to_vector<double>();
      const int64_t t = logits.size(1), V = 50;
      for (int64_t b = 0; b < 2; ++b)
        for (int64_t a = 0; a < t; ++a)
          for (int64_t k = 0; k < V; ++k) got[(b * 10 + from + a) * V + k] = v[(b * t + a) * V + k];
    };
    put(model.forward_cached(from_vector(first, {2, 4}), c2), 0);
    for (int i = 4; i < 10; ++i) {
      put(model.forward_cached(from_vector(std::vector<int32_t>{tokens[i], tokens[10 + i]}, {2, 1}), c2), i);
      if (kind == AttentionKind::ls) CHECK(c2.layers[0].k_local.size(2) <= 4);  // w - 1 keys
    }
    CHECK_MESSAGE(max_abs_diff(got, full) < 1e-10, attention_kind_name(kind));
    CHECK(c2.length() == 10);
  }
}

TEST_CASE("local heads cache only their window, global heads everything") {
  GPT2 model(small(AttentionKind::ls), 1);
  NoGradGuard no_grad;
  KVCache cache = model.make_cache();
  for (int i = 0; i < 20; ++i) model.forward_cached(from_vector(std::vector<int32_t>{i % 50}, {1, 1}), cache);
  CHECK(cache.layers[1].k_local.size(2) == 4);   // 3 local heads, window 5: 4 keys kept
  CHECK(cache.layers[1].k_local.size(1) == 3);
  CHECK(cache.layers[1].k_global.size(2) == 20);  // 1 global head keeps all 20
  CHECK(cache.bytes() > 0);
}

TEST_CASE("the cache refuses to run past the context length") {
  GPT2 model(small(AttentionKind::mhsa), 1);
  NoGradGuard no_grad;
  KVCache cache = model.make_cache();
  std::vector<int32_t> t(24, 1);
  model.forward_cached(from_vector(t, {1, 24}), cache);
  CHECK_THROWS_AS(model.forward_cached(from_vector(std::vector<int32_t>{1}, {1, 1}), cache), ShapeError);
}
