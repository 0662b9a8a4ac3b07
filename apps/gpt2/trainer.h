// The training loop of `gpt2 train`, and the pieces `eval` and `compare` share with it.
//
// One optimizer step, as a student would trace it (trainer.cpp, train_step):
//   for each of grad_accum micro-batches: ids/targets from the loader -> model.forward ->
//     (loss * loss_scale / grad_accum).backward(), gradients adding up in the parameters;
//   unscale (f16), global-norm clip, a NaN/inf check, AdamW with the schedule's lr;
//   log loss, lr, grad norm, max attention logit per layer and head, tokens/s, MFU, memory.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "apps/gpt2/train_config.h"
#include "core/comm.h"
#include "core/device.h"
#include "core/max_logit.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "nn/gpt2.h"

namespace keel::app {

// "auto" -> cuda:0 when a GPU is there, else cpu.
Device resolve_device(const std::string& name);
DType parse_dtype(const std::string& name);

// The model a TrainConfig describes for a dataset with `vocab_size` tokens.
nn::GPT2Config model_config(const TrainConfig& cfg, uint32_t vocab_size);

// Training FLOPs per token (forward + backward = 3 x forward): every matmul, plus attention
// counted only over the keys each head's window lets a query see.
double train_flops_per_token(const nn::GPT2Config& m, int64_t seq_len);
// Dense peak FLOP/s of the device for the dtype, 0 when unknown (MFU is then not reported).
double peak_flops(Device device, DType dtype);
// The same from the CUDA device name (cudaDeviceProp::name): H100 SXM and H200 989 TFLOP/s
// bf16/f16 (67 f32), H100 PCIe 756 (51), H100/H200 NVL 835 (60), A100 312 (19.5). An unknown
// GPU, a MIG slice or f64 gives 0: no MFU rather than a wrong one.
double peak_flops_of(const std::string& device_name, DType dtype);

// ids (B, T) and targets (B, T) of a loader batch, on the device. The loader marks padding
// with -1; cross_entropy's ignore index is -100.
std::pair<Tensor, Tensor> batch_tensors(const data::Batch& b, Device device);

struct EvalResult {
  double loss = 0, perplexity = 0;
  int64_t tokens = 0;
  MaxLogit max_logit;  // (L, H), merged over the batches (NaN wins)
};
// Mean next-token loss over (up to max_batches, 0 = all) batches of the split. With a
// communicator of several ranks, each rank evaluates its share of those batches' windows and
// the result (the same on every rank) is that of one rank evaluating them all.
EvalResult evaluate(nn::GPT2& model, std::shared_ptr<const data::TokenSplit> split, int64_t batch_size,
                    int64_t seq_len, int64_t max_batches, Device device, Communicator* comm = nullptr);

struct TrainResult {
  int64_t steps = 0;          // the step the run reached
  double final_loss = 0;      // last training loss
  double val_loss = 0, val_perplexity = 0;
  bool interrupted = false;   // SIGINT/SIGTERM/SIGUSR1: checkpointed, resumable
  int rank = 0, world = 1;    // this process in a data-parallel run
};

// Runs (or with cfg.resume continues) a training run. ConfigError/IoError for bad input;
// TrainingDiverged (a ValueError) when a NaN/inf appears and cfg.on_nonfinite is "stop".
TrainResult train(const TrainConfig& cfg);

}  // namespace keel::app
