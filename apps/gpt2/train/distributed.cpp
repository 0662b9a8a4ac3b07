// Data-parallel plumbing of `gpt2 train` (see distributed.h).
#include "apps/gpt2/train/distributed.h"

#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstring>
#include <cstdlib>
#include <fstream>
#include <iterator>

#include "core/dist/comm_mpi.h"
#include "core/dist/comm_tcp.h"
#include "core/dist/comm_nccl.h"
#include "core/cuda/runtime.h"
#include "core/factory.h"

namespace keel::app {

namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < 0)
    throw ConfigError("launch", fmt::format("environment variable {}='{}' is not a non-negative integer", name, v));
  return int(x);
}

// FNV-1a over bytes: a stable hash to compare configurations and parameters across ranks.
uint64_t fnv1a(const void* data, size_t n, uint64_t h = 1469598103934665603ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// The hash on every rank, gathered: the ranks whose hash differs from rank 0's.
std::vector<int> ranks_differing(Communicator& comm, uint64_t h) {
  Tensor mine = from_vector<int64_t>({int64_t(h)}, {1});
  std::vector<int64_t> all = comm.all_gather(mine).to_vector<int64_t>();
  std::vector<int> bad;
  for (size_t r = 1; r < all.size(); ++r)
    if (all[r] != all[0]) bad.push_back(int(r));
  return bad;
}

}  // namespace

LaunchEnv detect_launch() {
  LaunchEnv e;
  if (std::getenv("OMPI_COMM_WORLD_SIZE")) {
    e.launcher = "mpirun";
    e.rank = env_int("OMPI_COMM_WORLD_RANK", 0);
    e.world = env_int("OMPI_COMM_WORLD_SIZE", 1);
    e.local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK", 0);
    e.local_world = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1);
  } else if (std::getenv("SLURM_PROCID") && std::getenv("SLURM_NTASKS")) {
    e.launcher = "srun";
    e.rank = env_int("SLURM_PROCID", 0);
    e.world = env_int("SLURM_NTASKS", 1);
    e.local_rank = env_int("SLURM_LOCALID", 0);
    e.local_world = env_int("SLURM_NTASKS_PER_NODE", env_int("SLURM_TASKS_PER_NODE", e.world));
  } else if (std::getenv("WORLD_SIZE")) {
    e.launcher = "torchrun";
    e.rank = env_int("RANK", 0);
    e.world = env_int("WORLD_SIZE", 1);
    e.local_rank = env_int("LOCAL_RANK", e.rank);
    e.local_world = env_int("LOCAL_WORLD_SIZE", e.world);
  }
  if (e.world < 1 || e.rank >= e.world || e.local_rank >= std::max(e.local_world, 1))
    throw ConfigError("launch", fmt::format("{}: rank {} (local rank {}) does not fit a world of {}", e.launcher,
                                            e.rank, e.local_rank, e.world));
  return e;
}

nlohmann::json Distributed::describe() const {
  return {{"backend", comm->backend()}, {"world", world()}, {"launcher", env.launcher}};
}

