// The CPU kernels of StepReadback (optim/step_readback.h); optim/cuda/step_readback.h declares
// the very same functions for the other device.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace keel::optim::cpu {

// buf (S) f64, x [] floating contiguous -> buf[slot] += double(x) / divisor
void add_quotient(Tensor& buf, int64_t slot, const Tensor& x, double divisor);
// buf (S) f64, v (N) floating contiguous -> buf[first + i] = nan_max(buf[first + i], double(v[i]))
void merge_max(Tensor& buf, int64_t first, const Tensor& v);

}  // namespace keel::optim::cpu
