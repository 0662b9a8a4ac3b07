// The instability signal of one run at a glance: max |logit| of every (layer, head) over the
// training steps as one SVG heatmap (rows: heads, grouped by layer; columns: steps), with the
// steps where the trainer logged a loss spike marked above it. Part of the `gpt2 compare` report.
#pragma once

#include <string>
#include <vector>

#include "apps/gpt2/train/metrics.h"

namespace keel::app::svg {

// records: one run's metrics (train records with max_logit, and "spike" events). lo, hi: the
// colour scale's range (log-spaced; shared by the runs of a report so colours compare). Non-finite
// cells (a diverged step) are black. Columns are step bins of at most `columns`, each showing the
// largest value in its bin, so a brief excursion survives the binning.
std::string logit_heatmap(const std::vector<MetricsRecord>& records, double lo, double hi, const std::string& title,
                          size_t columns = 120);

}  // namespace keel::app::svg
