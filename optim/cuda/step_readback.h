// The CUDA kernels of StepReadback (optim/step_readback.h); optim/cpu/step_readback.h declares
// the very same functions for the other device. Plain C++ (no CUDA headers); a build without
// CUDA links optim/cuda/no_cuda.cpp instead, whose functions raise DeviceError.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace keel::optim::cuda {

// buf (S) f64, x [] f32 | f64 | bf16 | f16 contiguous, both on one GPU -> buf[slot] += double(x) / divisor
void add_quotient(Tensor& buf, int64_t slot, const Tensor& x, double divisor);
// buf (S) f64, v (N) f32 | f64 | bf16 | f16 contiguous, both on one GPU ->
// buf[first + i] = nan_max(buf[first + i], double(v[i]))
void merge_max(Tensor& buf, int64_t first, const Tensor& v);

}  // namespace keel::optim::cuda
