// The output-softmax part of the `gpt2 compare` report: log Z, the log of the softmax's partition
// function over the vocabulary (the loss's log-sum-exp), per training step, one line per run: its
// mean over the step's tokens and its largest |log Z| (metrics.h). A softmax ignores a constant
// added to every logit of a row, so the logits can drift together without the loss noticing;
// log Z shows the drift (arXiv 2309.14322's output-logit divergence), and --z-loss pulls it to 0.
#pragma once

#include <string>
#include <vector>

#include "apps/gpt2/report/signal_sections.h"

namespace keel::app {

// The section's HTML; a line saying so when no run logged log Z (logs written before keel did).
std::string log_z_section(const std::vector<SignalRun>& runs);

}  // namespace keel::app
