#include "apps/gpt2/train/step_signals.h"

#include <fmt/format.h>

#include <cmath>
#include <numeric>

namespace keel::app {

std::string StepStats::hottest_head(const std::string& signal_name) const {
  const MaxLogit& m = signal(signal_name);
  if (m.values().empty()) return "no attention statistics";
  const size_t at = m.top_index();
  return fmt::format("layer {} head {} ({} {:.1f})", int64_t(at) / m.heads(), int64_t(at) % m.heads(),
                     signal_name == "max_range" ? "max range" : "max |logit|", m.values()[at]);
}

std::optional<std::string> SpikeDetector::observe(double loss) {
  std::optional<std::string> spike;
  if (recent_.size() >= 10) {
    const double mean = std::accumulate(recent_.begin(), recent_.end(), 0.0) / double(recent_.size());
    if (loss > factor_ * mean)
      spike = fmt::format("loss {:.4f} is {:.1f}x the mean of the last {} steps", loss, loss / mean, recent_.size());
  }
  if (std::isfinite(loss)) recent_.push_back(loss);
  if (recent_.size() > 50) recent_.pop_front();
  return spike;
}

}  // namespace keel::app
