// Linear: y = x W^T + b with W (out, in), exactly PyTorch's nn.Linear layout. GPT-2's own
// checkpoints store these matrices transposed (Conv1D, (in, out)); nn/hf.cpp converts at the file.
#pragma once

#include "core/random.h"
#include "nn/module.h"

namespace keel::nn {

class Linear : public Module {
 public:
  // weight ~ N(0, std^2), bias zero (GPT-2's initialisation; std is GPT2Config::init_std).
  Linear(int64_t in, int64_t out, bool bias, Generator& gen, double std);
  // A bias-free layer whose weight is an existing parameter (weight tying): no new tensor.
  explicit Linear(const Tensor& shared_weight);

  // x (..., in) -> (..., out)
  Tensor forward(const Tensor& x) const;

  int64_t in_features() const { return weight.size(1); }
  int64_t out_features() const { return weight.size(0); }

  Tensor weight;  // (out, in)
  Tensor bias;    // (out) or undefined
};

}  // namespace keel::nn
