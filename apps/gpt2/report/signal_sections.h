// The attention-signal half of the `gpt2 compare` report: per-layer curves over the steps, the
// per-head table of the final step, and a per-head heatmap over training for every run. They are
// drawn twice, for the two statistics the trainer logs:
//   max |logit|  the largest pre-softmax logit (the paper's signal);
//   max range    the largest max - min of one attention row's logits, which a shift of a whole
//                row (invisible to the softmax) does not move: the shift-free signal.
// Two radio buttons and CSS switch between them (the report has no scripts); max |logit| shows first.
#pragma once

#include <string>
#include <vector>

#include "apps/gpt2/run/metrics.h"

namespace keel::app {

struct SignalRun {
  std::string name, color;
  const std::vector<MetricsRecord>* records;
};

// The CSS rules of the toggle, for the page's <style>.
extern const char* const kSignalStyle;

// The sections' HTML: the toggle, then one block of charts per statistic. A statistic no record
// carries (a log written before keel logged max_range) gets a line saying so instead of charts.
std::string signal_sections(const std::vector<SignalRun>& runs);

}  // namespace keel::app
