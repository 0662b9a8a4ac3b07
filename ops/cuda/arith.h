// The CUDA kernels of elementwise arithmetic (ops/arith.h). ops/cpu/arith.h declares the very
// same functions for the other device; the front end ops/arith.cpp picks one by the tensors' device.
// No autograd, no argument checks (the front end's job). Tensors: on one CUDA device, f32, bf16
// or f16, computed in f32 (f64 raises DTypeError: it exists for CPU gradient checks).
// Plain C++ (no CUDA headers); a build without CUDA links ops/cuda/no_cuda.cpp instead, whose
// functions raise DeviceError. Work is queued on the device's compute stream unless it says it waits.
#pragma once

#include "core/tensor.h"
#include "ops/op_kinds.h"

namespace keel::cuda {

// a, b broadcastable to out's shape S (NumPy rules), any strides -> out (S) contiguous = a op b.
void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out);
// x (S) any strides -> out (S) contiguous = op(x); `s` is the scalar of add_scalar / mul_scalar.
void unary(UnaryOp op, const Tensor& x, Tensor& out, double s = 0.0);
// g, x (S) any strides -> (S) contiguous = g * (x > 0): relu's backward.
Tensor relu_backward(const Tensor& g, const Tensor& x);

}  // namespace keel::cuda
