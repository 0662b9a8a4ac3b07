#include "nn/linear.h"

#include "core/factory.h"
#include "ops/matmul.h"

namespace keel::nn {

Linear::Linear(int64_t in, int64_t out, bool has_bias, Generator& gen, double std) {
  if (in < 1 || out < 1)
    throw ValueError("Linear", "features must be positive, got in=" + std::to_string(in) + " out=" + std::to_string(out));
  weight = empty({out, in});
  normal_(weight, gen, 0.0, std);
  register_parameter("weight", &weight);
  if (has_bias) {
    bias = zeros({out});
    register_parameter("bias", &bias);
  }
}

Linear::Linear(const Tensor& shared_weight) : weight(shared_weight) { register_parameter("weight", &weight); }

// x (..., in) -> (..., out)
Tensor Linear::forward(const Tensor& x) const { return linear(x, weight, bias); }

}  // namespace keel::nn
