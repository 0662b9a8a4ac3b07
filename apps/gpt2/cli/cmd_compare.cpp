// `gpt2 compare`: the experiment of this project. One training run per attention variant with
// the same seed, data, model size and step budget, then a table and a self-contained HTML
// report (loss, validation perplexity, max attention logit per layer over steps).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <sstream>

#include "apps/gpt2/train/checkpoint.h"
#include "apps/gpt2/cli/commands.h"
#include "apps/gpt2/cli/train_flags.h"
#include "apps/gpt2/report/report.h"
#include "apps/gpt2/train/trainer.h"
#include "nn/config.h"

namespace fs = std::filesystem;

namespace keel::app {

namespace {
std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

void run_compare(CLI::App& cmd, const TrainConfig& flags, const std::string& config_file, const std::string& out,
                 const std::string& variants, const std::string& include) {
  if (out.empty()) throw ConfigError("compare", "--out is required", "e.g. --out runs/compare");
  std::vector<std::string> names = split_list(variants);
  if (names.empty()) throw ConfigError("compare", "--variants is empty", "e.g. --variants mhsa,ls");
  for (const std::string& v : names) {  // all checked before the first run starts
    try {
      nn::parse_attention_kind(v);
    } catch (const ConfigError& e) {
      throw ConfigError("compare", "--variants: " + e.message(), e.hint());
    }
  }
  TrainConfig base = resolve_train_config(cmd, flags, config_file);
  std::vector<std::string> dirs;
  for (const std::string& v : names) {
    TrainConfig cfg = base;
    cfg.model.attention = v;
    cfg.name = v;
    cfg.run_dir = (fs::path(out) / v).string();
    dirs.push_back(cfg.run_dir);
    auto latest = latest_checkpoint(cfg.run_dir);
    if (latest && load_checkpoint(*latest).trainer.value("step", int64_t(0)) >= cfg.max_steps) {
      fmt::print("gpt2 compare: {} already finished in {}, reusing it\n", v, cfg.run_dir);
      continue;
    }
    cfg.resume = latest.has_value() && base.resume;
    fmt::print("\n=== {} ===\n", v);
    try {
      TrainResult r = train(cfg);
      if (r.interrupted) {
        fmt::print("gpt2 compare: interrupted; continue with the same command and --resume\n");
        return;
      }
    } catch (const ValueError& e) {
      // A diverged run is a result of the experiment, not a failure of the comparison.
      fmt::print("gpt2 compare: {} stopped: {}\n", v, e.message());
    }
  }
  // Runs made elsewhere (an ablation trained with `gpt2 train`) join the table and the report.
  for (const std::string& d : split_list(include)) dirs.push_back(d);
  std::vector<RunSummary> summaries;
  for (const auto& d : dirs) summaries.push_back(summarize(d));
  fmt::print("\n{}", compare_table(summaries));
  fs::path html = fs::path(out) / "report.html";
  write_report(dirs, html.string(), "keel: attention variants compared");
  fmt::print("gpt2 compare: report written to {}\n", html.string());
}
}  // namespace

void add_compare_command(CLI::App& app) {
  auto flags = std::make_shared<TrainConfig>();
  auto config_file = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto variants = std::make_shared<std::string>("mhsa,ls");
  auto include = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "compare", "Train one run per attention variant under the same budget; print a table, write report.html");
  cmd->add_option("--out", *out, "directory for the runs (OUT/<variant>) and OUT/report.html");
  cmd->add_option("--variants", *variants, "comma-separated attention variants: " + nn::attention_kind_names());
  cmd->add_option("--include", *include,
                  "comma-separated run directories trained elsewhere to add to the table and report");
  add_train_flags(*cmd, flags.get(), config_file.get());
  cmd->callback([cmd, flags, config_file, out, variants, include] {
    run_compare(*cmd, *flags, *config_file, *out, *variants, *include);
  });
}

}  // namespace keel::app
