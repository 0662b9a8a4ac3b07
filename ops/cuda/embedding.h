// The CUDA kernels of the embedding lookup (ops/embedding.h). ops/cpu/embedding.h declares the very
// same functions for the other device; the front end ops/embedding.cpp picks one by the tensors' device.
// No autograd, no argument checks (the front end's job). Tensors: on one CUDA device, f32, bf16
// or f16, computed in f32 (f64 raises DTypeError: it exists for CPU gradient checks).
// Plain C++ (no CUDA headers); a build without CUDA links ops/cuda/no_cuda.cpp instead, whose
// functions raise DeviceError. Work is queued on the device's compute stream unless it says it waits.
#pragma once

#include "core/tensor.h"

namespace keel::cuda {

// weight (V, C) contiguous, ids (N) contiguous on weight's device -> out (N, C): row copies. An id
// outside [0, V) is reported through core/cuda/device_check.h (raised at the next sync); its row is zeros.
void embedding_forward(const Tensor& weight, const Tensor& ids, Tensor& out);
// g (N, C) contiguous on the device, ids (N) contiguous on gw's device -> gw (V, C) += the rows
// of g, summed per id in position order (deterministic; no wait on the host). Ids outside the
// table (the forward reported them) are left out.
void embedding_backward(const Tensor& g, const Tensor& ids, Tensor& gw);

}  // namespace keel::cuda
