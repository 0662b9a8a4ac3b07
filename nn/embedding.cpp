#include "nn/embedding.h"

#include "core/factory.h"
#include "ops/embedding.h"

namespace keel::nn {

Embedding::Embedding(int64_t num, int64_t dim, Generator& gen, double std) {
  if (num < 1 || dim < 1)
    throw ValueError("Embedding", "sizes must be positive, got num=" + std::to_string(num) + " dim=" + std::to_string(dim));
  weight = empty({num, dim});
  normal_(weight, gen, 0.0, std);
  register_parameter("weight", &weight);
}

// ids (...) -> (..., dim)
Tensor Embedding::forward(const Tensor& ids) const { return embedding(weight, ids); }

}  // namespace keel::nn
