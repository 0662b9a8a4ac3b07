// The CUDA kernels of softmax and log_softmax (ops/softmax.h). ops/cpu/softmax.h declares the very
// same functions for the other device; the front end ops/softmax.cpp picks one by the tensors' device.
// No autograd, no argument checks (the front end's job). Tensors: on one CUDA device, f32, bf16
// or f16, computed in f32 (f64 raises DTypeError: it exists for CPU gradient checks).
// Plain C++ (no CUDA headers); a build without CUDA links ops/cuda/no_cuda.cpp instead, whose
// functions raise DeviceError. Work is queued on the device's compute stream unless it says it waits.
#pragma once

#include "core/tensor.h"

namespace keel::cuda {

// A contiguous tensor is (O, n, I) around any dim of size n: element (o, j, i) sits at
// (o * n + j) * I + i, so each of the O * I rows is read with stride I.
// x (O, n, I) contiguous, dim the index of n -> y, the same shape; log selects log_softmax.
Tensor softmax_forward(const Tensor& x, int64_t dim, bool log);
// y (the forward's output), grad (same shape), contiguous -> dx (same shape)
Tensor softmax_backward(const Tensor& y, const Tensor& grad, int64_t dim, bool log);

}  // namespace keel::cuda
