// Data parallelism for `gpt2 train`: where this process sits in a multi-process launch, the
// communicator joining the ranks, and the few collective steps the training loop takes.
// docs/distributed.md explains the recipes (mpirun, srun, torchrun variables, --nproc) and
// what is reduced when.
//
// World size 1 (a plain `gpt2 train`) uses the local communicator: every call here is then a
// no-op, and the loop is the single-process one.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/gpt2/run/max_logit.h"
#include "apps/gpt2/train/train_config.h"
#include "core/device.h"
#include "core/dist/comm.h"
#include "core/tensor.h"

namespace keel::app {

// Read from the launcher's environment variables, in this order: Open MPI's mpirun
// (OMPI_COMM_WORLD_*), Slurm's srun (SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID), torchrun
// (RANK/WORLD_SIZE/LOCAL_RANK). Nothing set: rank 0 of 1.
struct LaunchEnv {
  int rank = 0, world = 1, local_rank = 0, local_world = 1;
  std::string launcher = "none";  // mpirun | srun | torchrun | none
};
LaunchEnv detect_launch();

struct Distributed {
  std::shared_ptr<Communicator> comm;
  LaunchEnv env;
  int rank() const { return comm->rank(); }
  int world() const { return comm->world_size(); }
  bool root() const { return comm->rank() == 0; }
  nlohmann::json describe() const;  // {"backend", "world", "launcher"}: printed and in config.json
};

// Starts the backend cfg.dist_backend asks for ("auto": local for one process, mpi on the CPU,
// nccl on GPUs) and, for several ranks on GPUs, moves *device to cuda:LOCAL_RANK. ConfigError
// for a launch it cannot serve (MPI missing, torchrun variables without an MPI launcher on
// the CPU, more ranks on a node than GPUs).
Distributed start_distributed(const TrainConfig& cfg, Device* device);

// ConfigError on every rank when `text` (a configuration) differs between ranks: compared by
// hash, so that a rank started with other flags cannot silently train something else.
void check_same_on_all_ranks(Communicator& comm, const std::string& what, const std::string& text);

// Every rank gets rank 0's parameters (the start of a run, and after a resume).
void broadcast_parameters(Communicator& comm, const std::vector<Tensor>& params);
// ConfigError on every rank when the parameters are not bit-identical on all ranks.
void check_parameters_identical(Communicator& comm, const std::vector<Tensor>& params, int64_t step);

// The mean of one number per rank, in f64.
double mean_over_ranks(Communicator& comm, double v);
// True when v is true on any rank (a stop request seen by one rank stops all).
bool any_rank(Communicator& comm, bool v);
// Elementwise max over ranks, NaN winning (a rank whose logits blew up must show).
void max_over_ranks(Communicator& comm, MaxLogit& m);
// v (>= 0, e.g. a largest |log Z|) merged over every rank as MaxLogit merges: NaN wins.
double max_over_ranks(Communicator& comm, double v);

// The dropout seed of `rank`, from the seed rank 0 uses: each rank draws its own masks (it
// sees other sequences; one mask for all would correlate them), deterministically from the
// run's seed, so a resume at the same world size is bit-exact. Rank 0 keeps `seed`, so one
// process draws what it always drew, and a checkpoint needs to hold rank 0's seed only (all
// ranks draw the same number of values, so they share the counter offset).
uint64_t dropout_seed_for_rank(uint64_t seed, int rank);

// Resume with another world size: the micro-batch B of this launch stays, and the gradient
// accumulation is chosen so that the global batch (world x B x accum) of the saved run is
// kept. Returns the grad_accum to use; ConfigError when it does not divide.
int64_t grad_accum_for_resume(const TrainConfig& saved, int saved_world, const TrainConfig& cfg, int world);

// `gpt2 train --nproc N`: runs this very command line (without --nproc) as N local ranks
// under the MPI launcher, forwarding Ctrl-C to every rank as a stop request. Returns the exit
// status of the job. ConfigError when keel has no MPI (not built with it, or its library is not
// installed).
int launch_local_ranks(int nproc);

}  // namespace keel::app
