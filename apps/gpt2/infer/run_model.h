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

// The model of exactly one of a run directory or a Hugging Face directory (ConfigError
// naming `op` when both or neither are given): what eval and sample take.
std::unique_ptr<nn::GPT2> load_model(const std::string& run_dir, const std::string& init_from, const char* op);

// The vocabulary for text: `vocab` when given, else the run's dataset vocabulary, else GPT-2's.
std::filesystem::path vocab_dir_for(const std::string& vocab, const std::string& run_dir);

}  // namespace keel::app
