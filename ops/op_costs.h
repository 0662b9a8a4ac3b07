// What each op costs, from its shapes: the FLOPs and bytes the profiler (core/profiler.h)
// reports and predicts GPU times from. All the formulas live here, one rule in one place.
//
// Conventions (the tests hand-compute against these):
// - bytes: every tensor an op must read plus every tensor it writes, once each, in its own
//   dtype; no cache reuse, no re-reads. A memory-bound kernel cannot move less.
// - FLOPs: a matrix product (..., M, K) x (K, N) is 2 M N K per batch; attention counts the
//   (query, key) pairs its causal windows allow, 4 D per pair forward (QK^T and PV) and 10 D
//   backward (QK^T recomputed, dV, dP, dQ, dK: FlashAttention's accounting). Element-wise ops
//   count a fixed number per element, named below (a convention: they are memory-bound, their
//   FLOPs matter little).
// Two rules live in core because core does that work: a copy (core/copy.cpp: read src, write
// dst) and the engine's gradient accumulation (core/autograd.cpp: read both, write one).
#pragma once

#include <cstdint>
#include <vector>

#include "core/profiler.h"
#include "core/tensor.h"

namespace keel::op_costs {

using profiler::Cost;

// FLOPs per element of the element-wise ops (per output element; per input row element for
// the row-wise ones).
inline constexpr double kLayerNormFwd = 8, kLayerNormBwd = 12, kGeluFwd = 10, kGeluBwd = 16,
                        kSoftmaxFwd = 5, kSoftmaxBwd = 4, kCrossEntropyFwd = 4, kCrossEntropyBwd = 3;

// Bytes of a tensor of this shape and dtype.
double bytes_of(const Shape& shape, DType dtype);
double bytes_of(const Tensor& t);

Cost matmul(const Tensor& a, const Tensor& b);
Cost matmul_backward(const Shape& grad, const Shape& a, const Shape& b, DType dtype, bool need_a, bool need_b);
// x (..., K), weight (N, K), bias (N) or undefined
Cost linear(const Tensor& x, const Tensor& weight, const Tensor& bias);
// grad (..., N); K the in-features; dx, dweight, dbias as asked
Cost linear_backward(const Tensor& grad, int64_t K, bool dx, bool dw, bool db);
// linear then GELU as one op: linear's product and bias, kGeluFwd FLOPs per output, and the
// (..., N) output written once; `pre`: the pre-activation is kept for the backward (written too).
Cost linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias, bool pre);
// grad (..., N): d(pre) = grad gelu'(pre) (gelu_backward's cost), then linear_backward's on it
Cost linear_gelu_backward(const Tensor& grad, int64_t K, bool dx, bool dw, bool db);
// ops/mlp.h: linear_gelu then linear; the backward with the GELU's derivative in c_proj's dx
// product (read of the pre-activation), as on a GPU in bf16/f16. H hidden, C input width.
Cost mlp(const Tensor& x, const Tensor& fc_weight, const Tensor& fc_bias, const Tensor& proj_weight,
         const Tensor& proj_bias, bool pre);
Cost mlp_backward(const Tensor& grad, int64_t H, int64_t C, bool dx, bool dfc_w, bool dfc_b, bool dproj_w,
                  bool dproj_b);
// (query, key) pairs one head of window w (0 = full causal) allows over T queries.
double attention_pairs(int64_t T, int64_t w);
// q (B, H, T, D); lse_dtype is the log-sum-exp's (f32 on CUDA)
Cost attention(const Tensor& q, const std::vector<int64_t>& window, DType lse_dtype);
Cost attention_backward(const Tensor& q, const std::vector<int64_t>& window, DType lse_dtype);
// Decode attention: q (B, H, t, D), the queries at positions position .. position + t - 1 of a
// cache; query j sees min(j + 1, w) keys (all j + 1 for w = 0). 4 D FLOPs per pair, as the
// forward; bytes: each seen key's k and v read, q read and the output written, and with
// `writes_kv` the new tokens' k and v written into the cache.
Cost decode_attention(const Tensor& q, const std::vector<int64_t>& window, int64_t position, bool writes_kv);
// x (N, C), mean and rstd (N) in stats_dtype
Cost layernorm(const Tensor& x, bool bias, DType stats_dtype);
Cost layernorm_backward(const Tensor& x, DType stats_dtype, bool dx, bool dw, bool db);
// x + y then layernorm as one op, x and y (N, C): 1 + kLayerNormFwd FLOPs per element; x and
// y read, h and the output written, once each, with layernorm's weight, bias and statistics.
Cost add_layernorm(const Tensor& x, bool bias, DType stats_dtype);
// ops/add_layernorm_linear.h's kernel: x (..., C) [+ y, h written] normalised, times weight (N, C)
// [+ bias] [GELU]; the normalised rows never leave the chip
Cost add_layernorm_linear(const Tensor& x, bool residual, bool ln_bias, const Tensor& weight, const Tensor& bias,
                          bool gelu);
// h (N, C): layernorm_backward's cost on h, plus, with `residual`, the gradient of h from its
// other uses read and added into dx (one FLOP per element).
Cost add_layernorm_backward(const Tensor& h, DType stats_dtype, bool dx, bool dw, bool db, bool residual);
Cost gelu(const Tensor& x);
Cost gelu_backward(const Tensor& x);
Cost softmax(const Tensor& x);
Cost softmax_backward(const Tensor& y);
// logits (N, V), targets (N)
// fused: the forward writes the gradient too (ops/cross_entropy.h's expected_grad), and the
// backward only checks it
Cost cross_entropy(const Tensor& logits, const Tensor& targets, DType lse_dtype, bool fused = false);
Cost cross_entropy_backward(const Tensor& logits, const Tensor& targets, DType lse_dtype, DType grad_dtype,
                            bool fused = false);
// ids (...), weight (V, C): reads the rows it gathers, writes (..., C)
Cost embedding(const Tensor& ids, const Tensor& weight);
// grad (..., C) into a zeroed (V, C) table
Cost embedding_backward(const Tensor& grad, const Tensor& ids, const Shape& weight);
// An element-wise op: reads `inputs`, writes one output of `out` elements, `per_element` FLOPs each.
Cost elementwise(const std::vector<const Tensor*>& inputs, const Shape& out, DType dtype, double per_element);
// A reduction of x to `out`: one FLOP per input element.
Cost reduction(const Tensor& x, const Shape& out);
// AdamW over n parameters: reads param, grad, m, v (f32 masters when `master`); writes param,
// m, v (and the low-precision copy); 12 FLOPs per parameter.
Cost adamw(double n, DType param_dtype, DType grad_dtype, bool master);

}  // namespace keel::op_costs
