// Shape operations. reshape/view, transpose/permute, slice/narrow, squeeze/unsqueeze return
// views that share storage with their input (reshape copies only when no view can express the
// result). concat and split build new tensors / views. All are differentiable.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace keel {

// One entry of `shape` may be -1 (inferred).
Tensor reshape(const Tensor& x, Shape shape);
Tensor view(const Tensor& x, Shape shape);  // like reshape, but ShapeError if a copy would be needed
Tensor flatten(const Tensor& x);            // -> [numel]
Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1);
Tensor permute(const Tensor& x, const std::vector<int64_t>& dims);
Tensor unsqueeze(const Tensor& x, int64_t dim);
Tensor squeeze(const Tensor& x, int64_t dim);  // dim must have size 1
// Elements start, start+step, ... < end along dim (negative start/end count from the end;
// both are clamped to [0, size] as in Python).
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);
// Tensors with equal shapes except along dim -> joined along dim.
Tensor concat(const std::vector<Tensor>& xs, int64_t dim);
// x split along dim into pieces of the given sizes (must add up to x.size(dim)).
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim);
// x split along dim into pieces of `size` (the last may be smaller).
std::vector<Tensor> split(const Tensor& x, int64_t size, int64_t dim);

}  // namespace keel
