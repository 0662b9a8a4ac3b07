// Copies between layouts, dtypes and devices: the machinery behind contiguous(), to(), clone().
#pragma once

#include "core/tensor.h"

namespace keel {

// dst <- src elementwise, converting dtype. Same shape; any strides; any devices.
void copy_(Tensor& dst, const Tensor& src);

// For CPU kernels: calls f(flat_output_index, src_element_offset) over a strided layout in
// row-major order. Used by strided copies and by ops that read non-contiguous inputs.
template <typename F>
void for_each_offset(const Shape& shape, const Shape& strides, int64_t offset, F&& f) {
  int64_t n = numel_of(shape);
  if (n == 0) return;
  const int64_t nd = static_cast<int64_t>(shape.size());
  std::vector<int64_t> idx(nd, 0);
  int64_t off = offset;
  for (int64_t i = 0; i < n; ++i) {
    f(i, off);
    for (int64_t d = nd - 1; d >= 0; --d) {  // odometer increment
      if (++idx[d] < shape[d]) {
        off += strides[d];
        break;
      }
      off -= strides[d] * (shape[d] - 1);
      idx[d] = 0;
    }
  }
}

}  // namespace keel
