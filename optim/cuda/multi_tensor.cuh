// The one rule of optim's multi-tensor launches (grad_math.cu's sums and scale, adamw.cu's
// step): a launch's table of tensors goes by value as a kernel argument, since a host-to-device
// copy of it would wait for the device, and a kernel's arguments are limited to 4 KiB, so a
// launch holds at most kTableSize tensors. Tensor j of a table owns blocks
// [first_block[j], first_block[j + 1]) of the grid.
#pragma once

#include <algorithm>

namespace keel::optim::cuda {

constexpr int kTableSize = 48;

// first_block (count + 1) -> the tensor of the table that owns block b (0 <= b < first_block[count]).
// A linear walk: at most kTableSize steps, once per block.
__device__ inline int tensor_of_block(const int* first_block, int b) {
  int j = 0;
  while (b >= first_block[j + 1]) ++j;
  return j;
}

// k items -> f(lo, count) for each run [lo, lo + count) of at most kTableSize, in order.
template <typename F>
void for_each_table(int k, F&& f) {
  for (int lo = 0; lo < k; lo += kTableSize) f(lo, std::min(kTableSize, k - lo));
}

}  // namespace keel::optim::cuda
