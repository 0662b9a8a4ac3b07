// The flags of `gpt2 train` and `gpt2 compare`, and resolving them over a config file (see
// train_flags.h). The fields themselves: apps/gpt2/train/train_fields.h.
#include "apps/gpt2/cli/train_flags.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>

#include <cstdint>
#include <filesystem>
#include <type_traits>

#include "apps/gpt2/train/train_fields.h"
#include "core/error.h"
#include "core/io.h"

namespace keel::app {

namespace {

// One flag's text as a field of type T, or a CLI11 error naming the flag. Our own parse: CLI11
// would saturate 99999999999999999999 to INT64_MAX and wrap -1 to 2^64 - 1 for an unsigned
// field. Semantic ranges are checked in validate().
template <typename T>
T parse_flag(const std::string& flag, const std::string& s) {
  if constexpr (std::is_same_v<T, bool>) {
    if (s == "1" || s == "true") return true;
    if (s == "0" || s == "false") return false;
    throw CLI::ValidationError(flag, fmt::format("'{}' is not 1 or 0", s));
  } else if constexpr (std::is_integral_v<T>) {
    int64_t v = 0;
    if (!io::parse_int(s, std::is_signed_v<T> ? INT64_MIN : 0, INT64_MAX, v))
      throw CLI::ValidationError(
          flag, fmt::format("'{}' is not {} integer in range", s, std::is_signed_v<T> ? "an" : "a non-negative"));
    return static_cast<T>(v);
  } else {
    return s;
  }
}

}  // namespace

void add_train_flags(CLI::App& cmd, TrainConfig* cfg, std::string* config_file) {
  cmd.add_option("--config", *config_file, "JSON file with any of the fields below (flags override it)");
  for_each_field(*cfg, [&](const char* key, auto& value, const std::string& help) {
    std::string flag = std::string("--") + key;
    for (char& ch : flag)
      if (ch == '_') ch = '-';
    using T = std::decay_t<decltype(value)>;
    if constexpr (std::is_same_v<T, Seed>) {  // the table's one unsigned field: --seed
      add_seed_option(cmd, value, help);
    } else if constexpr (is_optional<T>::value) {
      using V = typename T::value_type;
      cmd.add_option_function<std::string>(
             flag, [&value, flag](const std::string& s) { value = parse_flag<V>(flag, s); }, help)
          ->type_name(std::is_same_v<V, std::string> ? "TEXT" : std::is_same_v<V, bool> ? "1|0" : "INT");
    } else if constexpr (std::is_integral_v<T>) {
      cmd.add_option_function<std::string>(
             flag, [&value, flag](const std::string& s) { value = parse_flag<T>(flag, s); }, help)
          ->type_name("INT")
          ->default_str(std::to_string(value));
    } else {
      cmd.add_option(flag, value, help);
    }
  });
  cmd.add_flag("--resume", cfg->resume, "continue the run in --run-dir from its latest checkpoint");
}

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
