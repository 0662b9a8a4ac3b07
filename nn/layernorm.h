// LayerNorm over the last dimension with a learned gain (weight, starts at 1) and optionally a
// learned shift (bias, starts at 0): the paper's configuration has no biases anywhere.
#pragma once

#include "nn/module.h"

namespace keel::nn {

class LayerNorm : public Module {
 public:
  LayerNorm(int64_t dim, bool bias, double eps);  // eps: the model's (GPT2Config::layer_norm_epsilon)

  // x (..., C) -> (..., C)
  Tensor forward(const Tensor& x) const;

  Tensor weight;  // (C)
  Tensor bias;    // (C) or undefined
  double eps;
};

}  // namespace keel::nn
