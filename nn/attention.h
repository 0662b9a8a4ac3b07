// Causal self-attention of a GPT-2 block, in the variants the config selects:
//   mhsa     every head full causal (GPT-2)
//   ls       LS-attention (arXiv 2505.15548): heads [0, n_local) see only their last w keys,
//            the rest are global; local heads first, as in the paper
//   qk_norm  q and k LayerNorm'ed per head over D before the dot product (learned gain (D), and
//            a shift when config.bias): a stabilisation baseline
//   softcap  logits -> c * tanh(logits / c) before the softmax (Gemma 2): the other baseline
// All four are one call of keel::attention with a different AttentionSpec, so the CUDA kernel
// serves them all.
#pragma once

#include <memory>

#include "nn/config.h"
#include "nn/kv_cache.h"
#include "nn/layernorm.h"
#include "nn/linear.h"
#include "ops/attention.h"

namespace keel::nn {

struct AttentionOutput {
  Tensor out;        // (B, T, C)
  Tensor max_logit;  // (H) f32 on the input's device: the largest |pre-softmax logit| per head
  Tensor max_range;  // (H) f32 likewise: the largest max - min of one row's logits (ops/attention.h)
};

class Attention : public Module {
 public:
  // Draws c_attn then c_proj from `init` (c_proj with GPT-2's residual scaling 1/sqrt(2 n_layer)).
  // `dropout_gen` (may be null when config.dropout is 0) drives the output dropout.
  Attention(const GPT2Config& config, Generator& init, Generator* dropout_gen);

  // x (B, T, C) -> out (B, T, C), max_logit (H), max_range (H)
  AttentionOutput forward(const Tensor& x) const;
  // Generation: qkv (B, t, 3C), c_attn's output for the tokens at positions [cache.length(), + t)
  // (which Block::forward_cached computes fused with the LayerNorm before it,
  // ops/add_layernorm_linear.h); their keys and values join layer `layer` of the cache, and they
  // attend to everything cached before them. -> (B, t, C)
  Tensor forward_cached_qkv(const Tensor& qkv, KVCache& cache, int64_t layer) const;

  // x (B, T, C) -> (B, H, T, T): the attention probabilities forward() uses, materialised (zero
  // where the head may not look). For inspection (attention maps), not for training: it costs T^2.
  Tensor probabilities(const Tensor& x) const;

  const AttentionSpec& spec() const { return spec_; }

  Linear c_attn;                     // C -> 3C: q, k, v side by side, as GPT-2 stores them
  Linear c_proj;                     // C -> C
  std::unique_ptr<LayerNorm> q_norm;  // (D), only for qk_norm
  std::unique_ptr<LayerNorm> k_norm;

 private:
  int64_t n_head_, head_dim_;
  double dropout_;
  Generator* dropout_gen_;
  AttentionSpec spec_;  // windows, scale and cap: what every path of this module asks

  // x (B, T, C) -> q, k, v (B, H, T, D), q and k normalised for qk_norm
  std::vector<Tensor> project(const Tensor& x) const;
  // c_attn's output (B, T, 3C) -> the same
  std::vector<Tensor> split_heads(const Tensor& qkv) const;
};

}  // namespace keel::nn
