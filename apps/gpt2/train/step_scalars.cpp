#include "apps/gpt2/train/step_scalars.h"

#include <cmath>

namespace keel::app {

StepResult StepScalars::result(const double* row, bool loss_scaled) const {
  StepResult s;
  s.loss = row[kLoss];
  s.log_z_mean = row[kLogZMean];
  s.log_z_max = row[kLogZMax];
  s.grad_norm = std::sqrt(row[kGradSumSq]);
  s.stats.max_logit = MaxLogit(layers, heads_per_layer);
  s.stats.max_range = MaxLogit(layers, heads_per_layer);
  s.stats.max_logit.merge(std::vector<float>(row + max_logit(), row + max_logit() + heads()));
  s.stats.max_range.merge(std::vector<float>(row + max_range(), row + max_range() + heads()));
  s.finite = std::isfinite(s.grad_norm) && std::isfinite(s.loss);
  s.skipped = !s.finite;
  s.loss_scale = loss_scaled ? row[loss_scale()] : 1.0;
  return s;
}

}  // namespace keel::app
