// CPU kernels behind ops/reduce.h.
#pragma once

#include "core/tensor.h"

namespace keel::cpu {

enum class Reduce { sum, max };

// x (outer, n, inner) contiguous -> out (outer, inner); argmax (outer, inner) i64 for max.
void reduce_dim(Reduce kind, const Tensor& x, int64_t outer, int64_t n, int64_t inner, Tensor& out,
                Tensor* argmax = nullptr);
// g (outer, inner), idx (outer, inner) -> gx (outer, n, inner), zero except at the argmax.
void scatter_max_grad(const Tensor& g, const Tensor& idx, int64_t outer, int64_t n, int64_t inner, Tensor& gx);

}  // namespace keel::cpu
