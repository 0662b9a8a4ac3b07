#include "apps/gpt2/train/step_profiler.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/cpu_peak.h"
#include "core/io.h"
#include "core/parallel.h"

namespace keel::app {

StepProfiler::StepProfiler(const TrainConfig& cfg, Device device, std::filesystem::path run_dir, bool root,
                           int64_t first_step)
    : cfg_(cfg), device_(device), run_dir_(std::move(run_dir)), root_(root) {
  if (cfg.profile <= 0) return;
  // A run too short for the warm-up still profiles what it has: its last `profile` steps.
  const int64_t left = cfg.max_steps - first_step;
  const int64_t n = std::min(cfg.profile, left);
  if (n <= 0) return;
  const int64_t warmup = std::min(cfg.profile_warmup, left - n);
  first_ = first_step + warmup;
  last_ = first_ + n - 1;
}

void StepProfiler::begin(int64_t step) {
  if (step < first_ || step > last_) return;
  if (!session_) {
    profiler::Options o{device_, cfg_.profile_gpu};
    // On the CPU the products are shown against the FMA peak of the threads the step runs on,
    // measured here (about 0.1 s) rather than taken from a data sheet (core/cpu_peak.h).
    if (!device_.is_cuda()) o.cpu_peak_flops = cpu_peak::fma_flops(parallel::threads());
    session_ = std::make_unique<profiler::Session>(o);
  }
  session_->step_begin();
}

void StepProfiler::end(int64_t step) {
  if (!session_ || step < first_ || step > last_) return;
  session_->step_end();
  if (step == last_) write();
}

void StepProfiler::write() {
  const profiler::Profile p = session_->finish();
  session_.reset();
  if (!root_) return;
  const std::filesystem::path json = run_dir_ / "profile.json", trace = run_dir_ / "profile_trace.json";
  io::write_file_atomic(json, profiler::to_json(p).dump(1) + "\n", "train --profile");
  io::write_file_atomic(trace, profiler::chrome_trace(p).dump() + "\n", "train --profile");
  fmt::print("\n{}profile written: {} (JSON), {} (Chrome trace: Perfetto, chrome://tracing)\n",
             profiler::table(p), json.string(), trace.string());
}

}  // namespace keel::app
