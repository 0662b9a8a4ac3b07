// The CPU kernel of decode_attention and decode_attention_cached (ops/decode_attention.h).
// ops/cuda/decode_attention.h declares the very same function for the other device. No argument
// checks (the front end's job).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "ops/decode_attention.h"

namespace keel::cpu {

// q (B, H, t, D) contiguous, the queries of positions [position, position + t). The cache of
// head h: cache.k_local, v_local (B, Hl, S0, D) for h < Hl, cache.k_global, v_global
// (B, H - Hl, S1, D) for the rest (Hl = 0 when the local group is undefined), contiguous; the key
// of position j sits in slot j % S of the head's group. k_new, v_new (B, H, 1, D) contiguous, or
// undefined: when defined (t = 1) they are first written into slot position % S of each head's
// group, and the query sees them there. One dtype throughout; window (H) as in AttentionSpec;
// scale resolved; softcap 0 = none. CUDA needs D a multiple of 8 up to 256 and H <= 128
// (ShapeError).
// -> out (B, H, t, D), overwritten; at t = 1 that is the memory of (B, 1, H, D)
void decode_attention_forward(const Tensor& q, const Tensor& k_new, const Tensor& v_new, const DecodeCache& cache,
                              const std::vector<int64_t>& window, int64_t position, double scale, double softcap,
                              Tensor& out);

}  // namespace keel::cpu
