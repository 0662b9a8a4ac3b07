// The Trainer behind train() (apps/gpt2/train/trainer.h), shared by its two files:
// trainer.cpp, the loop (a step, its logging, validation) and trainer_setup.cpp, what a run
// sets up, saves and restores (the run directory, model, optimizer, checkpoints, resume).
// Internal to the training code: a program trains through train().
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "apps/gpt2/run/metrics.h"
#include "apps/gpt2/train/distributed.h"
#include "apps/gpt2/train/resume.h"
#include "apps/gpt2/train/step_graph.h"
#include "apps/gpt2/train/step_scalars.h"
#include "apps/gpt2/train/step_signals.h"
#include "apps/gpt2/train/trainer.h"
#include "core/determinism.h"
#include "data/loader.h"
#include "nn/gpt2.h"
#include "ops/cuda/attention.h"
#include "optim/data_parallel.h"
#include "optim/loss_scaler.h"
#include "optim/schedule.h"
#include "optim/step_readback.h"

namespace keel::app {

class Trainer {
 public:
  explicit Trainer(const TrainConfig& cfg) : cfg_(cfg), determinism_(cfg.deterministic != 0) {}
  TrainResult run();

 private:
  void open_run();
  void write_run_files();
  void build_model();
  void build_optimizer();
  void resume_from(const std::filesystem::path& ckpt);
  void start_log();
  void train_step(double lr);
  void forward_backward(optim::StepReadback& scalars);
  void micro_batch(const Tensor& batch, optim::StepReadback& scalars, bool last);
  StepResult finish_on_host(double lr, optim::StepReadback& scalars);
  void read_pending();
  void report_pending();
  void log_step(int64_t step, const StepResult& s, double lr, double seconds);
  bool progress_line_due(int64_t step) const;  // a plain progress line (a terminal redraws every step)
  void validate_now();
  void checkpoint(int64_t next_step);
  nlohmann::json trainer_state(int64_t next_step) const;
  void event(const std::string& kind, const std::string& message, int64_t step = -1);

  TrainConfig cfg_;
  DeterministicGuard determinism_;  // --deterministic for the run's lifetime (core/determinism.h)
  std::optional<cuda::AttentionKernelScope> attention_kernel_;  // --attention-kernel, on a GPU
  Device device_;
  DType dtype_ = DType::f32;
  std::filesystem::path run_dir_;
  nn::GPT2Config mcfg_;
  int64_t T_ = 0;
  std::unique_ptr<nn::GPT2> model_;
  std::unique_ptr<optim::DataParallelOptimizer> opt_;  // replicated AdamW, or ZeRO-1's sharded one
  std::unique_ptr<optim::LossScaler> scaler_;
  std::unique_ptr<StepGraph> graph_;  // --cuda-graph 1
  optim::CosineSchedule schedule_;
  std::shared_ptr<const data::TokenSplit> train_split_, val_split_;
  std::unique_ptr<data::TrainLoader> loader_;
  std::unique_ptr<MetricsLog> log_;  // rank 0 only: one writer of metrics, reports, checkpoints
  Distributed dist_;
  // With --resume: the checkpoint to start from, and the run as its config.json recorded it
  // before this launch rewrote it.
  std::optional<std::filesystem::path> latest_;
  SavedRun saved_;
  uint64_t dropout_seed_ = 0;  // the seed of the dropout stream that rank 0 of this run starts from
  int64_t step_ = 0;  // the next optimizer step to take
  bool finished_ = false;  // --resume of a run that already took its --max-steps
  double flops_per_token_ = 0, peak_ = 0, elapsed_ = 0;
  SpikeDetector spikes_{cfg_.spike_factor};  // on the losses of recent steps
  TrainResult result_;
  StepScalars scalars_;  // where each of a step's scalars sits in its row (step_scalars.h)

  // Steps taken but not yet reported. Where the optimizer decides on the device (one process),
  // a step's scalars stay in its row of pending_scalars_, and the host reads every pending row in
  // one copy at the next step that reports (logs, checkpoints, validates or stops): the only host
  // wait of those steps. Where the host decides (several ranks, ZeRO-1), it reads them at once and
  // the table has one row.
  struct Pending {
    int64_t step;
    double lr;
    std::optional<StepResult> result;  // known once its scalars are on the host
  };
  static constexpr int64_t kMaxPending = 4096;  // rows of pending_scalars_: a few MB at most
  bool device_decides_ = false;                 // opt_->decides_on_device()
  Tensor pending_scalars_;  // (min(log_every, kMaxPending), scalars_.size()) f64 on device_
  std::vector<Pending> pending_;
  std::chrono::steady_clock::time_point pending_since_;  // when the first pending step began
};

}  // namespace keel::app
