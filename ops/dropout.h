// Inverted dropout: zero each element with probability p and scale the rest by 1/(1-p), so
// evaluation (training=false) is the identity. The mask comes from the Philox stream of
// `gen` (core/random.h), element i keeping iff uniform_i >= p, so a CUDA kernel can draw the
// very same mask.
#pragma once

#include "core/random.h"
#include "core/tensor.h"

namespace keel {

// x (any) -> same shape. p in [0, 1).
Tensor dropout(const Tensor& x, double p, Generator& gen, bool training = true);

}  // namespace keel
