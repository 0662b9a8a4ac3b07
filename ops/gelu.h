// GELU in the tanh form GPT-2 uses:
//   gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
#pragma once

#include "core/tensor.h"

namespace keel {

// x (any) -> same shape. Backward recomputes the tanh from the saved input.
Tensor gelu(const Tensor& x);

}  // namespace keel
