// GELU in the tanh form GPT-2 uses:
//   gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
#pragma once

#include "core/tensor.h"

namespace keel {

// x (any) -> same shape. Backward recomputes the tanh from the saved input.
Tensor gelu(const Tensor& x);

// CPU kernels (no autograd, no checks; contiguous CPU tensors of one dtype, f32 or f64).
namespace cpu {
// x (N) -> (N)
Tensor gelu_forward(const Tensor& x);
// grad, x (N) -> dx (N) = grad * gelu'(x)
Tensor gelu_backward(const Tensor& grad, const Tensor& x);
}  // namespace cpu

}  // namespace keel
