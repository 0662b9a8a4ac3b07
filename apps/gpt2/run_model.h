// Loading a trained model for eval, sample and export: from a keel run directory (its
// config.json and newest checkpoint) or from a Hugging Face GPT-2 directory.
#pragma once

#include <filesystem>
#include <memory>

#include "nn/gpt2.h"

namespace keel::app {

// RUN_DIR/config.json + RUN_DIR/checkpoints/<newest>/model.safetensors. IoError/ConfigError
// naming the file when the run has no checkpoint or its files are damaged.
std::unique_ptr<nn::GPT2> load_run_model(const std::filesystem::path& run_dir);

// The dataset directory a run trained on (from its config.json), for its vocabulary.
std::filesystem::path run_data_dir(const std::filesystem::path& run_dir);

}  // namespace keel::app
