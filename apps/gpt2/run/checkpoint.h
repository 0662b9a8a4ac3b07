// Checkpoints of a training run:
//
//   RUN_DIR/checkpoints/step_00000100/model.safetensors      weights, Hugging Face names, keel layout
//                                    /optimizer.safetensors  AdamW moments, masters, step counts;
//                                                            the loss scaler's state ("scaler.*")
//                                    /trainer.json           step, loader position, dropout RNG,
//                                                            recent losses (spike detection),
//                                                            elapsed seconds, the run's identity
//
// Resume checks the flags against RUN_DIR/config.json, and trainer.json against config.json: its
// loader state, dropout seed and identity (identity_of in train_config.h) must be this run's.
//
// A checkpoint directory is written under a temporary name, every file fsync'd, and renamed
// into place, so a crash leaves either the previous checkpoints or a complete new one, never a
// half-written one. Only the newest `keep` checkpoints are kept; older ones are renamed to a
// temporary name before they are deleted, so a kill at any moment never leaves a listed
// checkpoint with files missing. Temporaries of processes that died are removed by
// remove_stale_temporaries (training calls it at start).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>

#include <nlohmann/json.hpp>

#include "core/named_tensors.h"

namespace keel::app {

struct Checkpoint {
  std::filesystem::path dir;
  NamedTensors model, optimizer;
  nlohmann::json trainer;
};

// Writes checkpoint `step` and prunes older ones beyond `keep`. Returns its directory.
std::filesystem::path save_checkpoint(const std::filesystem::path& run_dir, int64_t step,
                                      const NamedTensors& model, const NamedTensors& optimizer,
                                      const nlohmann::json& trainer, int64_t keep);

// Deletes the checkpoint temporaries (".tmp-step_*", ".del-step_*") of processes that no longer run.
void remove_stale_temporaries(const std::filesystem::path& run_dir);

// The newest complete checkpoint of a run, if any.
std::optional<std::filesystem::path> latest_checkpoint(const std::filesystem::path& run_dir);

// Reads a checkpoint directory; IoError naming the file for anything missing or corrupt,
// including a trainer.json whose step disagrees with the directory's name or whose fields
// have the wrong types or ranges.
Checkpoint load_checkpoint(const std::filesystem::path& dir);

}  // namespace keel::app
