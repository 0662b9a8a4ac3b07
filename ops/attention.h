// Causal scaled dot-product attention with a per-head window: one op for MHSA and LS-attention.
//
// For every batch b and head h, query i attends to the keys j its head allows:
//   window[h] == 0:  0 <= j <= i             (full causal)
//   window[h] == w:  i - w < j <= i          (w keys, the query's own included; w >= T is full causal)
// out_i = sum_j softmax_j(scale * q_i . k_j) v_j. MHSA is every window 0; LS-attention (arXiv
// 2505.15548) is a few local heads of window w first, then global heads of window 0.
//
// Alongside the output the op returns two per-head statistics of the logits, over every batch and
// every allowed (i, j); masked pairs are not counted, because they never reach the softmax:
//   max_logit  the largest |logit|: the classic instability signal;
//   max_range  the largest row range, max_j s_ij - min_j s_ij over the keys row i may see. A
//              softmax ignores a constant added to a whole row, so max_logit also moves when a
//              row merely shifts; the range moves only when the attention itself gets sharper
//              (the measure of `gpt2 lab dof`), so it is the shift-free signal.
// Both propagate NaN: one NaN logit makes its head's statistics NaN, so a diverged head shows
// (their one merge rule: ops/nan_max.h).
//
// Optional logit soft-capping (a stabilisation baseline, as in Gemma 2): with softcap = c > 0
// the logit scale * q_i . k_j becomes c * tanh(scale * q_i . k_j / c) before the softmax, and
// the statistics report these capped logits (what the softmax sees: max_logit never above c,
// max_range never above 2c).
//
// The CPU kernel is the reference the CUDA flash kernel is tested against. It works on blocks of
// query rows against only the keys their bands reach, so a local head costs O(T*W*D) as in the flash
// kernel, and it saves the row log-sum-exp (B, H, T) for backward, which recomputes the
// probabilities from q, k and lse instead of keeping a T x T matrix.
#pragma once


#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "ops/attention_band.h"

namespace keel {

// What a layer's attention is: the softmax scale, each head's window and the soft cap. It is the
// one owner of the window rule: every mask, the KV cache, the attention map and the FLOP count
// ask it (first_key, sees, keys_seen), and it answers with band_start (ops/attention_band.h),
// which the kernels call too.
struct AttentionSpec {
  double scale = 0;             // softmax scale; 0 means 1/sqrt(D)
  std::vector<int64_t> window;  // one per head: 0 = full causal, w >= 1 = the last w keys
  double softcap = 0;           // c > 0: logits -> c * tanh(logits / c); 0 = no capping

  // All H heads full causal.
  static AttentionSpec mhsa(int64_t H);
  // Heads [0, local_heads) get window w (>= 1), the rest full causal: local heads first, as in the paper.
  static AttentionSpec ls(int64_t H, int64_t local_heads, int64_t w);

  int64_t heads() const { return static_cast<int64_t>(window.size()); }
  // The first key query i of head h sees; it sees keys [first_key(h, i), i].
  int64_t first_key(int64_t h, int64_t i) const { return band_start(i, window[h]); }
  // Whether query i of head h sees key j.
  bool sees(int64_t h, int64_t i, int64_t j) const { return j <= i && j >= first_key(h, i); }
  // How many keys query i of head h sees: what its row of attention costs.
  int64_t keys_seen(int64_t h, int64_t i) const { return i + 1 - first_key(h, i); }
  // A local head has a window; it never needs more than its last `window` keys.
  bool is_local(int64_t h) const { return window[h] > 0; }
  // How many heads are local. ls() puts them first; the KV cache requires that (ConfigError).
  int64_t local_heads() const;
  // The widest local window (0 without local heads): the keys a local head's cache keeps.
  int64_t max_local_window() const;
  // The softmax scale for head dim D: `scale`, or 1/sqrt(D) when it is 0 (1 for D = 0).
  double resolved_scale(int64_t D) const;
  // Heads [first, first + n) as a spec of their own, same scale and cap.
  AttentionSpec head_range(int64_t first, int64_t n) const;
};

struct AttentionResult {
  Tensor out;        // (B, H, T, D) ((B, T, C) from attention_packed), q's dtype and device; differentiable
  Tensor max_logit;  // (H) f32, on q's device; a statistic, never differentiable
  Tensor max_range;  // (H) f32, on q's device; a statistic, never differentiable
};

// q, k, v: (B, H, T, D), one floating dtype, one device; spec.window.size() == H.
// Errors: ShapeError (not 4-D, shapes differ, window count != H), ValueError (negative window,
// non-finite scale), DTypeError (non-floating or mixed dtypes; bf16/f16 on the CPU), DeviceError
// (mixed devices).
AttentionResult attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionSpec& spec);

// The same attention on the heads where a transformer's projections keep them: qkv (B, T, 3C),
// q, k and v side by side as one linear layer writes them, head h of each in columns
// [h D, h D + D) of its third (D = C / H, H = spec.heads()) -> out (B, T, C), the heads side by
// side again, the output projection's input; the statistics as attention()'s. Bit for bit what
// attention() gives on the split, transposed heads, and what reshaping its output back gives
// (and the gradient, one (B, T, 3C) tensor, what the split's gradients put together give). On a
// GPU the kernels read q, k, v and dout and write out and the gradient in place through strided
// views, where the split-and-transpose path copies every (B, T, C) tensor into (B, H, T, D)
// first: four copies in the forward and four in the backward per layer, plus the sum of the
// three gradients into one.
// Errors: attention()'s, and ShapeError when qkv is not (B, T, 3C) with C a multiple of H.
AttentionResult attention_packed(const Tensor& qkv, const AttentionSpec& spec);

}  // namespace keel
