// Drawing one token from next-token logits: softmax(logits / temperature) over the top_k
// largest, one Philox uniform from the stream (key, base). On CUDA the draw runs in one kernel
// and only the token id is written, so a sampling decoder reads 8 bytes per token rather than the
// vocabulary's logits. Not differentiable.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace keel {

// The most candidates the CUDA draw keeps (one block selects them one by one, in shared
// memory); a larger top_k, or 0 (the whole vocabulary), draws on the CPU.
constexpr int64_t kMaxDeviceTopK = 1024;

// How many candidates a draw keeps from V logits: 1 at temperature 0 (the argmax), else top_k,
// or all V when top_k is 0. A draw runs on CUDA when this is at most kMaxDeviceTopK.
inline int64_t sample_candidates(int64_t V, double temperature, int64_t top_k) {
  return temperature == 0 ? 1 : top_k > 0 && top_k < V ? top_k : V;
}

// The draw on the host, the reference the CUDA kernel follows step for step: the k largest
// logits, ties to the smaller id, p_i = exp((l_i - l_max) / temperature) in f64 summed in that
// order, and the first i whose running sum reaches u * total. temperature 0: the first largest.
// logits (V) f32 -> an id in [0, V).
int64_t sample_top_k_host(const float* logits, int64_t V, double temperature, int64_t top_k, float u);

// logits (..., V) holding one row (e.g. (1, 1, V)), f32/bf16/f16 -> (1) i64 on logits' device: the id sample_top_k_host draws
// with u = philox_uniform(key, base, 0). On CUDA top_k (or V when it is 0) must be at most
// kMaxDeviceTopK.
Tensor sample_top_k(const Tensor& logits, double temperature, int64_t top_k, uint64_t key, uint64_t base);
// The same draw written into out (1) i64 on logits' device, which a decoder keeps for the whole
// text, so a token costs no allocation.
void sample_top_k_into(const Tensor& logits, double temperature, int64_t top_k, uint64_t key, uint64_t base,
                       Tensor& out);

}  // namespace keel
