// The CUDA kernel of decode_attention (ops/decode_attention.h). ops/cpu/decode_attention.h
// declares the very same function for the other device. No argument checks (the front end's job).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace keel::cuda {

// q (B, H, t, D), k, v (B, H, S, D) contiguous, one dtype; window (H) as in AttentionSpec; the
// queries are positions [position, position + t), the key of position j sits in slot j % S;
// scale resolved; softcap 0 = none. CUDA needs D in {32, 64, 128} (ShapeError otherwise).
// -> out (B, H, t, D), overwritten
void decode_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<int64_t>& window,
                              int64_t position, double scale, double softcap, Tensor& out);

}  // namespace keel::cuda
