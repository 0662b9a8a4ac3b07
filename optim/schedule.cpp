#include "optim/schedule.h"

#include <cmath>
#include <numbers>
#include <string>

#include "core/error.h"

namespace keel::optim {

void CosineSchedule::validate() const {
  if (!(lr >= 0) || !std::isfinite(lr))
    throw ConfigError("CosineSchedule", "lr must be a finite number >= 0, got " + std::to_string(lr));
  if (!(min_lr >= 0) || min_lr > lr)
    throw ConfigError("CosineSchedule",
                      "min_lr must lie in [0, lr], got min_lr " + std::to_string(min_lr) + " and lr " + std::to_string(lr),
                      "the paper uses lr 6e-4 and min_lr 6e-5");
  if (warmup < 0 || max_steps < warmup)
    throw ConfigError("CosineSchedule",
                      "need 0 <= warmup <= max_steps, got warmup " + std::to_string(warmup) + " and max_steps " +
                          std::to_string(max_steps));
}

double CosineSchedule::lr_at(int64_t step) const {
  validate();
  if (step < 0) throw ValueError("lr_at", "step must be >= 0, got " + std::to_string(step));
  if (step < warmup) return lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
  if (step >= max_steps) return min_lr;
  double ratio = static_cast<double>(step - warmup) / static_cast<double>(max_steps - warmup);
  double coeff = 0.5 * (1.0 + std::cos(std::numbers::pi * ratio));
  return min_lr + coeff * (lr - min_lr);
}

}  // namespace keel::optim
