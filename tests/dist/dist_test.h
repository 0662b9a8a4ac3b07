// What the multi-process tests share: the gpt2 binary, a scratch directory, one small prepared
// dataset, the tiny training run they all compare, and jobs started in the background that a
// test can kill and must see end.
#pragma once

#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "apps/gpt2/run/metrics.h"
#include "nn/safetensors.h"
#include "temp_dir.h"

namespace keel::dist_test {

namespace fs = std::filesystem;

inline const std::string kGpt2 = KEEL_GPT2_BIN;
inline const std::string kMpirun = std::string(KEEL_MPIEXEC) + " --oversubscribe --bind-to none" +
                                   (::geteuid() == 0 ? " --allow-run-as-root" : "");

struct Scratch {
  keel::test::TempDir dir{"dist"};
  Scratch() {
    // Under AddressSanitizer: Open MPI's allocations outlive MPI_Finalize, which LeakSanitizer
    // would report as the ranks' leaks.
    ::setenv("ASAN_OPTIONS", "detect_leaks=0:abort_on_error=1:allocator_may_return_null=1", 1);
  }
};
inline Scratch& scratch() {
  static Scratch s;
  return s;
}
inline std::string q(const fs::path& p) {
  std::string s = "'";
  s += p.string();
  return s += "'";
}

inline std::string read_text(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// Runs a shell command, its output in `log`; returns the exit status.
inline int run(const std::string& cmd, const fs::path& log) {
  int st = std::system((cmd + " > " + q(log) + " 2>&1").c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

inline const fs::path& dataset() {
  static fs::path d = [] {
    fs::path out = scratch().dir / "data";
    int rc = run(kGpt2 + " prepare -i " + q(fs::path(KEEL_SOURCE_DIR) / "data/corpora/austen_6novels.txt.xz") +
                     " -o " + q(out) + " --train-vocab 300",
                 scratch().dir / "prepare.log");
    REQUIRE(rc == 0);
    return out;
  }();
  return d;
}

// A tiny model, 10 steps, checkpoints at 5 and 10, evaluation on 2 batches. No biases: the
// key bias of attention has a gradient that is exactly zero in exact arithmetic, so its
// computed gradient is pure rounding noise, which Adam scales up to lr-sized steps; any
// change of summation order (one rank or two) then moves it by ~lr, hiding what is compared.
// On (emulated) GPUs the heads are 32 wide, the narrowest the CUDA attention kernels take.
inline std::string train_args(const fs::path& run_dir, const std::string& extra, int max_steps = 10,
                              int ckpt_every = 5, const std::string& device = "cpu") {
  return " train --preset tiny --n-embd " + std::string(device == "cpu" ? "32" : "64") +
         " --n-head 2 --seq-len 32 --device " + device + " --bias 0 --warmup-steps 3 --max-steps " +
         std::to_string(max_steps) +
         " --lr 3e-3 --val-every 5 --val-batches 2 --ckpt-every " + std::to_string(ckpt_every) + " --data " +
         q(dataset()) + " --run-dir " + q(run_dir) + " " + extra;
}

inline std::vector<double> losses(const fs::path& run_dir) {
  std::vector<double> out;
  for (const auto& r : app::read_metrics(run_dir / "metrics.jsonl"))
    if (r.kind == app::RecordKind::Train) out.push_back(r.loss);
  return out;
}

inline NamedTensors final_model(const fs::path& run_dir, int step = 10) {
  char name[32];
  std::snprintf(name, sizeof name, "step_%08d", step);
  return nn::load_safetensors(run_dir / "checkpoints" / name / "model.safetensors").tensors;
}

// Largest relative difference of two runs' per-step losses and final parameters.
inline double max_rel_diff(const fs::path& a, const fs::path& b, int steps = 10) {
  auto la = losses(a), lb = losses(b);
  REQUIRE(la.size() == size_t(steps));
  REQUIRE(lb.size() == size_t(steps));
  double worst = 0;
  for (size_t i = 0; i < la.size(); ++i) worst = std::max(worst, std::abs(la[i] - lb[i]) / std::abs(lb[i]));
  auto ma = final_model(a, steps), mb = final_model(b, steps);
  REQUIRE(ma.size() == mb.size());
  for (size_t k = 0; k < ma.size(); ++k) {
    auto va = ma[k].second.to_vector<float>(), vb = mb[k].second.to_vector<float>();
    REQUIRE(va.size() == vb.size());
    for (size_t i = 0; i < va.size(); ++i)
      worst = std::max(worst, double(std::abs(va[i] - vb[i])) / std::max(1.0, double(std::abs(vb[i]))));
  }
  return worst;
}
inline bool bit_identical(const fs::path& a, const fs::path& b, int steps = 10) {
  if (losses(a) != losses(b)) return false;
  auto ma = final_model(a, steps), mb = final_model(b, steps);
  for (size_t k = 0; k < ma.size(); ++k)
    if (ma[k].second.to_vector<float>() != mb[k].second.to_vector<float>()) return false;
  return true;
}

// A shell command running in the background in a process group of its own, output to a log.
// The shell execs the command, so pid() is the command's own process (prefix variables with
// `env VAR=value`).
class Job {
 public:
  Job(const std::string& cmd, fs::path log) : log_(std::move(log)) {
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::setpgid(0, 0);
      std::string full = "exec " + cmd + " > " + q(log_) + " 2>&1";
      ::execl("/bin/sh", "sh", "-c", full.c_str(), (char*)nullptr);
      std::_Exit(127);
    }
  }
  ~Job() {
    if (running()) ::kill(-pid_, SIGKILL), ::waitpid(pid_, &status_, 0);
  }
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  bool running() {
    if (done_) return false;
    if (::waitpid(pid_, &status_, WNOHANG) == pid_) done_ = true;
    return !done_;
  }
  // Waits until the job ends or `seconds` pass; true when it ended.
  bool wait(double seconds) {
    auto start = std::chrono::steady_clock::now();
    while (running() && std::chrono::steady_clock::now() - start < std::chrono::duration<double>(seconds))
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    return !running();
  }
  // The exit status, or 128 + signal.
  int status() const {
    return WIFEXITED(status_) ? WEXITSTATUS(status_) : 128 + (WIFSIGNALED(status_) ? WTERMSIG(status_) : 0);
  }
  std::string log() const { return read_text(log_); }
  pid_t pid() const { return pid_; }

 private:
  fs::path log_;
  pid_t pid_ = -1;
  int status_ = 0;
  bool done_ = false;
};

// The processes whose command line contains `needle` and whose environment contains `env`
// (e.g. "OMPI_COMM_WORLD_RANK=1"; empty: any).
inline std::vector<pid_t> find_processes(const std::string& needle, const std::string& env = "") {
  std::vector<pid_t> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    if (read_text(e.path() / "cmdline").find(needle) == std::string::npos) continue;
    if (!env.empty() && read_text(e.path() / "environ").find(env) == std::string::npos) continue;
    out.push_back(pid_t(std::stoi(name)));
  }
  return out;
}

// Waits until `path` exists (a run's metrics: training has started) or `seconds` pass.
inline bool wait_for_file(const fs::path& path, Job& job, double seconds = 60) {
  auto start = std::chrono::steady_clock::now();
  while (!fs::exists(path) && job.running() &&
         std::chrono::steady_clock::now() - start < std::chrono::duration<double>(seconds))
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  return fs::exists(path);
}

}  // namespace keel::dist_test
