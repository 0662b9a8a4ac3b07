// The seed of every gpt2 subcommand that takes --seed (train, compare, sample, lab dof): one type
// and one range, defined here once, so that a seed one subcommand accepts every other accepts too.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace keel::app {

// A Philox key, but at most 2^63 - 1: run files store seeds as JSON integers that are read back
// range-checked as int64 (config.json, trainer.json's loader state), so a larger seed would train
// a run that can never be resumed.
using Seed = uint64_t;
inline constexpr Seed kMaxSeed = INT64_MAX;
inline constexpr std::string_view kSeedRange = "[0, 2^63 - 1]";

// Decimal digits of a seed in range; false for anything else (-1, 2^64 - 1, 1e3, "").
bool parse_seed(std::string_view text, Seed& out);

// Registers --seed on cmd, writing into `seed`, its help followed by the range. Parsed by keel,
// not CLI11 (which wraps -1 to 2^64 - 1): anything but a seed in range is a usage error.
CLI::Option* add_seed_option(CLI::App& cmd, Seed& seed, const std::string& help);

}  // namespace keel::app
