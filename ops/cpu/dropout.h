// The CPU kernels of dropout (ops/dropout.h). ops/cuda/dropout.h declares the very
// same functions for the other device; the front end ops/dropout.cpp picks one by the tensors' device.
// No autograd, no argument checks (the front end's job). Tensors: on the CPU, f32 or f64
// (the CPU computes in these; other dtypes raise DTypeError).
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace keel::cpu {

// mask (N) contiguous <- keep_scale where philox_uniform(key, base, i) > p, else 0: the same
// mask on every device for the same (key, base).
void dropout_mask(Tensor& mask, uint64_t key, uint64_t base, float p, double keep_scale);

}  // namespace keel::cpu
