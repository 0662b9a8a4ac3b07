#include "apps/gpt2/run/max_logit.h"

#include <string>

#include "core/error.h"

namespace keel::app {

void MaxLogit::merge(const std::vector<float>& other) {
  if (other.size() != v_.size())
    throw ShapeError("MaxLogit::merge", "got " + std::to_string(other.size()) + " values for " +
                                            std::to_string(layers_) + " layers x " + std::to_string(heads_) + " heads");
  for (size_t i = 0; i < v_.size(); ++i) v_[i] = static_cast<float>(nan_max(v_[i], other[i]));
}

size_t MaxLogit::top_index() const {
  size_t at = 0;
  for (size_t i = 1; i < v_.size() && !std::isnan(v_[at]); ++i)
    if (std::isnan(v_[i]) || v_[i] > v_[at]) at = i;
  return at;
}

double MaxLogit::top() const { return v_.empty() ? 0.0 : v_[top_index()]; }

std::vector<std::vector<double>> MaxLogit::rows() const {
  std::vector<std::vector<double>> out(static_cast<size_t>(layers_), std::vector<double>(static_cast<size_t>(heads_)));
  for (int64_t l = 0; l < layers_; ++l)
    for (int64_t h = 0; h < heads_; ++h) out[l][h] = at(l, h);
  return out;
}

}  // namespace keel::app
