// The CUDA kernels of dropout (ops/dropout.h). ops/cpu/dropout.h declares the very
// same functions for the other device; the front end ops/dropout.cpp picks one by the tensors' device.
// No autograd, no argument checks (the front end's job). Tensors: on one CUDA device, f32, bf16
// or f16, computed in f32 (f64 raises DTypeError: it exists for CPU gradient checks).
// Plain C++ (no CUDA headers); a build without CUDA links ops/cuda/no_cuda.cpp instead, whose
// functions raise DeviceError. Work is queued on the device's compute stream unless it says it waits.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace keel::cuda {

// mask (N) contiguous <- keep_scale where philox_uniform(key, base, i) > p, else 0: the same
// mask on every device for the same (key, base).
void dropout_mask(Tensor& mask, uint64_t key, uint64_t base, float p, double keep_scale);

}  // namespace keel::cuda
