#include "nn/attention.h"

#include <cmath>

#include "core/factory.h"
#include "ops/arith.h"
#include "ops/dropout.h"
#include "ops/matmul.h"
#include "ops/shape.h"
#include "ops/softmax.h"

namespace keel::nn {

namespace {
double residual_std(const GPT2Config& c) { return c.init_std / std::sqrt(2.0 * static_cast<double>(c.n_layer)); }
}  // namespace

Attention::Attention(const GPT2Config& c, Generator& init, Generator* dropout_gen)
    // Validate before the first member is built, so a bad config reports itself, not a size.
    : c_attn((c.validate(), c.n_embd), 3 * c.n_embd, c.bias, init, c.init_std),
      c_proj(c.n_embd, c.n_embd, c.bias, init, residual_std(c)),
      n_head_(c.n_head),
      head_dim_(c.head_dim()),
      dropout_(c.dropout),
      dropout_gen_(dropout_gen) {
  register_module("c_attn", &c_attn);
  register_module("c_proj", &c_proj);
  if (c.attention == AttentionKind::qk_norm) {
    q_norm = std::make_unique<LayerNorm>(head_dim_, c.bias, c.layer_norm_epsilon);
    k_norm = std::make_unique<LayerNorm>(head_dim_, c.bias, c.layer_norm_epsilon);
    register_module("q_norm", q_norm.get());
    register_module("k_norm", k_norm.get());
  }
  spec_ = c.attention_spec();
  if (dropout_ > 0 && !dropout_gen_)
    throw ConfigError("Attention", "dropout is " + std::to_string(dropout_) + " but no generator was given");
}

// x (B, T, C) -> q, k, v (B, H, T, D)
std::vector<Tensor> Attention::project(const Tensor& x) const { return split_heads(c_attn.forward(x)); }

// c_attn's output (B, T, 3C) -> q, k, v (B, H, T, D)
std::vector<Tensor> Attention::split_heads(const Tensor& qkv_out) const {
  const int64_t B = qkv_out.size(0), T = qkv_out.size(1), C = qkv_out.size(2) / 3;
  std::vector<Tensor> qkv = split(qkv_out, {C, C, C}, -1);  // 3 x (B, T, C)
  for (Tensor& t : qkv) {
    t = reshape(t, {B, T, n_head_, head_dim_});  // (B, T, H, D)
  }
  // LayerNorm over D acts on each head's vector alone, so it can run before the transpose.
  if (q_norm) {
    qkv[0] = q_norm->forward(qkv[0]);
    qkv[1] = k_norm->forward(qkv[1]);
  }
  for (Tensor& t : qkv) t = transpose(t, 1, 2);  // (B, H, T, D)
  return qkv;
}

// x (B, T, C) -> out (B, T, C), max_logit (H), max_range (H)
AttentionOutput Attention::forward(const Tensor& x) const {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2);
  AttentionResult r;
  Tensor y;
  if (q_norm) {  // q and k normalised per head: split, normalise, transpose
    std::vector<Tensor> qkv = project(x);
    r = attention(qkv[0], qkv[1], qkv[2], spec_);
    y = reshape(transpose(r.out, 1, 2), {B, T, C});  // heads side by side again
  } else {  // the heads read and written where the linear layers keep them: no copies
    r = attention_packed(c_attn.forward(x), spec_);
    y = r.out;
  }
  y = c_proj.forward(y);
  if (dropout_ > 0 && training()) y = dropout(y, dropout_, *dropout_gen_, true);
  return {y, r.max_logit, r.max_range};
}

// x (B, T, C) -> (B, H, T, T), the same logits as ops/attention.h spells out, then the softmax
Tensor Attention::probabilities(const Tensor& x) const {
  const int64_t T = x.size(1);
  std::vector<Tensor> qkv = project(x);
  Tensor s = matmul(qkv[0], transpose(qkv[1], 2, 3)) * spec_.resolved_scale(head_dim_);  // (B, H, T, T)
  if (spec_.softcap > 0) s = tanh(s / spec_.softcap) * spec_.softcap;
  // The causal window of each head as an additive mask (H, T, T): -inf never reaches a max.
  std::vector<float> mask(static_cast<size_t>(n_head_ * T * T), -INFINITY);
  for (int64_t h = 0; h < n_head_; ++h)
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = spec_.first_key(h, i); j <= i; ++j) mask[static_cast<size_t>((h * T + i) * T + j)] = 0;
  return softmax(s + from_vector(mask, {n_head_, T, T}, {s.dtype(), s.device()}), -1);
}

// qkv (B, t, 3C), c_attn's output -> (B, t, C)
Tensor Attention::forward_cached_qkv(const Tensor& qkv_out, KVCache& cache, int64_t layer) const {
  const int64_t B = qkv_out.size(0), t = qkv_out.size(1), C = qkv_out.size(2) / 3;
  std::vector<Tensor> qkv = split_heads(qkv_out);
  Tensor y = cached_attention(qkv[0], qkv[1], qkv[2], cache.layers[static_cast<size_t>(layer)], cache, cache.length(),
                              spec_);  // (B, t, H, D)
  return c_proj.forward(reshape(y, {B, t, C}));
}

}  // namespace keel::nn
