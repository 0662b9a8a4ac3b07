// The training metrics log: RUN_DIR/metrics.jsonl, one JSON object per line.
//
// Schema (every line has "kind" and "step"; "step" is the optimizer step the record belongs to):
//
//   {"kind":"train", "step":int, "loss":num, "lr":num, "grad_norm":num,
//    "max_logit":[[num per head] per layer], "max_range":[[num per head] per layer],
//    "log_z_mean":num, "log_z_max":num, "tokens_per_s":num, "mfu":num, "mem_bytes":int, "loss_scale":num, "skipped":bool, "elapsed_s":num}
//   {"kind":"val", "step":int, "val_loss":num, "val_ppl":num, "max_logit":[[...] per layer],
//    "max_range":[[...] per layer]}
//   {"kind":"event", "step":int, "event":"spike"|"nonfinite"|"checkpoint"|"resume"|"stop",
//    "message":str}
//
// max_logit is the largest |pre-softmax attention logit| seen in that step, per layer and head;
// max_range the largest max - min of one attention row's logits (ops/attention.h), the signal
// that a shift of a whole row does not move. Logs written before max_range existed lack it.
// log_z_mean and log_z_max are the output softmax's log partition function (the loss's
// log-sum-exp, log Z) over the step's targets: its mean, and its largest |log Z|. log Z drifting
// far from 0 is the output-logit divergence of arXiv 2309.14322, which --z-loss counters. Logs
// written before keel recorded them read them back as NaN.
//
// Non-finite numbers: JSON has no NaN or infinity, and a diverged run is exactly the one whose
// log must survive, so any num above may also be the string "nan", "inf" or "-inf" (the writer
// emits those; the reader also accepts null as NaN). Fields a writer leaves out read back as NaN
// (numbers), -1 (mem_bytes), false (skipped) or empty (max_logit, max_range, strings), so a trainer that
// cannot measure e.g. MFU on the CPU simply omits it.
//
// Durability: each record is written as one line and flushed, so a crash loses at most the
// line being written. A crash can leave that line cut short; the reader skips a malformed last
// line when it has no trailing newline (the only way the writer can leave one), and treats any
// other malformed line as a corrupt file.
//
// Resume: MetricsLog(run_dir, resume_step) first drops every record with step > resume_step
// (and a cut-short last line), then appends, so the resumed run's log reads like an
// uninterrupted one, apart from the "resume" event the trainer logs. Records are kept by step,
// so the trainer must log everything of step S before the checkpoint of step S is written.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace keel::app {

enum class RecordKind { Train, Val, Event };

// One line of metrics.jsonl. A single struct rather than one per kind so a reader can walk the
// log in order; fields that do not belong to `kind` are ignored by the writer.
struct MetricsRecord {
  static constexpr double kMissing = std::numeric_limits<double>::quiet_NaN();

  RecordKind kind = RecordKind::Train;
  int64_t step = 0;

  // train
  double loss = kMissing;
  double lr = kMissing;
  double grad_norm = kMissing;
  double tokens_per_s = kMissing;
  double mfu = kMissing;
  int64_t mem_bytes = -1;
  double loss_scale = kMissing;
  bool skipped = false;
  double elapsed_s = kMissing;
  double log_z_mean = kMissing;  // the output softmax's mean log Z over the step's targets
  double log_z_max = kMissing;   // and its largest |log Z|

  // train and val: [layer][head]
  std::vector<std::vector<double>> max_logit;
  std::vector<std::vector<double>> max_range;

  // val
  double val_loss = kMissing;
  double val_ppl = kMissing;

  // event: one of kEventNames
  std::string event;
  std::string message;
};

inline constexpr const char* kEventNames[] = {"spike", "nonfinite", "checkpoint", "resume",
                                              "stop"};

// RUN_DIR/metrics.jsonl
std::filesystem::path metrics_path(const std::filesystem::path& run_dir);

// Rewrites the log at `path` (atomically) keeping only records with step <= step, and dropping
// a cut-short last line. A missing file is left missing. IoError on a corrupt middle line.
void truncate_after(const std::filesystem::path& path, int64_t step);

// Appends records to RUN_DIR/metrics.jsonl.
class MetricsLog {
 public:
  // A fresh run: creates RUN_DIR (if needed) and starts an empty log, replacing any old one.
  // A resumed run (resume_step set): truncate_after(resume_step), then appends to what is left.
  explicit MetricsLog(const std::filesystem::path& run_dir,
                      std::optional<int64_t> resume_step = std::nullopt);

  // ValueError for an event name not in kEventNames; IoError when the write fails.
  void write(const MetricsRecord& record);

  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  std::ofstream out_;
};

// JSON has no NaN or inf: they are written as the strings "nan", "inf", "-inf" (and read back),
// because a NaN max logit is the signal of a diverged head and must not turn into null or 0.
nlohmann::ordered_json json_number(double v);
// (L) rows of (H) max logits -> [[...], ...] with json_number() for each value.
nlohmann::ordered_json logits_json(const std::vector<std::vector<double>>& rows);
// One line of JSON (no newline) for a record; what MetricsLog writes.
std::string to_json_line(const MetricsRecord& record);

// Every record of a log, in file order. IoError naming the file (and line) when the file is
// missing, or a line other than a cut-short last one is not a valid record. Lines of an unknown
// kind are skipped, so older readers survive newer record kinds.
std::vector<MetricsRecord> read_metrics(const std::filesystem::path& path);

}  // namespace keel::app
