// keel's NCCL communicator with real processes, on the emulated GPU: `gpt2 train --device cuda`
// as 2 ranks, each a process with its own emulated device, whose collectives go through the
// emulated NCCL over TCP (core/cuda/emu/nccl.cpp). Launched by mpirun, by --nproc and by
// torchrun's variables, against one process with the double batch.
#include "dist_test.h"

using namespace keel;
using namespace keel::dist_test;

namespace {

// Two emulated GPUs on this machine: one per rank, as mpirun and --nproc place them.
const std::string kTwoGpus = "KEEL_EMU_DEVICES=2 ";

std::string cuda_args(const fs::path& run_dir, const std::string& extra, int max_steps = 10) {
  return train_args(run_dir, extra, max_steps, 5, "cuda");
}

// What every case compares against: one process, batch 4, on the emulated GPU.
const fs::path& world1_run() {
  static fs::path d = [] {
    fs::path run_dir = scratch().dir / "cuda_w1";
    int rc = run(kGpt2 + cuda_args(run_dir, "--batch-size 4"), scratch().dir / "cuda_w1.log");
    INFO(read_text(scratch().dir / "cuda_w1.log"));
    REQUIRE(rc == 0);
    return run_dir;
  }();
  return d;
}

const fs::path& world2_run() {
  static fs::path d = [] {
    fs::path run_dir = scratch().dir / "cuda_w2";
    int rc = run(kTwoGpus + kMpirun + " -np 2 " + kGpt2 + cuda_args(run_dir, "--batch-size 2"),
                 scratch().dir / "cuda_w2.log");
    INFO(read_text(scratch().dir / "cuda_w2.log"));
    REQUIRE(rc == 0);
    return run_dir;
  }();
  return d;
}

// torchrun's variables for rank r of 2 on this machine, rank 0 listening on a port of this test's own.
std::string torchrun_env(int rank) {
  const int port = 20000 + int(::getpid() % 20000);
  return "RANK=" + std::to_string(rank) + " LOCAL_RANK=" + std::to_string(rank) +
         " WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) + " ";
}

}  // namespace

TEST_CASE("NCCL over emulated GPUs: mpirun -np 2 and --nproc 2 equal one process with the double batch") {
  const fs::path& w2 = world2_run();
  CHECK(read_text(scratch().dir / "cuda_w2.log").find("backend nccl, world 2 (mpirun)") != std::string::npos);
  CHECK(max_rel_diff(w2, world1_run()) < 1e-6);

  fs::path nproc = scratch().dir / "cuda_nproc";
  int rc = run(kTwoGpus + kGpt2 + cuda_args(nproc, "--batch-size 2 --nproc 2"), scratch().dir / "cuda_nproc.log");
  INFO(read_text(scratch().dir / "cuda_nproc.log"));
  REQUIRE(rc == 0);
  CHECK(bit_identical(nproc, w2));
}

TEST_CASE("NCCL over emulated GPUs: ZeRO-1 equals plain data parallelism, bf16 gradients stay within 1e-3") {
  // ZeRO-1: ncclReduceScatter of the gradients, ncclAllGather of the parameters.
  fs::path z = scratch().dir / "cuda_zero";
  int rc = run(kTwoGpus + kMpirun + " -np 2 " + kGpt2 + cuda_args(z, "--batch-size 2 --zero 1"),
               scratch().dir / "cuda_zero.log");
  INFO(read_text(scratch().dir / "cuda_zero.log"));
  REQUIRE(rc == 0);
  CHECK(max_rel_diff(z, world2_run()) < 1e-6);

  // bf16 buckets: ncclAllReduce with ncclAvg on bf16, each pairwise sum rounded.
  fs::path b = scratch().dir / "cuda_bf16";
  rc = run(kTwoGpus + kMpirun + " -np 2 " + kGpt2 + cuda_args(b, "--batch-size 2 --reduce-dtype bf16"),
           scratch().dir / "cuda_bf16.log");
  INFO(read_text(scratch().dir / "cuda_bf16.log"));
  REQUIRE(rc == 0);
  auto lb = losses(b), l2 = losses(world2_run());
  REQUIRE(lb.size() == l2.size());
  double worst = 0;
  for (size_t i = 0; i < lb.size(); ++i) worst = std::max(worst, std::abs(lb[i] - l2[i]) / l2[i]);
  CHECK(worst < 1e-3);
  CHECK(worst > 0);  // the gradients did travel in bf16
}

TEST_CASE("NCCL over emulated GPUs: torchrun variables without MPI, and a killed rank ends the other") {
  // The NCCL id goes from rank 0 to rank 1 through keel's TCP rendezvous at MASTER_ADDR.
  fs::path t = scratch().dir / "cuda_torchrun";
  Job r1("env " + kTwoGpus + torchrun_env(1) + kGpt2 + cuda_args(t, "--batch-size 2"),
         scratch().dir / "cuda_torchrun1.log");
  int rc = run(kTwoGpus + torchrun_env(0) + kGpt2 + cuda_args(t, "--batch-size 2"),
               scratch().dir / "cuda_torchrun0.log");
  INFO(read_text(scratch().dir / "cuda_torchrun0.log"));
  REQUIRE(rc == 0);
  REQUIRE(r1.wait(60));
  INFO(r1.log());
  CHECK(r1.status() == 0);
  CHECK(read_text(scratch().dir / "cuda_torchrun0.log").find("backend nccl, world 2 (torchrun)") != std::string::npos);
  CHECK(max_rel_diff(t, world1_run()) < 1e-6);

  // Rank 1 killed while training: rank 0's next collective sees the connection close, aborts
  // its communicator and stops with NCCL's error, naming the call.
  fs::path k = scratch().dir / "cuda_kill";
  Job k0("env " + kTwoGpus + torchrun_env(0) + kGpt2 + cuda_args(k, "--batch-size 2", 1000000),
         scratch().dir / "cuda_kill0.log");
  Job k1("env " + kTwoGpus + torchrun_env(1) + kGpt2 + cuda_args(k, "--batch-size 2", 1000000),
         scratch().dir / "cuda_kill1.log");
  REQUIRE(wait_for_file(k / "metrics.jsonl", k0));
  ::kill(k1.pid(), SIGKILL);  // the job's shell exec'd gpt2: this is rank 1 itself
  REQUIRE(k1.wait(10));
  const bool ended = k0.wait(60);
  std::string log = k0.log();
  INFO(log);
  CHECK(ended);
  CHECK(k0.status() != 0);
  CHECK(log.find("remote process exited or there was a network error") != std::string::npos);
  CHECK(log.find("rank 0") != std::string::npos);
}
