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
}  // namespace keel
