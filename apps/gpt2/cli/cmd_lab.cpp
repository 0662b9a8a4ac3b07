// `gpt2 lab`: small classroom experiments that run on a laptop CPU (see docs/instability.md).
//   gpt2 lab dof   the degrees-of-freedom argument: one attention head fitted to a dense local
//                  target, global against local, over a grid of sequence length n and head width d
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <chrono>

#include "apps/gpt2/cli/commands.h"
#include "apps/gpt2/lab/lab_dof.h"
#include "apps/gpt2/run/seed.h"
#include "core/io.h"

namespace keel::app {

namespace {
void run_dof(const DofLabConfig& cfg, const std::string& out) {
  cfg.validate();
  fmt::print("gpt2 lab dof: one head fitted to a band of width p = {} ({} Adam steps per fit)\n", cfg.window,
             cfg.steps);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<DofFit> fits = run_dof_lab(cfg, [](const DofFit& f) {
    fmt::print("  n {:>5}  d {:>3}  {:<6}  KL {:.4f}  max|logit| {:.2f}\n", f.n, f.d, f.local ? "local" : "global",
               f.kl, f.max_logit);
    std::fflush(stdout);
  });
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fmt::print("\n{}", dof_table(fits));
  if (!out.empty()) {
    io::write_file_atomic(out, dof_report_html(cfg, fits), "lab dof");
    fmt::print("gpt2 lab dof: plots written to {}\n", out);
  }
  fmt::print("gpt2 lab dof: {} fits in {:.1f} s\n", fits.size(), secs);
}
}  // namespace

void add_lab_command(CLI::App& app) {
  CLI::App* lab = app.add_subcommand("lab", "Classroom experiments on the CPU (see docs/instability.md)");
  lab->require_subcommand(1);
  auto cfg = std::make_shared<DofLabConfig>();
  auto out = std::make_shared<std::string>("lab_dof.html");
  CLI::App* dof = lab->add_subcommand(
      "dof", "Fit one attention head to a dense local target: global vs local head, over n and d");
  dof->add_option("--n", cfg->n, "sequence lengths")->capture_default_str()->delimiter(',');
  dof->add_option("--d", cfg->d, "head widths")->capture_default_str()->delimiter(',');
  dof->add_option("--window", cfg->window, "p: the target's band and the local head's window")->capture_default_str();
  dof->add_option("--floor", cfg->floor, "share of the global target spread over all earlier positions")
      ->capture_default_str();
  dof->add_option("--input-dim", cfg->input_dim, "width of the fixed random inputs (0 = n)")->capture_default_str();
  dof->add_option("--steps", cfg->steps, "Adam steps per fit")->capture_default_str();
  dof->add_option("--lr", cfg->lr, "Adam learning rate")->capture_default_str();
  add_seed_option(*dof, cfg->seed, "seed of the inputs and initial weights");
  dof->add_option("--out", *out, "HTML page with the plots (empty: none)")->capture_default_str();
  dof->callback([cfg, out] { run_dof(*cfg, *out); });
}

}  // namespace keel::app
