#include "nn/block.h"

#include "ops/arith.h"

namespace keel::nn {

Block::Block(const GPT2Config& c, Generator& init, Generator* dropout_gen)
    : ln_1(c.n_embd, c.bias, c.layer_norm_epsilon),
      attn(c, init, dropout_gen),
      ln_2(c.n_embd, c.bias, c.layer_norm_epsilon),
      mlp(c, init, dropout_gen) {
  register_module("ln_1", &ln_1);
  register_module("attn", &attn);
  register_module("ln_2", &ln_2);
  register_module("mlp", &mlp);
}

// x (B, T, C) -> (B, T, C)
Tensor Block::forward(const Tensor& x, Tensor* max_logit, Tensor* max_range) const {
  AttentionOutput a = attn.forward(ln_1.forward(x));
  if (max_logit) *max_logit = a.max_logit;
  if (max_range) *max_range = a.max_range;
  Tensor h = x + a.out;
  return h + mlp.forward(ln_2.forward(h));
}

// x (B, t, C) -> (B, t, C), attending through the KV cache
Tensor Block::forward_cached(const Tensor& x, KVCache& cache, int64_t layer) const {
  Tensor h = x + attn.forward_cached(ln_1.forward(x), cache, layer);
  return h + mlp.forward(ln_2.forward(h));
}

}  // namespace keel::nn
