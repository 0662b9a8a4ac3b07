#include "nn/block.h"

#include "ops/add_layernorm.h"
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

// The attention's residual add and ln_2 are one op (ops/add_layernorm.h): on a GPU one kernel
// writes the residual stream h and ln_2(h), where the add wrote h and ln_2 read it back. ln_1
// stays a layernorm of its own: the add before it is the previous block's last, or the
// embeddings', and fusing it would reach across blocks.
// x (B, T, C), a (B, T, C) the attention's output -> (B, T, C)
Tensor Block::residual_mlp(const Tensor& x, const Tensor& a) const {
  AddLayerNorm r = add_layernorm(x, a, ln_2.weight, ln_2.bias, ln_2.eps);
  return r.h + mlp.forward(r.out);
}

// x (B, T, C) -> (B, T, C)
Tensor Block::forward(const Tensor& x, Tensor* max_logit, Tensor* max_range) const {
  AttentionOutput a = attn.forward(ln_1.forward(x));
  if (max_logit) *max_logit = a.max_logit;
  if (max_range) *max_range = a.max_range;
  return residual_mlp(x, a.out);
}

// x (B, t, C) -> (B, t, C), attending through the KV cache
Tensor Block::forward_cached(const Tensor& x, KVCache& cache, int64_t layer) const {
  return residual_mlp(x, attn.forward_cached(ln_1.forward(x), cache, layer));
}

}  // namespace keel::nn
