// The CPU kernels of elementwise arithmetic (ops/arith.h). ops/cuda/arith.h declares the very
// same functions for the other device; the front end ops/arith.cpp picks one by the tensors' device.
// No autograd, no argument checks (the front end's job). Tensors: on the CPU, f32 or f64
// (the CPU computes in these; other dtypes raise DTypeError).
#pragma once

#include "core/tensor.h"
#include "ops/op_kinds.h"

namespace keel::cpu {

// a, b broadcastable to out's shape S (NumPy rules), any strides -> out (S) contiguous = a op b.
void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out);
// x (S) any strides -> out (S) contiguous = op(x); `s` is the scalar of add_scalar / mul_scalar.
void unary(UnaryOp op, const Tensor& x, Tensor& out, double s = 0.0);
// g, x (S) any strides -> (S) contiguous = g * (x > 0): relu's backward.
Tensor relu_backward(const Tensor& g, const Tensor& x);

}  // namespace keel::cpu
