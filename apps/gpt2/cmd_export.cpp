// `gpt2 export RUN_DIR OUT_DIR`: a run's newest weights as a Hugging Face GPT-2 directory.
#include <fmt/format.h>

#include <CLI/CLI.hpp>

#include "apps/gpt2/commands.h"
#include "apps/gpt2/run_model.h"
#include "nn/hf.h"

namespace keel::app {

void add_export_command(CLI::App& app) {
  auto run_dir = std::make_shared<std::string>();
  auto out_dir = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "export", "Write a run's newest weights as a Hugging Face GPT-2 directory (config.json + model.safetensors)");
  cmd->add_option("run_dir", *run_dir, "a run directory written by `gpt2 train`")->required();
  cmd->add_option("out_dir", *out_dir, "where to write the Hugging Face directory")->required();
  cmd->callback([run_dir, out_dir] {
    auto model = load_run_model(*run_dir);
    nn::save_pretrained(*model, *out_dir);
    fmt::print("gpt2 export: {} -> {} ({})\n", *run_dir, *out_dir, model->config().summary());
  });
}

}  // namespace keel::app
