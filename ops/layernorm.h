// Layer normalisation over the last dimension (GPT-2's LayerNorm):
//   y = (x - mean) * rstd * weight + bias,   rstd = 1 / sqrt(var + eps),
// with the biased variance (divided by C), as PyTorch computes it.
#pragma once

#include "core/tensor.h"

namespace keel {

// x (..., C), weight (C), bias (C) or undefined (no bias) -> (..., C).
// Backward recomputes the normalised x from x and the saved per-row mean and rstd, rather
// than keeping a second activation-sized tensor alive.
Tensor layernorm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);

// CPU kernels (no autograd, no checks; contiguous CPU tensors of one dtype, f32 or f64).
namespace cpu {

// x (N, C), weight (C), bias (C) or undefined -> y (N, C); mean and rstd (N) are filled in.
Tensor layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, Tensor& mean,
                         Tensor& rstd);

// grad (N, C), x (N, C), weight (C), mean, rstd (N) -> dx (N, C), dweight (C), dbias (C); each
// computed only when its need_* flag is set.
void layernorm_backward(const Tensor& grad, const Tensor& x, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd, bool need_x, bool need_weight, bool need_bias, Tensor& dx,
                        Tensor& dweight, Tensor& dbias);

}  // namespace cpu
}  // namespace keel
