// softmax and log_softmax along one dimension, numerically stable: the row's maximum is
// subtracted before exponentiating, so large logits do not overflow.
#pragma once

#include "core/tensor.h"

namespace keel {

// x (any, at least 1 dim) -> same shape; dim may be negative (counts from the end).
// Backward uses the saved output: dx = y * (dy - sum(dy * y)) along dim.
Tensor softmax(const Tensor& x, int64_t dim = -1);
// log(softmax(x)) without forming softmax first; dx = dy - softmax * sum(dy) along dim.
Tensor log_softmax(const Tensor& x, int64_t dim = -1);

}  // namespace keel
