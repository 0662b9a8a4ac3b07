// A pre-LayerNorm GPT-2 block: x = x + attn(ln_1(x)); x = x + mlp(ln_2(x)).
#pragma once

#include "nn/attention.h"
#include "nn/layernorm.h"
#include "nn/mlp.h"
#include "ops/add_layernorm.h"
#include "ops/add_layernorm_linear.h"

namespace keel::nn {

// The residual stream between blocks, handed on unsummed: x = base + delta (base alone when delta
// is undefined). Each block's last step is the add x + mlp(...), and the next thing to read x is
// the next block's ln_1 (or ln_f): handing the two parts over lets that LayerNorm add them in its
// own kernel (ops/add_layernorm.h), so the add costs no launch and no pass over the activation
// of its own. On the CPU add_layernorm is the add then the LayerNorm, bit for bit.
struct Residual {
  Tensor base, delta;
  Tensor sum() const;  // (B, T, C)
};

// tok (B, t, C), pos (t, C) -> the residual stream tok + pos for generation. With one sequence
// pos has tok's shape and goes on as the second part, which layer 0's LayerNorm adds in its own
// kernel; a batch broadcasts it, so the add is done here.
Residual embedded(const Tensor& tok, const Tensor& pos);

// x -> h = x summed, out = ln(h), one op when x comes in two parts
AddLayerNorm normalize(const Residual& x, const LayerNorm& ln);
// x -> h = x summed, out = lin(ln(h)) (gelu'd when asked), one op (ops/add_layernorm_linear.h):
// a decode step's LayerNorm with the linear layer that reads it
AddLayerNormLinear normalize_linear(const Residual& x, const LayerNorm& ln, const Linear& lin, bool gelu = false);

class Block : public Module {
 public:
  Block(const GPT2Config& config, Generator& init, Generator* dropout_gen);

  // x (B, T, C) -> (B, T, C); the statistics (H) of this block's attention are written to
  // *max_logit and *max_range when given.
  Tensor forward(const Tensor& x, Tensor* max_logit = nullptr, Tensor* max_range = nullptr) const;
  // The same on the unsummed stream: GPT2 chains its blocks this way.
  Residual forward(const Residual& x, Tensor* max_logit = nullptr, Tensor* max_range = nullptr) const;
  // Generation through layer `layer` of the KV cache: x (B, t, C) at positions
  // [cache.length(), + t), unsummed as GPT2 chains its blocks -> (B, t, C), unsummed
  Residual forward_cached(const Residual& x, KVCache& cache, int64_t layer) const;

  LayerNorm ln_1;
  Attention attn;
  LayerNorm ln_2;
  MLP mlp;

 private:
  // x, a (B, T, C) -> {x + a, mlp(ln_2(x + a))}, the add and ln_2 as one op
  Residual residual_mlp(const Tensor& x, const Tensor& a) const;
};

}  // namespace keel::nn
