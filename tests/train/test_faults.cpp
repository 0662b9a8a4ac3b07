// Faults while the gpt2 binary trains: kill -9 at random moments of a run that checkpoints
// every step, SIGINT twice in quick succession, and a full disk (simulated with RLIMIT_FSIZE,
// under which a write past the limit fails with EFBIG, as on a full filesystem). After each:
// every listed checkpoint loads, no temporaries remain after a resume, and the resumed run's
// losses equal an uninterrupted run's bit for bit.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <random>
#include <thread>

#include "apps/gpt2/run/checkpoint.h"
#include "apps/gpt2/run/metrics.h"
#include "train_fixture.h"

using namespace keel;
using namespace keel::app;
namespace fs = std::filesystem;

namespace {
constexpr int kSteps = 8;

std::vector<std::string> train_args(const fs::path& run_dir, bool resume) {
  std::vector<std::string> a = {KEEL_GPT2_BIN, "train", "--data", testing::tiny_dataset().string(),
                                "--run-dir", run_dir.string(), "--preset", "tiny", "--n-embd", "32",
                                "--n-head", "2", "--seq-len", "32", "--batch-size", "2", "--device", "cpu",
                                "--max-steps", std::to_string(kSteps), "--ckpt-every", "1",
                                "--keep-checkpoints", "3", "--val-every", "0", "--val-batches", "1"};
  if (resume) a.push_back("--resume");
  return a;
}

// Starts the command; with fsize_limit > 0 its files cannot grow past that many bytes.
pid_t spawn(const std::vector<std::string>& args, rlim_t fsize_limit = 0) {
  std::vector<char*> argv;
  for (const auto& s : args) argv.push_back(const_cast<char*>(s.c_str()));
  argv.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid == 0) {  // only async-signal-safe calls until exec
    if (fsize_limit) {
      struct rlimit r {fsize_limit, fsize_limit};
      ::setrlimit(RLIMIT_FSIZE, &r);
      ::signal(SIGXFSZ, SIG_IGN);  // a write past the limit then fails with EFBIG
    }
    int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  REQUIRE(pid > 0);
  return pid;
}

int wait_for(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int run(const std::vector<std::string>& args, rlim_t fsize_limit = 0) { return wait_for(spawn(args, fsize_limit)); }

std::vector<double> train_losses(const fs::path& run_dir) {
  std::vector<double> out;
  for (const auto& r : read_metrics(metrics_path(run_dir)))
    if (r.kind == RecordKind::Train) out.push_back(r.loss);
  return out;
}

// Every checkpoint a reader would consider (step_* holding trainer.json) must load whole.
int check_listed_checkpoints_load(const fs::path& run_dir) {
  int n = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(run_dir) / "checkpoints", ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step_", 0) != 0 || !fs::exists(e.path() / "trainer.json")) continue;
    CHECK_NOTHROW(load_checkpoint(e.path()));
    ++n;
  }
  return n;
}

int temporaries(const fs::path& run_dir) {
  int n = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(run_dir) / "checkpoints", ec))
    if (e.path().filename().string()[0] == '.') ++n;
  return n;
}

const std::vector<double>& reference_losses() {
  static const std::vector<double> losses = [] {
    fs::path ref = testing::scratch_dir("fault_reference");
    REQUIRE(run(train_args(ref, false)) == 0);
    return train_losses(ref);
  }();
  return losses;
}
}  // namespace

TEST_CASE("kill -9 at random moments: listed checkpoints load, resume is bit-exact, no temporaries stay") {
  const auto& want = reference_losses();
  REQUIRE(want.size() == kSteps);
  fs::path dir = testing::scratch_dir("fault_kill");
  std::mt19937 rng(12345);
  std::uniform_int_distribution<int> delay_ms(20, 400);
  bool started = false;
  for (int attempt = 0; attempt < 40; ++attempt) {
    pid_t pid = spawn(train_args(dir, started && latest_checkpoint(dir).has_value()));
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms(rng)));
    ::kill(pid, SIGKILL);
    const int rc = wait_for(pid);
    started = true;
    check_listed_checkpoints_load(dir);
    if (rc == 0) break;  // it finished before the kill
    if (latest_checkpoint(dir) && latest_checkpoint(dir)->filename() == "step_00000008") break;
  }
  // Finish (or confirm finished) the run. A kill can leave a temporary (a checkpoint written or
  // pruned halfway); the next launch removes it, also when the run had already finished.
  REQUIRE(run(train_args(dir, latest_checkpoint(dir).has_value())) == 0);
  CHECK(check_listed_checkpoints_load(dir) >= 1);
  CHECK(temporaries(dir) == 0);
  CHECK(train_losses(dir) == want);
}

TEST_CASE("SIGINT twice in quick succession still stops cleanly at a checkpoint") {
  const auto& want = reference_losses();
  fs::path dir = testing::scratch_dir("fault_sigint");
  pid_t pid = spawn(train_args(dir, false));
  // Once a step is logged the signal handlers are installed (before that, SIGINT kills).
  for (int i = 0; i < 4000; ++i) {
    std::error_code ec;
    if (fs::exists(metrics_path(dir), ec) && fs::file_size(metrics_path(dir), ec) > 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ::kill(pid, SIGINT);
  ::kill(pid, SIGINT);
  CHECK(wait_for(pid) == 0);
  REQUIRE(latest_checkpoint(dir).has_value());
  check_listed_checkpoints_load(dir);
  if (latest_checkpoint(dir)->filename() != "step_00000008") REQUIRE(run(train_args(dir, true)) == 0);
  CHECK(train_losses(dir) == want);
}

TEST_CASE("a full disk during a checkpoint fails cleanly and keeps the previous checkpoint") {
  const auto& want = reference_losses();
  fs::path dir = testing::scratch_dir("fault_full");
  REQUIRE(run(train_args(dir, false)) == 0);
  // As if it died after step 6.
  fs::remove_all(dir / "checkpoints" / "step_00000008");
  fs::remove_all(dir / "checkpoints" / "step_00000007");
  const auto before = latest_checkpoint(dir);
  REQUIRE(before.has_value());
  // A model.safetensors is about 100 KB: at 32 KB per file the next checkpoint cannot be written.
  CHECK(run(train_args(dir, true), 32 << 10) == 1);
  CHECK(latest_checkpoint(dir) == before);
  check_listed_checkpoints_load(dir);
  // With space again, the run resumes and ends as if nothing had happened.
  REQUIRE(run(train_args(dir, true)) == 0);
  CHECK(temporaries(dir) == 0);
  CHECK(train_losses(dir) == want);
}

TEST_CASE("a launch on a finished run removes the temporaries a killed process left") {
  fs::path dir = testing::scratch_dir("fault_finished_temporaries");
  REQUIRE(run(train_args(dir, false)) == 0);
  // What a kill during the last checkpoint's pruning leaves: a renamed checkpoint of a dead pid.
  const fs::path stale = fs::path(dir) / "checkpoints" / ".del-step_00000004-2147483646";
  fs::create_directories(stale);
  REQUIRE(temporaries(dir) == 1);
  REQUIRE(run(train_args(dir, true)) == 0);  // nothing left to train
  CHECK(temporaries(dir) == 0);
  CHECK(check_listed_checkpoints_load(dir) >= 1);
}
