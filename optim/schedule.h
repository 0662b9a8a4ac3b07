// The learning-rate schedule of nanoGPT / llm.c: linear warmup, then cosine decay to a floor.
//
//   step < warmup:            lr * (step + 1) / warmup
//   warmup <= step < max:     min_lr + (lr - min_lr) * (1 + cos(pi * (step - warmup) / (max - warmup))) / 2
//   step >= max_steps:        min_lr
//
// Steps count from 0, so step 0 already trains with lr / warmup (not 0, which would waste a step).
#pragma once

#include <cstdint>

#include "optim/defaults.h"

namespace keel::optim {

struct CosineSchedule {
  double lr = kDefaultLr;          // peak, reached at step `warmup`
  double min_lr = kDefaultMinLr;   // floor, from max_steps on
  int64_t warmup = kPaperWarmupSteps;
  int64_t max_steps = kPaperMaxSteps;

  // ConfigError unless 0 <= min_lr <= lr, 0 <= warmup <= max_steps.
  void validate() const;
  // The learning rate for `step` (>= 0; ValueError otherwise).
  double lr_at(int64_t step) const;
};

}  // namespace keel::optim