Distributed start_distributed(const TrainConfig& cfg, Device* device) {
  Distributed d;
  d.env = detect_launch();
  std::string backend = cfg.dist_backend;
  if (backend == "auto") backend = d.env.world == 1 ? "local" : device->is_cuda() ? "nccl" : "mpi";
  if (backend == "local") {
    if (d.env.world > 1)
      throw ConfigError("--dist-backend", fmt::format("{} started {} ranks but --dist-backend local runs one",
                                                      d.env.launcher, d.env.world),
                        "use --dist-backend auto, mpi or nccl");
    d.comm = std::make_shared<LocalCommunicator>();
    return d;
  }
  auto one_gpu_per_rank = [&] {
    if (!device->is_cuda()) return;
    int gpus = cuda::device_count();
    if (d.env.local_world > gpus)
      throw ConfigError("launch", fmt::format("{} ranks on this node but only {} GPU(s)", d.env.local_world, gpus),
                        "start at most one rank per GPU (mpirun -np / --nproc / srun --ntasks-per-node / "
                        "torchrun --nproc-per-node)");
    if (d.env.world > 1 || backend == "nccl") *device = Device::cuda(d.env.local_rank);
  };
  if (d.env.world > 1 && !launched_by_mpi()) {
    // torchrun on GPUs: NCCL needs only its unique id passed from rank 0 to the others, which
    // a TCP rendezvous at MASTER_ADDR:MASTER_PORT does without MPI.
    if (d.env.launcher == "torchrun" && device->is_cuda() && backend == "nccl") {
      const char* addr = std::getenv("MASTER_ADDR");
      const int port = env_int("MASTER_PORT", 0);
      if (!addr || !*addr || port == 0)
        throw ConfigError("launch", "torchrun variables without MASTER_ADDR and MASTER_PORT",
                          "set both (torchrun does), e.g. MASTER_ADDR=node1 MASTER_PORT=29500");
      one_gpu_per_rank();
      const char* t = std::getenv("KEEL_DIST_TIMEOUT");
      auto bootstrap = make_tcp_bootstrap(addr, port, d.env.rank, d.env.world, t && std::atof(t) > 0 ? std::atof(t) : 30);
      d.comm = make_nccl_communicator(*bootstrap, device->index);
      return d;
    }
    // Everything else finds its ranks through the MPI launcher.
    throw ConfigError("launch",
                      fmt::format("{} ranks from {} variables, but not started by an MPI launcher: keel joins "
                                  "processes through MPI (mpirun, or srun with PMIx), or, on GPUs, through "
                                  "torchrun's MASTER_ADDR:MASTER_PORT",
                                  d.env.world, d.env.launcher),
                      "start the ranks with `mpirun -np N gpt2 train ...`, `srun --mpi=pmix gpt2 train ...` or "
                      "`gpt2 train --nproc N ...`");
  }
  std::shared_ptr<Communicator> mpi = make_mpi_communicator();
  one_gpu_per_rank();
  if (backend == "mpi") {
    d.comm = mpi;
  } else if (backend == "nccl") {
    if (!device->is_cuda())
      throw ConfigError("--dist-backend", "nccl reduces GPU tensors but this run is on " + device->str(),
                        "use --dist-backend mpi on the CPU");
    d.comm = make_nccl_communicator(*mpi, device->index);
  } else {
    throw ConfigError("--dist-backend", "unknown backend '" + backend + "'", "use auto, local, mpi or nccl");
  }
  return d;
}

void check_same_on_all_ranks(Communicator& comm, const std::string& what, const std::string& text) {
  if (comm.world_size() == 1) return;
  std::vector<int> bad = ranks_differing(comm, fnv1a(text.data(), text.size()));
  if (!bad.empty())
    throw ConfigError("train", fmt::format("the {} of rank {} differs from rank 0's", what, bad[0]),
                      "start every rank with the same flags and files");
}

void broadcast_parameters(Communicator& comm, const std::vector<Tensor>& params) {
  if (comm.world_size() == 1) return;
  for (Tensor p : params) comm.broadcast(p, 0);
}

void check_parameters_identical(Communicator& comm, const std::vector<Tensor>& params, int64_t step) {
  if (comm.world_size() == 1) return;
  uint64_t h = 1469598103934665603ull;
  for (const Tensor& p : params) {
    Tensor c = p.detach().to(Device::cpu()).contiguous();
    h = fnv1a(c.raw_data(), size_t(c.numel()) * dtype_size(c.dtype()), h);
  }
  std::vector<int> bad = ranks_differing(comm, h);
  if (!bad.empty())
    throw ConfigError("train", fmt::format("after step {} the parameters of rank {} differ from rank 0's", step, bad[0]),
                      "the ranks diverged: a non-deterministic reduction or a rank-local change; report it");
}

double mean_over_ranks(Communicator& comm, double v) {
  if (comm.world_size() == 1) return v;
  Tensor t = from_vector<double>({v}, {1});
  comm.all_reduce_mean(t);
  return t.to_vector<double>()[0];
}

