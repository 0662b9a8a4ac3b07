// The CUDA kernel of ops/sample.h's draw. Plain C++ (no CUDA headers); a build without CUDA links
// ops/cuda/no_cuda.cpp instead, whose functions raise DeviceError. No argument checks (the front
// end's job). Queued on the device's compute stream.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace keel::cuda {

// logits (V) contiguous f32/bf16/f16, 1 <= k <= kMaxDeviceTopK -> out (1) i64: the token that
// sample_top_k_host draws from the k largest with u = philox uniform (key, base, 0); temperature
// 0 takes the largest (the smaller id on a tie).
void sample_top_k(const Tensor& logits, int64_t V, double temperature, int64_t k, uint64_t key, uint64_t base,
                  Tensor& out);

}  // namespace keel::cuda
