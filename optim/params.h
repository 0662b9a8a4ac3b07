// How optim/ receives parameters: (name, tensor) pairs, as nn's Module::named_parameters()
// hands them out. Names matter only for the optimizer's state (checkpoints are keyed by them)
// and for telling which parameters are weight-decayed; the rest of optim takes bare tensors.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace keel::optim {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

inline std::vector<Tensor> tensors_of(const NamedTensors& named) {
  std::vector<Tensor> out;
  out.reserve(named.size());
  for (const auto& [name, t] : named) out.push_back(t);
  return out;
}

}  // namespace keel::optim
