#include "apps/gpt2/run/seed.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>

#include "core/io.h"

namespace keel::app {

bool parse_seed(std::string_view text, Seed& out) {
  int64_t v = 0;
  if (!io::parse_int(text, 0, int64_t(kMaxSeed), v)) return false;
  out = Seed(v);
  return true;
}

CLI::Option* add_seed_option(CLI::App& cmd, Seed& seed, const std::string& help) {
  return cmd
      .add_option_function<std::string>(
          "--seed",
          [&seed](const std::string& s) {
            if (!parse_seed(s, seed))
              throw CLI::ValidationError("--seed", fmt::format("'{}' is not a seed, an integer in {}", s, kSeedRange));
          },
          fmt::format("{} (an integer in {})", help, kSeedRange))
      ->type_name("INT")
      ->default_str(std::to_string(seed));
}

}  // namespace keel::app
