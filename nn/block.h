// A pre-LayerNorm GPT-2 block: x = x + attn(ln_1(x)); x = x + mlp(ln_2(x)).
#pragma once

#include "nn/attention.h"
#include "nn/mlp.h"

namespace keel::nn {

class Block : public Module {
 public:
  Block(const GPT2Config& config, Generator& init, Generator* dropout_gen);

  // x (B, T, C) -> (B, T, C); the statistics (H) of this block's attention are written to
  // *max_logit and *max_range when given.
  Tensor forward(const Tensor& x, Tensor* max_logit = nullptr, Tensor* max_range = nullptr) const;
  // Generation through layer `layer` of the KV cache: x (B, t, C) at positions
  // [cache.length(), + t) -> (B, t, C)
  Tensor forward_cached(const Tensor& x, KVCache& cache, int64_t layer) const;

  LayerNorm ln_1;
  Attention attn;
  LayerNorm ln_2;
  MLP mlp;

 private:
  // x, a (B, T, C) -> x + a + mlp(ln_2(x + a)), the add and ln_2 as one op
  Tensor residual_mlp(const Tensor& x, const Tensor& a) const;
};

}  // namespace keel::nn
