// How to read a comparison: each run's n/d (sequence length n over head width d), and a few
// paragraphs, computed from the runs, that `gpt2 compare` prints under its table and the report
// opens with.
//
// The paper's claim is about n/d: a global head of width d has d degrees of freedom per query
// and a sharp short-range pattern needs about n of them, so when n >> d MHSA's heads can only
// sharpen by growing their logits, while LS-attention's local heads never see more than their
// window. Where a comparison runs at a small n/d the two look alike, and the reading says so and
// where to see the effect instead; where the effect shows, it says which curves separate and by
// how much.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "apps/gpt2/report/report.h"
#include "apps/gpt2/run/metrics.h"

namespace keel::app {

// A value of the run's flattened config.json (RunSummary::config), or nullopt; config_number
// also when the value is not a finite number.
std::optional<std::string> config_value(const RunSummary& run, const std::string& key);
std::optional<double> config_number(const RunSummary& run, const std::string& key);

// The run's sequence length over its head width: train.seq_len (model.n_positions when the run
// left it at 0) over model.n_embd / model.n_head. nullopt when the config lacks one of them.
std::optional<double> n_over_d(const RunSummary& run);

// n/d for a table cell: "64", "10.7", or "-" when unknown.
std::string n_over_d_cell(const RunSummary& run);

// From this n/d on the reading expects the paper's effect: in docs/instability.md's growth lab
// MHSA's late max range is 1.3 and 2 times LS-attention's at n/d = 8 and 16, 6 times at 32.
inline constexpr double kLongContext = 32;
// MHSA's max range over LS-attention's from which the reading says the runs separate.
inline constexpr double kSeparated = 2;

// A run as the reading sees it: its summary, and its records for the per-layer detail (nullptr:
// the reading uses the summary alone).
struct ReadingRun {
  const RunSummary* summary;
  const std::vector<MetricsRecord>* records = nullptr;
};

// The paragraphs, in plain text with commands in `backticks`; empty when no run records its n/d.
std::vector<std::string> reading(const std::vector<ReadingRun>& runs);

// The paragraphs for the terminal: wrapped at `width` columns, a blank line between them.
std::string reading_text(const std::vector<std::string>& paragraphs, size_t width = 100);

// The paragraphs as a note box of the report: HTML-escaped, `code` as <code>, ">>" as much-greater.
std::string reading_html(const std::vector<std::string>& paragraphs);

}  // namespace keel::app
