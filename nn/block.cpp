#include "nn/block.h"

#include "ops/add_layernorm.h"
#include "ops/arith.h"
#include "ops/shape.h"

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

Tensor Residual::sum() const { return delta.defined() ? base + delta : base; }

AddLayerNorm normalize(const Residual& x, const LayerNorm& ln) {
  if (!x.delta.defined()) return {x.base, ln.forward(x.base)};
  return add_layernorm(x.base, x.delta, ln.weight, ln.bias, ln.eps);
}

Residual embedded(const Tensor& tok, const Tensor& pos) {
  if (tok.size(0) == 1) return {tok, reshape(pos, tok.shape())};
  return {tok + pos, {}};
}

AddLayerNormLinear normalize_linear(const Residual& x, const LayerNorm& ln, const Linear& lin, bool gelu) {
  return add_layernorm_linear(x.base, x.delta, ln.weight, ln.bias, ln.eps, lin.weight, lin.bias, gelu);
}

// The attention's residual add and ln_2 are one op (ops/add_layernorm.h): on a GPU one kernel
// writes the residual stream h and ln_2(h), where the add wrote h and ln_2 read it back. The MLP's
// add is left to whoever reads the stream next (Residual): the next block's ln_1, or ln_f.
// x (B, T, C), a (B, T, C) the attention's output -> {h, mlp(ln_2(h))}, h = x + a
Residual Block::residual_mlp(const Tensor& x, const Tensor& a) const {
  AddLayerNorm r = add_layernorm(x, a, ln_2.weight, ln_2.bias, ln_2.eps);
  return {r.h, mlp.forward(r.out)};
}

// x (B, T, C) in two parts -> (B, T, C) in two parts
Residual Block::forward(const Residual& x, Tensor* max_logit, Tensor* max_range) const {
  const AddLayerNorm in = normalize(x, ln_1);
  AttentionOutput a = attn.forward(in.out);
  if (max_logit) *max_logit = a.max_logit;
  if (max_range) *max_range = a.max_range;
  return residual_mlp(in.h, a.out);
}

// x (B, T, C) -> (B, T, C)
Tensor Block::forward(const Tensor& x, Tensor* max_logit, Tensor* max_range) const {
  return forward(Residual{x, {}}, max_logit, max_range).sum();
}

// x (B, t, C) in two parts -> (B, t, C) in two parts, attending through the KV cache
// Each LayerNorm together with the product that reads it (ln_1 and c_attn, ln_2 and c_fc with
// its GELU): on a GPU one launch each for a decode step's few rows (ops/add_layernorm_linear.h).
Residual Block::forward_cached(const Residual& x, KVCache& cache, int64_t layer) const {
  const AddLayerNormLinear in = normalize_linear(x, ln_1, attn.c_attn);
  const Tensor a = attn.forward_cached_qkv(in.out, cache, layer);
  if (mlp.drops()) return residual_mlp(in.h, a);
  const AddLayerNormLinear m = normalize_linear(Residual{in.h, a}, ln_2, mlp.c_fc, true);
  return {m.h, mlp.c_proj.forward(m.out)};
}

}  // namespace keel::nn
