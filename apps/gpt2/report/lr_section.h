// The learning-rate part of a `gpt2 compare --sweep lr=...` report, which opens it: the figure of
// Wortsman et al. 2023, "Small-scale proxies for large-scale Transformer training instabilities"
// (arXiv 2309.14322): the final validation loss against the learning rate on a log axis, one line
// per attention variant and model size, diverged runs marked; beside it the largest attention
// logit and the largest |log Z| of the output softmax against the learning rate; then the LR
// sensitivity of every line.
//
// A line is the runs whose config.json differ only in the learning rate (and in bookkeeping:
// names, directories, logging), so an --include'd run joins the line it belongs to. Its label is
// its first run's name without the "lr=..." part.
//
// LR sensitivity, as the paper defines it (its section 3.1): the mean over the line's learning
// rates of min(loss(lr), L0) - min over the line of loss, where loss is the final validation loss
// and L0 the loss at initialisation, which is what a diverged run (or one without a final
// validation loss) counts as. keel takes L0 = ln(vocab_size), the loss of a uniform prediction:
// GPT-2's small initial weights predict nearly uniformly (a run's first logged loss is within 1%).
#pragma once

#include <string>
#include <vector>

#include "apps/gpt2/report/report.h"

namespace keel::app {

struct LrLine {
  std::string label, color;
  std::vector<const RunSummary*> runs;  // by increasing learning rate
  std::vector<double> lrs;              // theirs
  double initial_loss = RunSummary::kNaN;  // L0 = ln(vocab_size)
  double sensitivity = RunSummary::kNaN;   // NaN for a line of fewer than 2 runs
  double best_lr = RunSummary::kNaN, best_loss = RunSummary::kNaN;  // NaN when every run diverged
  int diverged = 0;
};

// Whether the run counts as diverged in the LR figure: a non-finite loss, or no finite final
// validation loss.
bool lr_diverged(const RunSummary& run);

// The runs with a train.lr in their config, as lines (in the order their first runs come).
std::vector<LrLine> lr_lines(const std::vector<RunSummary>& runs);

// The section's HTML.
std::string lr_section(const std::vector<RunSummary>& runs);

}  // namespace keel::app
