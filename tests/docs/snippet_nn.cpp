// docs/nn.md, "GPT-2": build the paper's model, run a forward with targets, backpropagate.
#include <doctest/doctest.h>

#include "core/factory.h"
#include "nn/gpt2.h"

using namespace keel;

TEST_CASE("docs/nn.md: the GPT-2 example") {
  Generator g(7);
  std::vector<int32_t> tokens(2 * 16);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((i * 7919) % 10000);
  Tensor ids = from_vector(tokens, {2, 16});
  Tensor targets = from_vector(tokens, {2, 16});
  // snippet-begin
  nn::GPT2Config cfg = nn::GPT2Config::preset("paper");   // or "gpt2-124m", "tiny"
  cfg.vocab_size = 10000;                                  // every field is overridable
  nn::GPT2 model(cfg, /*seed=*/1337);                      // f32 on the CPU; model.to(...) to move
  nn::GPT2Output out = model.forward(ids, targets);        // ids, targets: (B, T) i32/i64
  out.loss.backward();                                     // out.logits (B, T, V), out.max_logit (L, H) f32 CPU
  // snippet-end
  CHECK(out.logits.shape() == Shape{2, 16, 10000});
  CHECK(out.max_logit.shape() == Shape{cfg.n_layer, cfg.n_head});
  CHECK(model.named_parameters().front().second.grad().defined());
}
