// The residual add of a pre-LayerNorm transformer block and the LayerNorm that follows it, as one
// op: h = x + y (the residual stream, which the block adds to again) and out = layernorm(h).
//
// Why one op: on a GPU one kernel reads x and y once and writes h and out (ops/cuda/add_layernorm.cu),
// where the add wrote h and a second launch read it back to normalise it; that is one launch and
// one read of the (..., C) activation fewer per use. The backward is fused the same way: the
// gradient reaching h from its other uses is added to layernorm's dx as that is written, instead
// of the autograd engine summing the two in passes of their own. On the CPU the op is exactly
// x + y then layernorm, bit for bit in output and gradients, and it is the reference the CUDA
// path is checked against.
#pragma once

#include "core/tensor.h"

namespace keel {

struct AddLayerNorm {
  Tensor h;    // (..., C) x + y
  Tensor out;  // (..., C) layernorm(h, weight, bias, eps)
};

// x, y (..., C) of one shape, dtype and device, weight (C), bias (C) or undefined -> h, out
// (..., C). Both outputs are differentiable and may be used in any way (either alone, both, each
// several times); the backward keeps h, weight and the per-row mean and rstd, as layernorm's.
// When only h leads to the loss, weight and bias get a zero gradient (rather than none).
AddLayerNorm add_layernorm(const Tensor& x, const Tensor& y, const Tensor& weight, const Tensor& bias,
                           double eps = 1e-5);

}  // namespace keel
