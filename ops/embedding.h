// Embedding lookup: rows of a table picked by integer ids.
#pragma once

#include "core/tensor.h"

namespace keel {

// weight (V, C) floating, ids (...) i32/i64 in [0, V) -> (..., C).
// Backward scatter-adds the output gradient into the rows of weight that were used.
Tensor embedding(const Tensor& weight, const Tensor& ids);

}  // namespace keel
