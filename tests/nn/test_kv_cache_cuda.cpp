// Decode equals recompute on the CUDA device: the model's prefill (flash attention) and decode
// (ops/cuda/decode_attention.cu) steps against the whole sequence run through the model on the
// CPU, for every attention variant, windows shorter and longer than the text, in f32 within 1e-5.
#include <doctest/doctest.h>

#include "cuda_test.h"
#include "decode_check.h"

using namespace keel;
using namespace keel::nn;

TEST_CASE("CUDA generation: decode equals recompute for every variant, to 1e-5 in f32") {
  KEEL_REQUIRE_CUDA();
  for (int64_t window : {4, 16})  // the text is 10 tokens: window 16 never slides
    for (AttentionKind kind : {AttentionKind::mhsa, AttentionKind::ls, AttentionKind::qk_norm, AttentionKind::softcap}) {
      CAPTURE(std::string(attention_kind_name(kind)));
      CAPTURE(window);
      GPT2Config c = GPT2Config::preset("tiny");
      c.n_layer = 2, c.n_head = 2, c.n_embd = 64, c.block_size = 20, c.vocab_size = 40;  // D = 32
      c.attention = kind, c.ls_local_heads = 1, c.ls_window = window, c.softcap = 2.0;
      GPT2 model(c, 11);
      NoGradGuard no_grad;
      const std::vector<int32_t> tokens = nn::testing::decode_tokens(2, 10, 40);
      const std::vector<double> full = model.forward(from_vector(tokens, {2, 10})).logits.to_vector<double>();
      model.to(Device::cuda(0));
      nn::testing::check_decode_equals_recompute(model, tokens, 2, 10, full, 3, 1e-5);
    }
}
