// The CUDA kernels of reductions over one dimension (ops/reduce.h). ops/cpu/reduce.h declares the very
// same functions for the other device; the front end ops/reduce.cpp picks one by the tensors' device.
// No autograd, no argument checks (the front end's job). Tensors: on one CUDA device, f32, bf16
// or f16, computed in f32 (f64 raises DTypeError: it exists for CPU gradient checks).
// Plain C++ (no CUDA headers); a build without CUDA links ops/cuda/no_cuda.cpp instead, whose
// functions raise DeviceError. Work is queued on the device's compute stream unless it says it waits.
#pragma once

#include "core/tensor.h"
#include "ops/op_kinds.h"

namespace keel::cuda {

// x (outer, n, inner) contiguous -> out (outer, inner) in x's dtype; for max also the argmax
// (outer, inner) i64. As in PyTorch, a NaN beats every number (the max of a row with a NaN is
// NaN, its argmax the first NaN); otherwise the first maximum wins. Sums accumulate in f64 on
// the CPU, f32 on CUDA.
void reduce_dim(Reduce kind, const Tensor& x, int64_t outer, int64_t n, int64_t inner, Tensor& out,
                Tensor* argmax = nullptr);
// g (outer, inner), idx (outer, inner) i64 -> gx (outer, n, inner) = g at the argmax, else 0.
void scatter_max_grad(const Tensor& g, const Tensor& idx, int64_t outer, int64_t n, int64_t inner, Tensor& gx);

}  // namespace keel::cuda
