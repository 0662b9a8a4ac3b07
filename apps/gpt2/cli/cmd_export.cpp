// `gpt2 export RUN_DIR OUT_DIR`: a run's newest weights as a Hugging Face GPT-2 directory.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <filesystem>

#include "apps/gpt2/cli/commands.h"
#include "apps/gpt2/infer/run_model.h"
#include "core/error.h"
#include "nn/hf.h"

namespace keel::app {

namespace {
namespace fs = std::filesystem;

// A directory that holds a training run: exporting into it would overwrite the run's own
// config.json (the run could then neither resume nor be evaluated).
bool holds_run(const fs::path& dir) {
  std::error_code ec;
  return fs::is_directory(dir / "checkpoints", ec) || fs::exists(dir / "metrics.jsonl", ec);
}

void check_export_target(const fs::path& run_dir, const fs::path& out_dir) {
  std::error_code ec;
  const fs::path run = fs::weakly_canonical(run_dir, ec), out = fs::weakly_canonical(out_dir, ec);
  const bool same = run == out;
  if (same || holds_run(out_dir))
    throw ConfigError("export", fmt::format("{}: {} a training run; export would overwrite its files", out_dir.string(),
                                            same ? "is" : "holds"),
                      "export to a new directory, e.g. " + (run_dir.filename().empty() ? std::string("hf") : run_dir.filename().string() + "-hf"));
}
}  // namespace

void add_export_command(CLI::App& app) {
  auto run_dir = std::make_shared<std::string>();
  auto out_dir = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "export", "Write a run's newest weights as a Hugging Face GPT-2 directory (config.json + model.safetensors)");
  cmd->add_option("run_dir", *run_dir, "a run directory written by `gpt2 train`")->required();
  cmd->add_option("out_dir", *out_dir, "where to write the Hugging Face directory")->required();
  cmd->callback([run_dir, out_dir] {
    check_export_target(*run_dir, *out_dir);
    auto model = load_run_model(*run_dir);
    nn::save_pretrained(*model, *out_dir);
    fmt::print("gpt2 export: {} -> {} ({})\n", *run_dir, *out_dir, model->config().summary());
  });
}

}  // namespace keel::app
