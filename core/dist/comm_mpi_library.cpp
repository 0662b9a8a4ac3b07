// Loading MPI at run time (see comm_mpi_library.h).
#include "core/dist/comm_mpi_library.h"

#include <dlfcn.h>

#include <atomic>

#include "core/error.h"

namespace keel {

namespace {

constexpr const char* kInstall =
    "install Open MPI's runtime (on Debian 12: apt-get install libopenmpi3 openmpi-bin; .ci/setup installs it), "
    "or run one process: a keel without MPI trains, evaluates and samples as always";

[[noreturn]] void missing(const std::string& file, const std::string& why) {
  throw ConfigError("mpi", "MPI is missing: cannot load " + file + " (" + why +
                               "), which running several processes needs",
                    kInstall);
}

void* symbol(void* handle, const std::string& file, const char* name) {
  dlerror();
  void* p = dlsym(handle, name);
  if (!p) missing(file, std::string("it has no ") + name + ": not the MPI keel was built for");
  return p;
}

std::atomic<const MpiLibrary*> g_loaded{nullptr};

}  // namespace

MpiLibrary load_mpi_library(const std::string& file) {
  // RTLD_GLOBAL: Open MPI opens its own plugins (transports, launchers) with dlopen, and they
  // resolve libmpi's symbols from the global scope.
  void* h = dlopen(file.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (!h) {
    const char* why = dlerror();
    missing(file, why ? why : "unknown reason");
  }
  MpiLibrary lib;
#define KEEL_MPI_FUNCTION(name) lib.name = reinterpret_cast<decltype(lib.name)>(symbol(h, file, "MPI_" #name))
  KEEL_MPI_FUNCTION(Initialized);
  KEEL_MPI_FUNCTION(Finalized);
  KEEL_MPI_FUNCTION(Init_thread);
  KEEL_MPI_FUNCTION(Finalize);
  KEEL_MPI_FUNCTION(Abort);
  KEEL_MPI_FUNCTION(Comm_rank);
  KEEL_MPI_FUNCTION(Comm_size);
  KEEL_MPI_FUNCTION(Comm_set_errhandler);
  KEEL_MPI_FUNCTION(Error_string);
  KEEL_MPI_FUNCTION(Op_create);
  KEEL_MPI_FUNCTION(Test);
  KEEL_MPI_FUNCTION(Iallreduce);
  KEEL_MPI_FUNCTION(Ibcast);
  KEEL_MPI_FUNCTION(Iallgather);
  KEEL_MPI_FUNCTION(Ireduce_scatter_block);
  KEEL_MPI_FUNCTION(Ibarrier);
#undef KEEL_MPI_FUNCTION
#ifdef OPEN_MPI
  // Open MPI's handles are pointers to objects inside libmpi (mpi.h: &ompi_mpi_comm_world, ...).
#define KEEL_MPI_HANDLE(field, type, object) lib.field = static_cast<type>(symbol(h, file, object))
  KEEL_MPI_HANDLE(comm_world, MPI_Comm, "ompi_mpi_comm_world");
  KEEL_MPI_HANDLE(byte, MPI_Datatype, "ompi_mpi_byte");
  KEEL_MPI_HANDLE(uint16, MPI_Datatype, "ompi_mpi_uint16_t");
  KEEL_MPI_HANDLE(int32, MPI_Datatype, "ompi_mpi_int32_t");
  KEEL_MPI_HANDLE(int64, MPI_Datatype, "ompi_mpi_int64_t");
  KEEL_MPI_HANDLE(float32, MPI_Datatype, "ompi_mpi_float");
  KEEL_MPI_HANDLE(float64, MPI_Datatype, "ompi_mpi_double");
  KEEL_MPI_HANDLE(sum, MPI_Op, "ompi_mpi_op_sum");
  KEEL_MPI_HANDLE(errors_return, MPI_Errhandler, "ompi_mpi_errors_return");
#undef KEEL_MPI_HANDLE
#else
  // MPICH and its derivatives: handles are integer constants, known at compile time.
  lib.comm_world = MPI_COMM_WORLD;
  lib.byte = MPI_BYTE;
  lib.uint16 = MPI_UINT16_T;
  lib.int32 = MPI_INT32_T;
  lib.int64 = MPI_INT64_T;
  lib.float32 = MPI_FLOAT;
  lib.float64 = MPI_DOUBLE;
  lib.sum = MPI_SUM;
  lib.errors_return = MPI_ERRORS_RETURN;
#endif
  return lib;
}

const MpiLibrary& mpi_library() {
  if (const MpiLibrary* lib = g_loaded.load()) return *lib;
  // One process, one MPI: the first successful load is kept for the life of the process.
  static const MpiLibrary lib = load_mpi_library(KEEL_MPI_LIBRARY);
  g_loaded.store(&lib);
  return lib;
}

const MpiLibrary* mpi_library_if_loaded() { return g_loaded.load(); }

}  // namespace keel
