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

// CPU kernels (no autograd, no checks; contiguous CPU tensors of one dtype, f32 or f64).
// A contiguous tensor is (O, n, I) around any dim of size n: element (o, j, i) sits at
// (o * n + j) * I + i, so each of the O * I rows is read with stride I.
namespace cpu {
// x (..., n, ...) with dim the index of n -> y, the same shape; log selects log_softmax.
Tensor softmax_forward(const Tensor& x, int64_t dim, bool log);
// y (the forward's output), grad (same shape) -> dx.
Tensor softmax_backward(const Tensor& y, const Tensor& grad, int64_t dim, bool log);
}  // namespace cpu

}  // namespace keel
