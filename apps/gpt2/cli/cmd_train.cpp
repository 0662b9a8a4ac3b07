// `gpt2 train`: one training run (see trainer.h for the loop, train_config.h for the fields).
#include <fmt/format.h>

#include <CLI/CLI.hpp>

#include <chrono>
#include <thread>

#include "apps/gpt2/cli/commands.h"
#include "apps/gpt2/cli/train_flags.h"
#include "apps/gpt2/train/distributed.h"
#include "apps/gpt2/train/trainer.h"
#include "core/dist/comm_mpi.h"
#include "core/io.h"

namespace keel::app {

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
    if (r.rank != 0 || r.already_finished) return;
    fmt::print("gpt2 train: {} at step {}: train loss {:.4f}, val loss {:.4f} (ppl {:.2f}); run in {}\n",
               r.interrupted ? "stopped" : "done", r.steps, r.final_loss, r.val_loss, r.val_perplexity, cfg.run_dir);
  });
}

}  // namespace keel::app
