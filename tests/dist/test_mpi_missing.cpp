// A gpt2 built with MPI on a machine without Open MPI's library: it does not link libmpi (the
// system loader would stop it before main), loads it only to run several processes, and says
// then that MPI is missing and how to install it. The library is hidden from the loader inside a
// mount namespace of the test's own (a bind mount of an empty file over it), so the machine's
// MPI stays as it is.
#include "dist_test.h"

#include <dlfcn.h>
#include <link.h>

#include "core/dist/comm_mpi_library.h"

using namespace keel;
using namespace keel::dist_test;

namespace {

// The file the system loader opens for `soname`.
std::string loaded_path(const char* soname) {
  void* h = ::dlopen(soname, RTLD_LAZY | RTLD_LOCAL);
  if (!h) return {};
  link_map* map = nullptr;
  std::string path;
  if (::dlinfo(h, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name) path = fs::canonical(map->l_name).string();
  return path;  // left loaded: unloading Open MPI is not supported
}

}  // namespace

TEST_CASE("gpt2 does not link libmpi: the system loader does not need it to start") {
  fs::path log = scratch().dir / "ldd.log";
  REQUIRE(run("ldd " + kGpt2, log) == 0);
  std::string text = read_text(log);
  INFO(text);
  CHECK(text.find("libc.so") != std::string::npos);  // ldd did list the libraries
  CHECK(text.find("libmpi") == std::string::npos);
}

TEST_CASE("a library that is not there, or not an MPI, is a ConfigError saying how to install MPI") {
  CHECK_THROWS_WITH_AS(load_mpi_library("libkeel-no-such-mpi.so.0"),
                       doctest::Contains("MPI is missing: cannot load libkeel-no-such-mpi.so.0"), ConfigError);
  CHECK_THROWS_WITH_AS(load_mpi_library("libkeel-no-such-mpi.so.0"), doctest::Contains("apt-get install libopenmpi3"),
                       ConfigError);
  CHECK_THROWS_WITH_AS(load_mpi_library("libc.so.6"), doctest::Contains("it has no MPI_"), ConfigError);
}

TEST_CASE("without libmpi, one process trains, and --nproc and mpirun say that MPI is missing") {
  const std::string lib = loaded_path(KEEL_MPI_LIBRARY);
  REQUIRE(!lib.empty());
  // Everything below runs in a mount namespace where lib reads as an empty file.
  fs::path probe = scratch().dir / "unshare.log";
  if (run("unshare --mount --propagation private sh -c 'mount --bind /dev/null " + lib + "'", probe) != 0) {
    std::printf("KEEL_SKIP: cannot hide %s in a mount namespace here (unshare --mount: %s); this test did not run\n",
                lib.c_str(), read_text(probe).substr(0, 120).c_str());
    return;
  }
  auto without_mpi = [&](const std::string& cmd) {
    fs::path script = scratch().dir / "without_mpi.sh";
    std::ofstream(script) << "mount --bind /dev/null " << lib << " || exit 99\nexec " << cmd << "\n";
    return "unshare --mount --propagation private sh " + q(script);
  };

  fs::path one = scratch().dir / "no_mpi_one";
  int rc = run(without_mpi(kGpt2 + train_args(one, "--batch-size 2", 2, 0)), scratch().dir / "no_mpi_one.log");
  INFO(read_text(scratch().dir / "no_mpi_one.log"));
  CHECK(rc == 0);
  CHECK(losses(one).size() == 2);

  const std::string missing = "MPI is missing: cannot load " + std::string(KEEL_MPI_LIBRARY);
  fs::path nproc_log = scratch().dir / "no_mpi_nproc.log";
  rc = run(without_mpi(kGpt2 + train_args(scratch().dir / "no_mpi_nproc", "--batch-size 2 --nproc 2", 2, 0)),
           nproc_log);
  std::string text = read_text(nproc_log);
  INFO(text);
  CHECK(rc == 1);
  CHECK(text.find(missing) != std::string::npos);
  CHECK(text.find("apt-get install libopenmpi3 openmpi-bin") != std::string::npos);
  CHECK(!fs::exists(scratch().dir / "no_mpi_nproc"));  // nothing started, nothing written

  // mpirun itself does not need libmpi: it starts the ranks, and each says what is missing.
  fs::path mpirun_log = scratch().dir / "no_mpi_mpirun.log";
  const std::string two_ranks = kMpirun + " -np 2 " + kGpt2;
  rc = run(without_mpi(two_ranks + train_args(scratch().dir / "no_mpi_mpirun", "--batch-size 2", 2, 0)), mpirun_log);
  text = read_text(mpirun_log);
  INFO(text);
  CHECK(rc != 0);
  CHECK(text.find("rank 0: keel::ConfigError in mpi: " + missing) != std::string::npos);
}
