// GPT-2's feed-forward block as one op: linear(linear_gelu(x, fc_weight, fc_bias), proj_weight,
// proj_bias), c_fc (C -> 4C), the tanh GELU and c_proj (4C -> C).
//
// Why one op: its backward can fuse across the two layers. The gradient that reaches the GELU's
// input is (dy @ proj_weight) * gelu'(pre); as two ops, c_proj's backward wrote dy @ proj_weight
// (B, T, 4C) and linear_gelu's backward read it back with the pre-activation, wrote d(pre) and
// read that again for the bias gradient. On a GPU in bf16/f16 the product and the GELU's
// derivative are one cublasLtMatmul (epilogue DGELU, the saved pre-activation its input), as
// llm.c does: one kernel launch and two reads and a write of the (B, T, 4C) activation fewer per
// layer and step. The forward is linear_gelu's (the GELU in the first product's epilogue) then
// linear's. On the CPU, and in f32 on a GPU, the op is exactly linear_gelu then linear, bit for
// bit, forward and backward (the same kernels on the same values): the reference.
#pragma once

#include "core/tensor.h"

namespace keel {

// x (..., C), fc_weight (Ch, C), fc_bias (Ch) or undefined, proj_weight (Co, Ch), proj_bias (Co) or
// undefined -> (..., Co) = linear(gelu(x @ fc_weight^T + fc_bias), proj_weight, proj_bias).
// Differentiable in all five; the backward keeps the pre-activation and the GELU's output
// (..., Ch) and the operands the two linear layers' backwards keep, nothing more.
Tensor mlp(const Tensor& x, const Tensor& fc_weight, const Tensor& fc_bias, const Tensor& proj_weight,
           const Tensor& proj_bias);

}  // namespace keel
