// Comparing training runs: a one-screen summary per run, a terminal table, and a
// self-contained HTML report (inline SVG charts, no scripts or external resources) that
// `gpt2 compare` writes for MHSA against LS-attention and the baselines.
//
// A run directory holds config.json (a JSON object; "name" labels the run: by default the
// attention variant's name from nn::kAttentionKinds, or the preset's when the run kept the preset's
// variant; the directory name when absent) and metrics.jsonl (see metrics.h).
#pragma once

#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "apps/gpt2/run/metrics.h"

namespace keel::app {

struct RunSummary {
  static constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

  std::string name;
  std::filesystem::path dir;
  // config.json flattened to dotted keys ("model.n_layer") with JSON-rendered values.
  std::vector<std::pair<std::string, std::string>> config;

  int64_t steps = 0;              // last train step logged
  double final_train_loss = kNaN; // mean loss over the last 10% of train records (at least 1)
  double final_val_ppl = kNaN;    // of the last val record
  double final_val_loss = kNaN;   // of the last val record (nats per token)
  // The output softmax's log Z (metrics.h): the largest finite |log Z| of any train record, and the
  // mean log Z of the last train record that has one (NaN when no record has).
  double max_log_z = kNaN, final_log_z = kNaN;
  double best_val_ppl = kNaN;     // lowest finite val perplexity
  int64_t best_val_step = -1;
  double max_logit = kNaN;        // over every layer, head and record (train and val)
  double max_range = kNaN;        // the row logit range, likewise (NaN when none was logged)
  // Where training left the signals: the max over every layer and head of a train record, averaged
  // over the last 10% of train records (as final_train_loss). A record with a non-finite head
  // makes the average NaN, on purpose.
  double late_max_logit = kNaN, late_max_range = kNaN;
  // Of the last train record that has logits: max over heads per layer, and the full matrix.
  std::vector<double> final_max_logit_per_layer;
  std::vector<std::vector<double>> final_max_logit;
  double median_tokens_per_s = kNaN;
  bool diverged = false;          // some train or val loss was non-finite
  int64_t diverged_step = -1;     // the first such step
  int64_t spikes = 0;             // "spike" events
  int64_t skipped_steps = 0;      // train records with skipped = true (loss-scale overflow)
  // The first step whose record has a NaN or inf max logit (-1: none). The charts and
  // max_logit above keep the finite values; this keeps the instability signal in status().
  int64_t nonfinite_logit_step = -1;

  // "ok", "ok, 2 spikes", "diverged at step 1234".
  std::string status() const;
};

// Reads RUN_DIR/config.json (optional) and RUN_DIR/metrics.jsonl. IoError naming the path when
// the directory or the metrics log is missing, or either file is corrupt.
RunSummary summarize(const std::filesystem::path& run_dir);

// The same from records already read, for callers that have them (and for tests).
RunSummary summarize(const std::vector<MetricsRecord>& records);

// summarize(run_dir) and the records it read, for callers that need both (metrics.jsonl read once).
std::pair<RunSummary, std::vector<MetricsRecord>> load_run(const std::filesystem::path& run_dir);

// A fixed-width table for the terminal, one row per run: run, n/d (sequence length over head
// width, reading.h), steps, final train loss, val ppl (final), best val ppl, max logit, max range,
// tokens/s, status.
std::string compare_table(const std::vector<RunSummary>& runs);

// Writes the HTML report comparing the runs to out_html (atomically). IoError as summarize;
// ValueError when run_dirs is empty. The report opens with a paragraph on how to read the runs (each
// run's n/d, and what to look at: reading.h). With a sweep_key (a TrainConfig field, e.g.
// "ls_window"), the sweep's charts follow the summary (sweep_section.h); "lr" opens the report
// with the learning-rate sensitivity figure instead (lr_section.h).
void write_report(const std::vector<std::string>& run_dirs, const std::string& out_html,
                  const std::string& title, const std::string& sweep_key = "");

}  // namespace keel::app
