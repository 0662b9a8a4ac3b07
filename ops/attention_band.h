// Which keys a query may see under a head's window: the one definition the CPU reference kernel
// (ops/cpu/attention.cpp) and the CUDA flash kernels (ops/cuda/attention_tiles.h) share, so the
// two can never disagree about a band.
#pragma once

#include "core/host_device.h"

namespace keel {

// Query i sees keys j with band_start(i, w) <= j <= i. w = 0 is full causal (every key up to
// i); w >= 1 is the last w keys, the query's own included, so a window >= i + 1 reaches key 0
// just like w = 0. Templated on the index type: int64_t on the CPU, int in the CUDA kernels.
template <typename I>
KEEL_HD constexpr I band_start(I i, I w) {
  return (w == 0 || i - w + 1 < 0) ? I(0) : I(i - w + 1);
}

}  // namespace keel
