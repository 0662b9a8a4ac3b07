// Generation through the KV cache gives the same logits as the full forward pass, for every
// attention variant and windows shorter and longer than the text, while local heads keep only
// their window in a ring and global heads every key.
#include <doctest/doctest.h>

#include "decode_check.h"

using namespace keel;
using namespace keel::nn;
using keel::nn::testing::check_decode_equals_recompute;
using keel::nn::testing::decode_tokens;

namespace {
GPT2Config small(AttentionKind kind, int64_t window = 5) {
  GPT2Config c = GPT2Config::preset("tiny");
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 32;
  c.block_size = 24;
  c.vocab_size = 50;
  c.attention = kind;
  c.ls_local_heads = 3;
  c.ls_window = window;
  c.softcap = 2.0;  // small, so the cap changes the logits
  return c;
}

constexpr AttentionKind kKinds[] = {AttentionKind::mhsa, AttentionKind::ls, AttentionKind::qk_norm,
                                    AttentionKind::softcap};
}  // namespace

TEST_CASE("decode equals recompute in f64: every variant, to 1e-10") {
  for (AttentionKind kind : kKinds) {
    CAPTURE(attention_kind_name(kind));
    GPT2 model(small(kind), 3);
    model.to(DType::f64);  // f64 so the two orders of summation agree to 1e-12
    NoGradGuard no_grad;
    const std::vector<int32_t> tokens = decode_tokens(2, 14, 50);
    const std::vector<double> full = model.forward(from_vector(tokens, {2, 14})).logits.to_vector<double>();
    check_decode_equals_recompute(model, tokens, 2, 14, full, 4, 1e-10);
  }
}

TEST_CASE("decode equals recompute in f32: every variant, windows shorter and longer than the text, 1e-5") {
  for (int64_t window : {5, 20})  // the text is 14 tokens: window 20 never slides
    for (AttentionKind kind : kKinds) {
      CAPTURE(std::string(attention_kind_name(kind)));
      CAPTURE(window);
      GPT2 model(small(kind, window), 5);
      NoGradGuard no_grad;
      const std::vector<int32_t> tokens = decode_tokens(2, 14, 50);
      const std::vector<double> full = model.forward(from_vector(tokens, {2, 14})).logits.to_vector<double>();
      check_decode_equals_recompute(model, tokens, 2, 14, full, 3, 1e-5);
    }
}

TEST_CASE("local heads cache only their window in a ring, global heads everything") {
  GPT2 model(small(AttentionKind::ls), 1);
  NoGradGuard no_grad;
  KVCache cache = model.make_cache();
  model.forward_cached(from_vector(std::vector<int32_t>{1, 2, 3}, {1, 3}), cache);
  CHECK(cache.layers[1].k_local.size(2) == 5);   // 3 local heads, window 5: a ring of 5 slots
  CHECK(cache.layers[1].k_local.size(1) == 3);
  CHECK(cache.layers[1].k_global.size(2) == 3);  // grown to what the prompt needs...
  for (int i = 0; i < 17; ++i) model.forward_cached(from_vector(std::vector<int32_t>{i % 50}, {1, 1}), cache);
  CHECK(cache.layers[1].k_local.size(2) == 5);
  CHECK(cache.layers[1].k_global.size(1) == 1);   // 1 global head keeps all 20 positions
  CHECK(cache.layers[1].k_global.size(2) == 24);  // ... by doubling, capped at the context length
  // 2 layers x (k, v) x (3 heads x 5 + 1 head x 24 slots) x D 8 x 4 bytes
  CHECK(cache.bytes() == 2 * 2 * (3 * 5 + 24) * 8 * 4);

  KVCache reserved = model.make_cache(20);  // a caller that knows the length allocates it once
  model.forward_cached(from_vector(std::vector<int32_t>{1, 2, 3}, {1, 3}), reserved);
  CHECK(reserved.layers[0].k_global.size(2) == 20);
  CHECK(model.make_cache(100).capacity() == 24);  // never beyond the context
}

TEST_CASE("a cleared cache starts a new text, of any batch size") {
  GPT2 model(small(AttentionKind::ls), 2);
  NoGradGuard no_grad;
  KVCache cache = model.make_cache();
  const Tensor one = model.forward_cached(from_vector(std::vector<int32_t>{4, 5, 6}, {1, 3}), cache);
  cache.clear();
  model.forward_cached(from_vector(std::vector<int32_t>{1, 2, 3, 4, 5, 6}, {2, 3}), cache);
  CHECK(cache.layers[0].k_local.size(0) == 2);
  cache.clear();
  CHECK(cache.bytes() == 0);
  CHECK(model.forward_cached(from_vector(std::vector<int32_t>{4, 5, 6}, {1, 3}), cache).to_vector<float>() ==
        one.to_vector<float>());
}

TEST_CASE("the cache refuses to run past the context length, and empty steps") {
  GPT2 model(small(AttentionKind::mhsa), 1);
  NoGradGuard no_grad;
  KVCache cache = model.make_cache();
  std::vector<int32_t> t(24, 1);
  model.forward_cached(from_vector(t, {1, 24}), cache);
  CHECK_THROWS_AS(model.forward_cached(from_vector(std::vector<int32_t>{1}, {1, 1}), cache), ShapeError);
  CHECK_THROWS_AS(model.forward_cached(zeros({1, 0}, {DType::i32}), cache), ShapeError);
}

TEST_CASE("fill_random gives the cache a real text's slots, and decoding goes on from it") {
  GPT2 model(small(AttentionKind::ls), 4);
  NoGradGuard no_grad;
  KVCache real = model.make_cache(), filled = model.make_cache();
  model.forward_cached(from_vector(decode_tokens(2, 9, 50), {2, 9}), real);
  Generator gen(1);
  fill_random(filled, 2, 9, model.h[0]->attn.spec(), model.config().head_dim(), DType::f32, Device::cpu(), gen);
  CHECK(filled.length() == 9);
  CHECK(filled.bytes() == real.bytes());
  CHECK(filled.layers[1].k_local.shape() == real.layers[1].k_local.shape());
  CHECK(filled.layers[1].k_global.shape() == real.layers[1].k_global.shape());
  const Tensor logits = model.forward_cached(from_vector(std::vector<int32_t>{1, 2}, {2, 1}), filled);
  for (float x : logits.to_vector<float>()) CHECK(std::isfinite(x));
  CHECK_THROWS_AS(fill_random(filled, 2, 3, model.h[0]->attn.spec(), 8, DType::f32, Device::cpu(), gen), ValueError);
}
