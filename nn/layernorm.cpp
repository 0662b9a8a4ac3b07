#include "nn/layernorm.h"

#include "core/factory.h"
#include "ops/layernorm.h"

namespace keel::nn {

LayerNorm::LayerNorm(int64_t dim, bool has_bias, double eps_) : eps(eps_) {
  if (dim < 1) throw ValueError("LayerNorm", "dim must be positive, got " + std::to_string(dim));
  weight = ones({dim});
  register_parameter("weight", &weight);
  if (has_bias) {
    bias = zeros({dim});
    register_parameter("bias", &bias);
  }
}

// x (..., C) -> (..., C)
Tensor LayerNorm::forward(const Tensor& x) const { return layernorm(x, weight, bias, eps); }

}  // namespace keel::nn
