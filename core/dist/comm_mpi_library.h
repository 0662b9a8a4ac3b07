// The MPI library, loaded when first needed (dlopen) instead of linked.
//
// Why: a keel built with MPI must still start, and run everything in one process, on a machine
// where Open MPI's runtime is not installed. Linked, libmpi would be a dependency of every
// program using keel, and the system loader would stop `gpt2` before main with its own message.
// Loaded here, only an attempt to run several processes needs it, and then says plainly that
// MPI is missing and how to install it.
//
// Private to comm_mpi.cpp: it needs mpi.h for the types and the signatures. Every MPI function
// and predefined handle keel uses (MPI_COMM_WORLD, MPI_FLOAT, ...) comes from this table, never
// from a link-time symbol; in Open MPI the handles are the addresses of objects inside libmpi.
#pragma once

#define OMPI_SKIP_MPICXX 1  // the C API only: the C++ bindings live in another library
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <string>

namespace keel {

struct MpiLibrary {
  // The functions keel calls, with mpi.h's signatures.
  decltype(&MPI_Initialized) Initialized;
  decltype(&MPI_Finalized) Finalized;
  decltype(&MPI_Init_thread) Init_thread;
  decltype(&MPI_Finalize) Finalize;
  decltype(&MPI_Abort) Abort;
  decltype(&MPI_Comm_rank) Comm_rank;
  decltype(&MPI_Comm_size) Comm_size;
  decltype(&MPI_Comm_set_errhandler) Comm_set_errhandler;
  decltype(&MPI_Error_string) Error_string;
  decltype(&MPI_Op_create) Op_create;
  decltype(&MPI_Test) Test;
  decltype(&MPI_Iallreduce) Iallreduce;
  decltype(&MPI_Ibcast) Ibcast;
  decltype(&MPI_Iallgather) Iallgather;
  decltype(&MPI_Ireduce_scatter_block) Ireduce_scatter_block;
  decltype(&MPI_Ibarrier) Ibarrier;

  // The predefined handles keel uses.
  MPI_Comm comm_world;
  MPI_Datatype byte, uint16, int32, int64, float32, float64;
  MPI_Op sum;
  MPI_Errhandler errors_return;
};

// The library keel was built against (KEEL_MPI_LIBRARY, e.g. libmpi.so.40), loaded on the first
// call. ConfigError naming the file, the loader's reason and how to install it when it cannot be
// loaded; later calls try again.
const MpiLibrary& mpi_library();

// The library when an earlier call loaded it, else nullptr: for the shutdown paths, which must
// not load MPI just to find that it was never used.
const MpiLibrary* mpi_library_if_loaded();

// Loads `file` (a soname, searched as the system loader does, or a path) and resolves the table:
// what mpi_library() does with KEEL_MPI_LIBRARY. ConfigError as above, also for a library that
// lacks one of the symbols (not an MPI, or another MPI than keel was compiled for).
MpiLibrary load_mpi_library(const std::string& file);

}  // namespace keel
