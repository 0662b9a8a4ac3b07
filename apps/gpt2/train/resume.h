// What must agree before a run resumes: this launch's flags against the run's config.json, and a
// checkpoint's trainer.json against both. Anything that differs would silently make another run
// (another model, data order or dropout stream) under the old run's name, so it is refused with
// the file and the field named.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "apps/gpt2/run/checkpoint.h"
#include "apps/gpt2/train/train_config.h"
#include "data/loader.h"

namespace keel::app {

// A run as RUN_DIR/config.json recorded it, before this launch rewrites the file.
struct SavedRun {
  std::filesystem::path config_path;  // RUN_DIR/config.json
  TrainConfig cfg;                    // its "train" section
  int world = 1;                      // its "distributed.world" (1 for single-process runs)
};

// ConfigError/IoError naming the file when it is missing, corrupt or not a `gpt2 train` run.
SavedRun read_saved_run(const std::filesystem::path& run_dir);

// The fields of a run that no launch may change: identity_of without the batch split, which a
// resume may change as long as the global batch stays (grad_accum_for_resume).
nlohmann::json resume_identity(const TrainConfig& c);

// ConfigError naming the differing fields when `cfg` (this launch, its grad_accum already made
// up for the world size) is not the run `saved` recorded.
void check_same_run(const SavedRun& saved, const TrainConfig& cfg);

// What this launch knows about the run that a checkpoint's trainer.json must agree with.
struct RunFacts {
  int64_t seq_len = 0;          // T of this run (the config's, or the model's context)
  uint64_t train_tokens = 0;    // tokens in the training split of --data
  std::string data;             // --data, for messages
  uint64_t dropout_seed = 0;    // the dropout stream's seed the run's seed gives
};

// The loader state of checkpoint `c` once every field that config.json or the dataset fixes has
// been checked against them (loader seed, T, split size, whole global batches per step, dropout
// seed, the recorded identity). A launch may split the global batch otherwise (batch x
// micro-batches x ranks), so the global batch is what is compared, not its factors. IoError or
// ConfigError naming trainer.json, the field and both values.
data::LoaderState checked_loader_state(const Checkpoint& c, const SavedRun& saved, const RunFacts& run);

}  // namespace keel::app
