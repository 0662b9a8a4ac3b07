// Flags -> TrainConfig (see train_flags.h).
#include "apps/gpt2/cli/train_flags.h"

#include <CLI/CLI.hpp>

#include <filesystem>

#include "core/error.h"
#include "core/io.h"

namespace keel::app {

TrainConfig resolve_train_config(CLI::App& cmd, const TrainConfig& flags, const std::string& config_file) {
  TrainConfig cfg;
  if (!config_file.empty()) {
    const nlohmann::json j = io::read_json_file(config_file, "--config");
    if (!j.is_object()) throw ConfigError("--config", config_file + ": expected a JSON object of train fields");
    // A run directory's config.json nests the fields under "train"; accept it as it is.
    cfg.merge_json(j.contains("train") ? j["train"] : j, config_file);
  } else if (flags.resume && !flags.run_dir.empty()) {
    // `gpt2 train --resume --run-dir DIR` needs no other flag: the run knows how it was made.
    std::filesystem::path p = std::filesystem::path(flags.run_dir) / "config.json";
    if (std::filesystem::exists(p)) {
      const nlohmann::json j = io::read_json_file(p, "--resume");
      if (!j.is_object() || !j.contains("train"))
        throw ConfigError("--resume", p.string() + ": no \"train\" section", "is this a run directory of `gpt2 train`?");
      cfg.merge_json(j["train"], p.string());
    }
  }
  // Then every flag given on the command line, over whatever came from a file.
  nlohmann::json given, all = flags.to_json();
  for (auto& [key, value] : all.items()) {
    std::string flag = "--" + key;
    for (char& c : flag)
      if (c == '_') c = '-';
    if (cmd.count(flag) > 0) given[key] = value;
  }
  if (!given.is_null()) cfg.merge_json(given, "command line");
  cfg.resume = flags.resume;
  return cfg;
}

}  // namespace keel::app
