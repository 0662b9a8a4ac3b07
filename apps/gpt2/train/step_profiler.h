// `gpt2 train --profile N`: the trainer's use of keel's profiler (core/profiler.h). After
// --profile-warmup steps of this launch (allocator caches filled, cuBLAS plans made), N steps are
// recorded; then rank 0 prints the table and writes RUN_DIR/profile.json and
// RUN_DIR/profile_trace.json (Chrome trace format: Perfetto, chrome://tracing). On the CPU each
// matrix product's rate is also shown as a share of the machine's FMA peak, measured when the
// recording starts (core/cpu_peak.h).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>

#include "apps/gpt2/train/train_config.h"
#include "core/device.h"
#include "core/profiler.h"

namespace keel::app {

class StepProfiler {
 public:
  // first_step: the step this launch starts at (a resume starts later).
  StepProfiler(const TrainConfig& cfg, Device device, std::filesystem::path run_dir, bool root, int64_t first_step);
  void begin(int64_t step);
  void end(int64_t step);  // after the last recorded step: the outputs

 private:
  void write();
  TrainConfig cfg_;
  Device device_;
  std::filesystem::path run_dir_;
  bool root_ = false;
  int64_t first_ = 0, last_ = -1;  // steps [first_, last_] are recorded
  std::unique_ptr<profiler::Session> session_;
};

}  // namespace keel::app
