// `gpt2 convert`: a keel dataset's token shards in another tool's format (llm.c today).
// Reading goes the other way without a command: `gpt2 train --data DIR` opens llm.c and nanoGPT
// directories directly (data/token_files.h).
#include <fmt/format.h>

#include <CLI/CLI.hpp>

#include "apps/gpt2/cli/commands.h"
#include "data/token_files.h"

namespace keel::app {

void add_convert_command(CLI::App& app) {
  auto data = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto to = std::make_shared<std::string>("llmc");
  auto prefix = std::make_shared<std::string>("keel");
  CLI::App* cmd = app.add_subcommand(
      "convert", "Write a prepared dataset's shards as llm.c token files (PREFIX_train_000000.bin, ...)");
  cmd->add_option("--data", *data, "a dataset directory written by `gpt2 prepare`")->required();
  cmd->add_option("--out,-o", *out, "directory for the converted files")->required();
  cmd->add_option("--to", *to, "target format")->check(CLI::IsMember({"llmc"}))->capture_default_str();
  cmd->add_option("--prefix", *prefix, "file name prefix")->capture_default_str();
  cmd->callback([=] {
    const auto files = data::export_llmc(*data, *out, *prefix);
    fmt::print("gpt2 convert: {} -> {} ({} llm.c file(s))\n", *data, *out, files.size());
  });
}

}  // namespace keel::app
