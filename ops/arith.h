// Elementwise arithmetic with broadcasting (NumPy rules: shapes align from the right, a size-1
// or missing dimension stretches), plus scalars. Gradients of a broadcast input are summed
// over the dimensions it was stretched along.
#pragma once

#include "core/tensor.h"
#include "ops/op_kinds.h"

namespace keel {

// a, b: broadcastable shapes, same dtype and device -> broadcast shape.
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);

// x (any) with a scalar -> same shape as x.
Tensor add(const Tensor& x, double s);
Tensor mul(const Tensor& x, double s);
Tensor neg(const Tensor& x);

// Unary math, x (any) -> same shape.
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor square(const Tensor& x);

// The shape a and b broadcast to; ShapeError naming `op` when they do not.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// Sums g over the dimensions along which `shape` was broadcast to g's shape (for backward).
Tensor sum_to_shape(const Tensor& g, const Shape& shape);

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator+(const Tensor& x, double s) { return add(x, s); }
inline Tensor operator-(const Tensor& x, double s) { return add(x, -s); }
inline Tensor operator*(const Tensor& x, double s) { return mul(x, s); }
inline Tensor operator*(double s, const Tensor& x) { return mul(x, s); }
inline Tensor operator/(const Tensor& x, double s) { return mul(x, 1.0 / s); }
inline Tensor operator-(const Tensor& x) { return neg(x); }

}  // namespace keel
