// The MPI communicator: ranks are separate processes (on one machine or many) started by an
// MPI launcher (mpirun, srun), collectives on host tensors through Open MPI.
//
// It is what CPU runs and the multi-process tests use, and what a GPU run uses to bootstrap
// NCCL (the NCCL unique id is broadcast over it). keel builds without MPI too; then
// make_mpi_communicator() raises a ConfigError saying how to get it. Built with MPI, keel loads
// the MPI library only when a communicator is first made (comm_mpi_library.h), so one process
// runs on a machine without it, and asking for several says that MPI is missing.
//
// Reductions: floating tensors are reduced in f32 (f64 stays f64; f16 is widened to f32 and
// rounded back once; bf16 sums travel as bf16, half the bytes, each pairwise sum computed in
// f32 and rounded to bf16 as NCCL does), integers in i64. Open MPI's all-reduce algorithms (recursive
// doubling, ring) combine the same operands in the same order on every rank, so results are
// bit-identical across ranks; the trainer's parameter checksum verifies this at run time.
// Max uses a user-defined MPI operation that lets NaN win (MPI_MAX on floats drops it).
#pragma once

#include <memory>

#include "core/dist/comm.h"

namespace keel {

// True when keel was built with MPI.
bool mpi_built();

// Returns when this process can use MPI (keel built with it, and its library loadable), without
// initialising it; else the ConfigError make_mpi_communicator() would raise, saying what is
// missing and how to install it. For launchers, before they start processes that need MPI.
void require_mpi();

// True when this process was started by an MPI launcher (mpirun/mpiexec, srun with PMI/PMIx):
// read from the launcher's environment, without initialising MPI.
bool launched_by_mpi();

// Initialises MPI (once per process, thread level "funneled": only the calling thread makes
// MPI calls) and returns the world communicator. Every later call returns the same one.
// ConfigError when keel was built without MPI.
std::shared_ptr<Communicator> make_mpi_communicator();

// Ends this process's part in MPI at exit. Safe to call when MPI was never initialised.
void mpi_finalize();
// Kills every rank of the job (MPI_Abort) with `code`: for errors only some ranks saw, where
// waiting for the others would hang. Returns only when MPI is not initialised.
void mpi_abort(int code);

}  // namespace keel
