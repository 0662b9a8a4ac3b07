// The CPU kernels of attention (ops/attention.h). ops/cuda/attention.h declares the very
// same functions for the other device; the front end ops/attention.cpp picks one by the tensors' device.
// No autograd, no argument checks (the front end's job). Tensors: on the CPU, f32 or f64
// (the CPU computes in these; other dtypes raise DTypeError).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace keel::cpu {

// Every tensor already allocated, one device; the (B, H, T, D) ones may be strided views
// (attention_packed's heads, read and written in place; outputs must have adjacent D elements), lse
// packed; window has one entry per head
// (0 = full causal, w >= 1 = the last w keys); scale resolved (never 0 for D > 0); softcap 0 = none.
// CUDA also needs D a multiple of 8 up to 256 and H <= 128 (ShapeError otherwise), and keeps lse in f32.
// q, k, v (B, H, T, D) -> out (B, H, T, D), lse (B, H, T), max_logit (H) f32 (max |logit|),
// max_range (H) f32 (max over rows of max - min logit of the row's allowed keys), all overwritten
void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<int64_t>& window,
                       double scale, double softcap, Tensor& out, Tensor& lse, Tensor& max_logit,
                       Tensor& max_range);
// q, k, v, out, dout (B, H, T, D), lse (B, H, T) -> dq, dk, dv (B, H, T, D), all overwritten
void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                        const Tensor& dout, const std::vector<int64_t>& window, double scale, double softcap,
                        Tensor& dq, Tensor& dk, Tensor& dv);

}  // namespace keel::cpu
