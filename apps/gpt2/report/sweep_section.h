// The sweep part of a `gpt2 compare --sweep KEY=V1,V2,...` report: each run is one point, the
// runs of one attention variant one line, against the swept value. Charts: validation
// perplexity, and where training left the two attention signals (RunSummary::late_max_range and
// late_max_logit), against the value; then a table of the same numbers.
//
// The value is read from each run's config.json ("train.KEY"), so the section needs nothing but
// the run directories. One key gets its own axis: sweeping seq_len at a fixed head width plots
// against n/d, the sequence length over the head width, on a log axis: the ratio the rank
// argument of the paper (and of docs/instability.md) is about. Runs without the key (added with
// --include) are left out of the section.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "apps/gpt2/report/report.h"

namespace keel::app {

// The run's position on the sweep's axis (n/d for seq_len), or nullopt when its config lacks it.
std::optional<double> sweep_x(const RunSummary& run, const std::string& key);

// The axis title: "n/d (sequence length / head width)" for seq_len, else the key as a flag.
std::string sweep_axis_label(const std::string& key);

// The section's HTML; colors[i] is runs[i]'s colour (a line takes its first run's).
std::string sweep_section(const std::vector<RunSummary>& runs, const std::vector<std::string>& colors,
                          const std::string& key);

}  // namespace keel::app
