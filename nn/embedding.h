// Embedding: a learned table of rows picked by integer ids (token and position embeddings).
#pragma once

#include "core/random.h"
#include "nn/module.h"

namespace keel::nn {

class Embedding : public Module {
 public:
  // weight (num, dim) ~ N(0, std^2), GPT-2's initialisation for wte and wpe alike (std is
  // GPT2Config::init_std).
  Embedding(int64_t num, int64_t dim, Generator& gen, double std);

  // ids (...) i32/i64 in [0, num) -> (..., dim)
  Tensor forward(const Tensor& ids) const;

  Tensor weight;  // (num, dim)
};

}  // namespace keel::nn
