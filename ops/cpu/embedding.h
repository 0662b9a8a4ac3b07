// CPU kernels behind ops/embedding.h.
#pragma once

#include "core/tensor.h"

namespace keel::cpu {

// weight (V, C), ids (N) in [0, V) -> out (N, C): row copies.
void embedding_forward(const Tensor& weight, const Tensor& ids, Tensor& out);
// g (N, C), ids (N) -> gw (V, C) += g rows (several ids may hit one row).
void embedding_backward(const Tensor& g, const Tensor& ids, Tensor& gw);

}  // namespace keel::cpu
