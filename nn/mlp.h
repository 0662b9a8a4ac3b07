// The GPT-2 feed-forward block: c_fc (C -> 4C), tanh GELU, c_proj (4C -> C), optional dropout.
#pragma once

#include "nn/config.h"
#include "nn/linear.h"

namespace keel::nn {

class MLP : public Module {
 public:
  // Draws c_fc then c_proj from `init` (c_proj with GPT-2's residual scaling 1/sqrt(2 n_layer)).
  MLP(const GPT2Config& config, Generator& init, Generator* dropout_gen);

  // x (B, T, C) -> (B, T, C)
  Tensor forward(const Tensor& x) const;
  // Whether forward drops out (dropout > 0, in training): a caller that fuses c_fc elsewhere
  // (Block::forward_cached) must then call forward.
  bool drops() const { return dropout_ > 0 && training(); }

  Linear c_fc;
  Linear c_proj;

 private:
  double dropout_;
  Generator* dropout_gen_;
};

}  // namespace keel::nn
