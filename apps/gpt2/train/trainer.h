// The training loop of `gpt2 train`: train(cfg) runs (or resumes) one run.
//
// One optimizer step (trainer.cpp, Trainer::train_step), as docs/training.md traces it:
//   zero_grad; for each of grad_accum micro-batches: the loader's ids and targets ->
//     model.forward -> (loss * loss_scale / grad_accum).backward(), gradients adding up in the
//     parameters; the loss and the attention statistics gathered into the step's scalars on the
//     device (step_scalars.h);
//   then the optimizer: unscale (f16), the gradients' global norm, the clip's factor, and AdamW
//     with the schedule's lr, applied only when the loss and the norm are finite. On one process
//     (the CPU or one GPU) the device takes that decision and nothing is read back; with several
//     ranks or ZeRO-1 the host reads the scalars and decides;
//   at a step that reports (--log-every, a checkpoint, a validation, the end): the pending steps'
//     scalars read in one copy and logged (loss, lr, grad norm, max attention logit per layer and
//     head, tokens/s, MFU, memory); every --ckpt-every steps a checkpoint, every --val-every a
//     validation.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "apps/gpt2/run/max_logit.h"
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
