// CPU kernel of add_layernorm: keel's add kernel, then its layernorm kernel on the sum. The CPU
// is the reference, and CPU training must not move by a bit for the fusion, so it is exactly the
// two unfused ops' arithmetic; only the GPU gains from doing both in one pass.
#include "ops/cpu/add_layernorm.h"

#include "core/factory.h"
#include "ops/cpu/arith.h"
#include "ops/cpu/layernorm.h"

namespace keel::cpu {

// x, y (N, C), weight (C), bias (C) or undefined -> out (N, C); h (N, C), mean, rstd (N)
Tensor add_layernorm_forward(const Tensor& x, const Tensor& y, const Tensor& weight, const Tensor& bias, double eps,
                             Tensor& h, Tensor& mean, Tensor& rstd) {
  h = empty(x.shape(), {x.dtype()});
  binary(BinaryOp::add, x, y, h);
  return layernorm_forward(h, weight, bias, eps, mean, rstd);
}

}  // namespace keel::cpu
