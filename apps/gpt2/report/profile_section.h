// The "Where a step's time goes" section of the `gpt2 compare` report: for every run that was
// trained with `--profile N`, its RUN_DIR/profile.json (core/profiler.h's to_json) drawn as the
// step's split by phase (forward, backward, optimizer, host) and a table of its costliest ops.
// Runs side by side show, for instance, that LS-attention's attention ops shrink while its
// matmuls stay what MHSA's are.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace keel::app {

// What the section reads of one profile.json; times are per step, in milliseconds.
struct ProfileOp {
  std::string name, phase, shape;
  double calls = 0, ms = 0, flops = 0, bytes = 0, launches = 0, syncs = 0;
};
struct RunProfile {
  std::string device, timing, gpu_model;  // timing: "cuda_events", "wall" or "predicted"
  int64_t steps = 0;
  double step_ms = 0;   // the time the ops' shares are of (predicted, event or wall time)
  double host_ms = 0;   // the host's time per step (meaningless when predicted)
  double flops = 0, launches = 0, syncs = 0, allocations = 0;
  std::vector<ProfileOp> ops;  // costliest first
};

// RUN_DIR/profile.json when it exists (nullopt otherwise). IoError naming the file when it is
// not JSON or lacks a field the section needs.
std::optional<RunProfile> read_profile(const std::filesystem::path& run_dir);

struct ProfiledRun {
  std::string name, color;
  const RunProfile* profile;
};

// The CSS rules of the section, for the page's <style>.
extern const char* const kProfileStyle;

// The section's HTML; empty when no run was profiled.
std::string profile_section(const std::vector<ProfiledRun>& runs);

}  // namespace keel::app
