// Reductions: sum, mean and max, over everything or over one dimension.
#pragma once

#include "core/tensor.h"
#include "ops/op_kinds.h"

namespace keel {

Tensor sum(const Tensor& x);   // (any) -> []
Tensor mean(const Tensor& x);  // (any) -> []
// x (..., n, ...) reduced over `dim` -> (..., ...) or (..., 1, ...) with keepdim.
Tensor sum(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor mean(const Tensor& x, int64_t dim, bool keepdim = false);
// The largest value along dim; the gradient goes to the first position holding it. NaN
// propagates, as in PyTorch: a slice holding a NaN has max NaN, and the gradient goes to its
// first NaN.
Tensor max(const Tensor& x, int64_t dim, bool keepdim = false);
// The index of the largest value along dim (i64, not differentiable): the first maximum, or
// the first NaN when the slice holds one (PyTorch's rule).
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);

}  // namespace keel
