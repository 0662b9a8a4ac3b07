// What a training step tells about instability: its attention statistics, the head where they
// are largest, and loss spikes against the recent mean. The trainer logs these; messages about a
// spike or a divergence name the hottest head by the statistic --spike-signal chose.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "apps/gpt2/run/max_logit.h"

namespace keel::app {

// The step's per-layer, per-head statistics, merged over its micro-batches and ranks.
struct StepStats {
  MaxLogit max_logit;  // (L, H) max |logit|
  MaxLogit max_range;  // (L, H) the largest row range (ops/attention.h)

  // The statistic --spike-signal names: "max_logit" or "max_range".
  const MaxLogit& signal(const std::string& name) const { return name == "max_range" ? max_range : max_logit; }
  // "layer 3 head 1 (max |logit| 212.4)": where that statistic is largest (NaN first).
  std::string hottest_head(const std::string& signal_name) const;
};

// A spike: a loss more than `factor` times the mean of the last (up to 50) finite losses, once at
// least 10 are known.
class SpikeDetector {
 public:
  explicit SpikeDetector(double factor) : factor_(factor) {}
  // The spike's description ("loss 9.1 is 3.2x the mean of the last 50 steps") or nothing; then
  // the loss joins the window if it is finite.
  std::optional<std::string> observe(double loss);
  // The window, oldest first, for a checkpoint; and back from one (a resumed run detects as the
  // uninterrupted run would have).
  std::vector<double> recent() const { return {recent_.begin(), recent_.end()}; }
  void restore(const std::vector<double>& losses) { recent_.assign(losses.begin(), losses.end()); }

 private:
  double factor_;
  std::deque<double> recent_;
};

}  // namespace keel::app
