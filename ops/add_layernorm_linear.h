// A decode step's residual add, LayerNorm and the linear layer that reads the normalised rows,
// as one op: h = x + y (the residual stream) and out = linear(layernorm(h)), with GELU for the
// MLP's c_fc. It is add_layernorm (or layernorm, without y) followed by linear (or
// linear_gelu), and on the CPU, with a gradient, or with more rows than a decode step's batch,
// it is exactly that: those ops, the same bits.
//
// Why one op: generating a token runs each layer on one row per sequence, so its matrix products
// are matrix-vector ones, a few microseconds each, and a GPU spends as long launching a kernel as
// running it. On CUDA, for up to 8 rows and no gradient, one kernel does the add, the LayerNorm
// and the product (ops/cuda/add_layernorm_linear.cu): per layer two launches fewer (ln_1 with
// c_attn, ln_2 with c_fc), and one more for ln_f with the lm_head. The product is keel's own then,
// not cuBLAS's: f32 accumulation in another order, h and layernorm(h) rounded to the dtype as
// add_layernorm rounds them, the output rounded once.
#pragma once

#include "core/tensor.h"

namespace keel {

struct AddLayerNormLinear {
  Tensor h;    // (..., C) x + y, or x itself without y
  Tensor out;  // (..., N) linear(layernorm(h)), gelu'd when asked
};

// x (..., C), y like x or undefined, ln_weight (C), ln_bias (C) or undefined, weight (N, C), bias
// (N) or undefined -> h (..., C), out (..., N). Differentiable (through add_layernorm and linear
// when a gradient is wanted).
AddLayerNormLinear add_layernorm_linear(const Tensor& x, const Tensor& y, const Tensor& ln_weight,
                                        const Tensor& ln_bias, double eps, const Tensor& weight, const Tensor& bias,
                                        bool gelu = false);

}  // namespace keel
