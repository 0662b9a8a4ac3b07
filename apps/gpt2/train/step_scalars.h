// One training step's scalars: where each sits in the f64 row that the device fills during the
// step (an optim::StepReadback), and how the host turns a row it has read into a StepResult.
//
//   slot                     what                                   written by
//   kGradSumSq               the gradients' sum of squares          the optimizer (optim/clip.h)
//   kLoss                    the step's mean loss                   each micro-batch: += loss / accum
//   kLogZMean                the output softmax's mean log Z        each micro-batch: += mean / accum
//   kLogZMax                 its largest |log Z|                    each micro-batch: nan_max
//   max_logit() ...          max |logit|, one slot per (layer, head) each micro-batch: nan_max
//   max_range() ...          the largest row range, likewise        each micro-batch: nan_max
//   loss_scale()             f16's loss scale after the step        the loss scaler (update_in_step)
//
// Trainer::micro_batch and the optimizer write the slots by these names, and StepScalars::result
// reads them back; nothing else numbers them.
#pragma once

#include <cstdint>
#include <vector>

#include "apps/gpt2/train/step_signals.h"
#include "optim/step_readback.h"

namespace keel::app {

// What one optimizer step left for the log: its loss, norm, statistics, and whether it was applied.
struct StepResult {
  double loss = 0, grad_norm = 0, loss_scale = 1;  // loss_scale: f16's, after the step's update
  double log_z_mean = 0, log_z_max = 0;            // the output softmax's log Z (nn::GPT2Output::log_z)
  bool finite = true, skipped = false;             // skipped: not applied (a NaN or inf)
  StepStats stats;  // the attention statistics, merged over micro-batches and ranks
};

struct StepScalars {
  // The optimizer's slot is the one optim::StepReadback reserves for it.
  enum Slot : int64_t { kGradSumSq = optim::StepReadback::kGradSumSq, kLoss, kLogZMean, kLogZMax, kMaxLogit };

  int64_t layers = 0, heads_per_layer = 0;

  int64_t heads() const { return layers * heads_per_layer; }
  int64_t max_logit() const { return kMaxLogit; }
  int64_t max_range() const { return kMaxLogit + heads(); }
  int64_t loss_scale() const { return kMaxLogit + 2 * heads(); }
  int64_t size() const { return loss_scale() + 1; }

  // row (size() values, as the device left them) -> the step's result, by the rule the device
  // applied (AdamW::step_gated): applied exactly when the loss and the norm are finite.
  // loss_scaled: f16, whose scale is read from the row; otherwise the scale is 1.
  StepResult result(const double* row, bool loss_scaled) const;
  StepResult result(const std::vector<double>& row, bool loss_scaled) const { return result(row.data(), loss_scaled); }
};

}  // namespace keel::app
