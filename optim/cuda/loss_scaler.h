// The CUDA kernels of a loss scaler whose state lives on the GPU (optim/loss_scaler.h,
// LossScaler::keep_on_device). Plain C++ (no CUDA headers); a build without CUDA links
// optim/cuda/no_cuda.cpp instead, whose functions raise DeviceError.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace keel::optim {
struct LossScalerOptions;
}

namespace keel::optim::cuda {

// state (3) f64 on the GPU: [scale, growth tracker, skipped steps].
// x [] f32 -> out [] f32 = x * float(state[0] * factor): the bits of mul(x, scale * factor)
// (ops/cuda/arith.cu multiplies in f32 by the f32 rounding of the f64 scalar).
void scale_by_state(const Tensor& x, const Tensor& state, double factor, Tensor& out);

// LossScaler::update on the device, with found_inf = sqrt(scalars[sumsq_slot]) is not finite
// (the step's gradient norm, after the unscale); then scalars[scale_slot] = the new scale. One
// thread, the host's f64 arithmetic.
void update_state(Tensor& state, const LossScalerOptions& opt, Tensor& scalars, int64_t sumsq_slot,
                  int64_t scale_slot);

}  // namespace keel::optim::cuda
