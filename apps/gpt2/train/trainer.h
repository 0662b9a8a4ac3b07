// The training loop of `gpt2 train`.
//
// One optimizer step, as a student would trace it (trainer.cpp, train_step):
//   for each of grad_accum micro-batches: ids/targets from the loader -> model.forward ->
//     (loss * loss_scale / grad_accum).backward(), gradients adding up in the parameters
//     (with several ranks, the last micro-batch's backward starts the gradient all-reduce);
//   the loss and the attention statistics of each micro-batch gathered on the device;
//   unscale (f16), global-norm clip (its norm read from the device together with the loss and
//     statistics: one host wait per step), a NaN/inf check, AdamW with the schedule's lr (a step
//     with a NaN/inf is not applied: f16 backs off its loss scale and goes on, f32/bf16 stop
//     or skip as --on-nonfinite says);
//   log loss, lr, grad norm, max attention logit per layer and head, tokens/s, MFU, memory;
//   every --ckpt-every steps a checkpoint, then every --val-every steps a validation.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "apps/gpt2/run/max_logit.h"
#include "apps/gpt2/train/setup.h"
#include "apps/gpt2/train/train_config.h"
#include "core/device.h"
#include "core/dist/comm.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "nn/gpt2.h"

namespace keel::app {

struct TrainResult {
  int64_t steps = 0;          // the step the run reached
  double final_loss = 0;      // last training loss
  double val_loss = 0, val_perplexity = 0;
  bool interrupted = false;   // SIGINT/SIGTERM/SIGUSR1: checkpointed, resumable
  bool already_finished = false;  // --resume of a finished run: nothing was done or changed
  int rank = 0, world = 1;    // this process in a data-parallel run
};

// Runs (or with cfg.resume continues) a training run. Resuming a run that already reached
// cfg.max_steps changes nothing and returns already_finished. ConfigError/IoError for bad input;
// ValueError ("training diverged") when a NaN/inf appears in f32/bf16 and cfg.on_nonfinite is
// "stop".
TrainResult train(const TrainConfig& cfg);

}  // namespace keel::app
