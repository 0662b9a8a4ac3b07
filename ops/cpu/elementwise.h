// Loops for elementwise CPU kernels over strided (possibly broadcast) operands.
// A broadcast operand simply has stride 0 along the stretched dimensions.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace keel::cpu {

// Strides of `t` viewed at the broadcast shape `out` (0 where t is stretched or missing).
Shape broadcast_strides(const Tensor& t, const Shape& out);

// f(out_index, offset_a, offset_b) for every element of `shape` in row-major order. The last
// dimension runs as a plain inner loop, so contiguous and broadcast-row cases vectorise.
template <typename F>
void for_each_pair(const Shape& shape, const Shape& sa, int64_t oa, const Shape& sb, int64_t ob, F&& f) {
  const int64_t nd = static_cast<int64_t>(shape.size());
  int64_t n = numel_of(shape);
  if (n == 0) return;
  if (nd == 0) return f(0, oa, ob);
  const int64_t inner = shape[nd - 1], ia = sa[nd - 1], ib = sb[nd - 1];
  std::vector<int64_t> idx(nd - 1, 0);
  for (int64_t base = 0; base < n; base += inner) {
    for (int64_t j = 0; j < inner; ++j) f(base + j, oa + j * ia, ob + j * ib);
    for (int64_t d = nd - 2; d >= 0; --d) {  // odometer over the outer dimensions
      if (++idx[d] < shape[d]) {
        oa += sa[d], ob += sb[d];
        break;
      }
      oa -= sa[d] * (shape[d] - 1), ob -= sb[d] * (shape[d] - 1);
      idx[d] = 0;
    }
  }
}

}  // namespace keel::cpu
