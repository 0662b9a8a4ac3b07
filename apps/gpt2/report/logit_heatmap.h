// The instability signal of one run at a glance: max |logit| (or the row range, max_range) of every
// (layer, head) over the training steps as one SVG heatmap (rows: heads, grouped by layer;
// columns: steps), with the steps where the trainer logged a loss spike marked above it. Part of
// the `gpt2 compare` report.
#pragma once

#include <string>
#include <vector>

#include "apps/gpt2/run/metrics.h"

namespace keel::app::svg {

// A [layer][head] statistic of a metrics record: &MetricsRecord::max_logit or ::max_range.
using StatField = std::vector<std::vector<double>> MetricsRecord::*;

// records: one run's metrics (train records with the statistic `field`, and "spike" events). lo,
// hi: the colour scale's range (log-spaced; shared by the runs of a report so colours compare).
// Non-finite cells (a diverged step) are black. Columns are step bins of at most `columns`, each
// showing the largest value in its bin, so a brief excursion survives the binning. `key` labels
// the colour key.
std::string logit_heatmap(const std::vector<MetricsRecord>& records, double lo, double hi, const std::string& title,
                          size_t columns = 120, StatField field = &MetricsRecord::max_logit,
                          const std::string& key = "max |logit|");

}  // namespace keel::app::svg
