// The CPU kernels of reductions over one dimension (ops/reduce.h). ops/cuda/reduce.h declares the very
// same functions for the other device; the front end ops/reduce.cpp picks one by the tensors' device.
// No autograd, no argument checks (the front end's job). Tensors: on the CPU, f32 or f64
// (the CPU computes in these; other dtypes raise DTypeError).
#pragma once

#include "core/tensor.h"
#include "ops/op_kinds.h"

namespace keel::cpu {

// x (outer, n, inner) contiguous -> out (outer, inner) in x's dtype; for max also the argmax
// (outer, inner) i64. As in PyTorch, a NaN beats every number (the max of a row with a NaN is
// NaN, its argmax the first NaN); otherwise the first maximum wins. Sums accumulate in f64 on
// the CPU, f32 on CUDA.
void reduce_dim(Reduce kind, const Tensor& x, int64_t outer, int64_t n, int64_t inner, Tensor& out,
                Tensor* argmax = nullptr);
// g (outer, inner), idx (outer, inner) i64 -> gx (outer, n, inner) = g at the argmax, else 0.
void scatter_max_grad(const Tensor& g, const Tensor& idx, int64_t outer, int64_t n, int64_t inner, Tensor& gx);

}  // namespace keel::cpu
