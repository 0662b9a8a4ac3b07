// Named tensors: (name, tensor) pairs in a fixed order. A model's parameters and state dict
// (nn::Module), an optimizer's parameters and state (optim::AdamW, LossScaler) and the contents
// of a safetensors file all take this one shape, so they pass between layers without copies.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace keel {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// The tensors alone, in the same order (handles: they share storage with `named`).
inline std::vector<Tensor> tensors_of(const NamedTensors& named) {
  std::vector<Tensor> out;
  out.reserve(named.size());
  for (const auto& [name, t] : named) out.push_back(t);
  return out;
}

}  // namespace keel
