// `gpt2 train`: one training run (see trainer.h for the loop, train_config.h for the fields).
#include <fmt/format.h>

#include <CLI/CLI.hpp>

#include <chrono>
#include <thread>

#include "apps/gpt2/commands.h"
#include "apps/gpt2/distributed.h"
#include "apps/gpt2/trainer.h"
#include "core/comm_mpi.h"
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

void add_train_command(CLI::App& app) {
  auto flags = std::make_shared<TrainConfig>();
  auto config_file = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("train", "Train a GPT-2 model on a prepared dataset");
  add_train_flags(*cmd, flags.get(), config_file.get());
  cmd->callback([cmd, flags, config_file] {
    TrainConfig cfg = resolve_train_config(*cmd, *flags, *config_file);
    if (cfg.nproc > 0 && !launched_by_mpi()) {
      // The launcher: N ranks of this command under mpirun; its exit status is theirs.
      int rc = launch_local_ranks(int(cfg.nproc));
      std::fflush(stdout);
      std::exit(rc);
    }
    TrainResult r;
    try {
      r = train(cfg);
    } catch (const Error& e) {
      if (!launched_by_mpi() || detect_launch().world == 1) throw;
      // Every rank says what it saw; then the whole job ends (MPI_Abort), since a rank that
      // failed alone would leave the others waiting in a collective. The pause lets ranks
      // that hit the same error (a configuration every rank checks) print it too.
      fmt::print(stderr, "gpt2: rank {}: {}\n", detect_launch().rank, e.what());
      std::fflush(stderr);
      std::this_thread::sleep_for(std::chrono::seconds(1));
      mpi_abort(1);
      throw;
    }
    mpi_finalize();
    if (r.rank != 0) return;
    fmt::print("gpt2 train: {} at step {}: train loss {:.4f}, val loss {:.4f} (ppl {:.2f}); run in {}\n",
               r.interrupted ? "stopped" : "done", r.steps, r.final_loss, r.val_loss, r.val_perplexity, cfg.run_dir);
  });
}

}  // namespace keel::app
