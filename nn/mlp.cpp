#include "nn/mlp.h"

#include <cmath>

#include "ops/dropout.h"
#include "ops/mlp.h"

namespace keel::nn {

MLP::MLP(const GPT2Config& c, Generator& init, Generator* dropout_gen)
    : c_fc(c.n_embd, 4 * c.n_embd, c.bias, init, c.init_std),
      c_proj(4 * c.n_embd, c.n_embd, c.bias, init, c.init_std / std::sqrt(2.0 * static_cast<double>(c.n_layer))),
      dropout_(c.dropout),
      dropout_gen_(dropout_gen) {
  register_module("c_fc", &c_fc);
  register_module("c_proj", &c_proj);
  if (dropout_ > 0 && !dropout_gen_)
    throw ConfigError("MLP", "dropout is " + std::to_string(dropout_) + " but no generator was given");
}

// x (B, T, C) -> (B, T, C)
Tensor MLP::forward(const Tensor& x) const {
  // One op: on a GPU the GELU is c_fc's epilogue, and in the backward its derivative is the
  // epilogue of c_proj's input gradient, so the (B, T, 4C) activation is not read and written
  // again by kernels of their own (ops/mlp.h).
  Tensor y = mlp(x, c_fc.weight, c_fc.bias, c_proj.weight, c_proj.bias);
  if (drops()) y = dropout(y, dropout_, *dropout_gen_, true);
  return y;
}

}  // namespace keel::nn
