// MaxLogit: the per-layer, per-head max |attention logit|, the instability signal keel exists
// to show, and the one way to merge it (over batch entries, micro-batches, evaluation batches).
//
// The merge is nan_max (ops/nan_max.h): a model with one NaN weight must report NaN for that
// head and for every head it feeds. |logit| >= 0, so a fresh MaxLogit holds zeros.
// The row logit range (max_range, ops/attention.h) is >= 0 and merges the same way, so it is held
// in a MaxLogit too.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/nan_max.h"

namespace keel::app {

class MaxLogit {
 public:
  MaxLogit() = default;
  // (layers, heads) zeros.
  MaxLogit(int64_t layers, int64_t heads)
      : layers_(layers), heads_(heads), v_(static_cast<size_t>(layers * heads), 0.0f) {}

  int64_t layers() const { return layers_; }
  int64_t heads() const { return heads_; }
  float at(int64_t layer, int64_t head) const { return v_[static_cast<size_t>(layer * heads_ + head)]; }
  const std::vector<float>& values() const { return v_; }  // (layers * heads), layer-major

  // other (layers * heads) layer-major -> this = elementwise merge(this, other). A size
  // mismatch is a programming error of the caller (one model, one shape): it throws.
  void merge(const std::vector<float>& other);

  // The merge over every head (NaN if any head is NaN); 0 when empty.
  double top() const;
  // The index (layer * heads + head) of top(): the first NaN head, else the largest.
  size_t top_index() const;
  // (layers) rows of (heads) values, as metrics records hold them.
  std::vector<std::vector<double>> rows() const;

 private:
  int64_t layers_ = 0, heads_ = 0;
  std::vector<float> v_;
};

}  // namespace keel::app
