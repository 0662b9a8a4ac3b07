// Flags -> TrainConfig for `gpt2 train` and `gpt2 compare`: a --config file (or, with --resume,
// the run's own config.json), then every flag the user actually gave on top of it.
#pragma once

#include <string>

#include "apps/gpt2/train/train_config.h"

namespace CLI {
class App;
}

namespace keel::app {

// Registers a flag for every TrainConfig field (train_fields.h) on `cmd`, writing into *cfg, plus
// --config (into *config_file) and --resume.
void add_train_flags(CLI::App& cmd, TrainConfig* cfg, std::string* config_file);

// `cmd` is the subcommand whose flags were parsed into `flags`; only the flags it counts as given
// override the file's values (a default never silently replaces a value from the file).
// ConfigError/IoError naming the file for a bad --config.
TrainConfig resolve_train_config(CLI::App& cmd, const TrainConfig& flags, const std::string& config_file);

}  // namespace keel::app
