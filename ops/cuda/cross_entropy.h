// The CUDA kernels of cross-entropy fused with log-softmax (ops/cross_entropy.h). ops/cpu/cross_entropy.h declares the very
// same functions for the other device; the front end ops/cross_entropy.cpp picks one by the tensors' device.
// No autograd, no argument checks (the front end's job). Tensors: on one CUDA device, f32, bf16
// or f16, computed in f32 (f64 raises DTypeError: it exists for CPU gradient checks).
// Plain C++ (no CUDA headers); a build without CUDA links ops/cuda/no_cuda.cpp instead, whose
// functions raise DeviceError. Work is queued on the device's compute stream unless it says it waits.
#pragma once

#include "core/tensor.h"

namespace keel::cuda {

// logits (N, V) with V >= 1, targets (N) i32/i64, contiguous -> loss [] (f32; f64 for f64 logits); lse (N)
// and the number of non-ignored rows `count` are filled in. A target outside [0, V) that is not
// ignore_index raises IndexError (CUDA checks on the host, so it waits for the device).
Tensor cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t ignore_index, Tensor& lse,
                             int64_t& count);
// logits (N, V), targets (N), lse (N), grad [] (the loss's gradient, on the logits' device)
// -> dlogits (N, V) = (softmax - onehot(target)) * grad / count, zero rows where ignored.
Tensor cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse, int64_t ignore_index,
                              int64_t count, const Tensor& grad);

}  // namespace keel::cuda