bool any_rank(Communicator& comm, bool v) {
  if (comm.world_size() == 1) return v;
  Tensor t = from_vector<int32_t>({v ? 1 : 0}, {1});
  comm.all_reduce_max(t);
  return t.to_vector<int32_t>()[0] != 0;
}

void max_over_ranks(Communicator& comm, MaxLogit& m) {
  if (comm.world_size() == 1 || m.values().empty()) return;
  Tensor t = from_vector<float>(m.values(), {int64_t(m.values().size())});
  comm.all_reduce_max(t);
  MaxLogit merged(m.layers(), m.heads());
  merged.merge(t.to_vector<float>());
  m = merged;
}

double max_over_ranks(Communicator& comm, double v) {
  if (comm.world_size() == 1) return v;
  MaxLogit m(1, 1);
  m.merge({static_cast<float>(v)});
  max_over_ranks(comm, m);
  return m.top();
}

uint64_t dropout_seed_for_rank(uint64_t seed, int rank) {
  if (rank == 0) return seed;
  // splitmix64 of (seed, rank): streams of neighbouring ranks share no structure.
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * uint64_t(rank);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

int64_t grad_accum_for_resume(const TrainConfig& saved, int saved_world, const TrainConfig& cfg, int world) {
  const int64_t global = saved.batch_size * saved.grad_accum * saved_world;
  if (global == cfg.batch_size * cfg.grad_accum * world) return cfg.grad_accum;
  const int64_t per_step = cfg.batch_size * world;
  if (global % per_step != 0)
    throw ConfigError("train", fmt::format("--resume: the run's global batch is {} sequences ({} ranks x batch {} x "
                                           "accum {}), which {} ranks x batch {} cannot make up",
                                           global, saved_world, saved.batch_size, saved.grad_accum, world,
                                           cfg.batch_size),
                      "resume with a world size and --batch-size whose product divides the global batch");
  return global / per_step;
}

namespace {
pid_t g_job = 0;
extern "C" void forward_stop(int) {
  if (g_job > 0) ::kill(g_job, SIGUSR1);  // mpirun hands SIGUSR1 on to every rank
}
}  // namespace

int launch_local_ranks(int nproc) {
  require_mpi();  // built without MPI, or its library missing: say so before starting anything
  // This command line, without --nproc: every rank runs exactly what the user typed.
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  for (size_t at = 0; at < all.size();) {
    size_t end = all.find('\0', at);
    args.push_back(all.substr(at, end - at));
    at = end + 1;
  }
  std::vector<std::string> cmd{"mpirun", "-np", std::to_string(nproc), "--oversubscribe", "--bind-to", "none"};
  if (::geteuid() == 0) cmd.push_back("--allow-run-as-root");  // containers often run as root
  char* exe = ::realpath("/proc/self/exe", nullptr);
  cmd.push_back(exe ? exe : args[0]);
  std::free(exe);
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--nproc") {
      ++i;
      continue;
    }
    if (args[i].rfind("--nproc=", 0) == 0) continue;
    cmd.push_back(args[i]);
  }
  std::vector<char*> argv;
  for (auto& a : cmd) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  pid_t pid = ::fork();
  if (pid < 0) throw ConfigError("--nproc", "cannot start mpirun: fork failed");
  if (pid == 0) {
    ::setpgid(0, 0);  // Ctrl-C reaches this launcher only; it forwards a stop request
    ::execvp(argv[0], argv.data());
    std::fprintf(stderr, "gpt2: --nproc: cannot run mpirun (%s); install openmpi-bin\n", std::strerror(errno));
    std::_Exit(127);
  }
  g_job = pid;
  auto old_int = std::signal(SIGINT, forward_stop);
  auto old_term = std::signal(SIGTERM, forward_stop);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  std::signal(SIGINT, old_int);
  std::signal(SIGTERM, old_term);
  g_job = 0;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

}  // namespace keel::app
